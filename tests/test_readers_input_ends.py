"""Inputs that end or cannot be read: never silently (issue 24, item 9).

A gzip file cut short trains the whole lines before the cut, then the run fails (exit 1) with
a line that says so and how many lines were read; a path that is a directory, a device or a
pipe says what it is instead of "no such file"."""
from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

from streamtrain.readers import Malformed
from streamtrain.readers.files import TruncatedInput, file_reader

ROOT = Path(__file__).resolve().parents[1]


def criteo_lines(n: int, seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    rows = [("\t".join([str(int(rng.random() < 0.3)), *map(str, rng.integers(0, 50, 13)),
                        *(f"{c:08x}" for c in rng.integers(0, 500, 26))])) for _ in range(n)]
    return ("\n".join(rows) + "\n").encode()


def whole_lines_before(compressed: bytes) -> int:
    """Complete lines in what a gzip prefix decompresses to."""
    return zlib.decompressobj(wbits=31).decompress(compressed).count(b"\n")


@pytest.fixture
def truncated(tmp_path):
    data = gzip.compress(criteo_lines(20_000), compresslevel=6)
    cut = data[: len(data) * 6 // 10]
    path = tmp_path / "cut.tsv.gz"
    path.write_bytes(cut)
    return path, whole_lines_before(cut)


def run(config: dict, tmp_path, *args) -> subprocess.CompletedProcess:
    cfg = tmp_path / "job.json"
    cfg.write_text(json.dumps(config))
    return subprocess.run([sys.executable, "-m", "streamtrain", "run", str(cfg), *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def lr_job(path, tmp_path) -> dict:
    lr = json.loads((ROOT / "examples" / "lr.json").read_text())
    return {**lr, "batch_size": 1000, "reader": {"type": "file", "path": str(path), "format": "criteo"},
            "metrics": {"enabled": False}, "checkpoint": {"dir": str(tmp_path / "ckpt")}}


def test_a_truncated_gzip_trains_its_whole_lines_then_fails_saying_so(truncated, tmp_path):
    path, lines = truncated
    assert 5000 < lines < 20_000
    out = run(lr_job(path, tmp_path), tmp_path)
    assert out.returncode == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"streamtrain: {path} is truncated: the gzip stream ends before its end-of-stream marker")
    assert f"the {lines} lines before it were read ({lines} examples, 0 bad lines in all)" in last
    latest = (tmp_path / "ckpt" / "LATEST").read_text().strip()      # what was trained is checkpointed
    meta = json.loads((tmp_path / "ckpt" / latest / "meta.json").read_text())
    assert meta["examples"] == lines


@pytest.mark.parametrize("prefetch, parse_ahead", [(0, 0), (4, 2)])
def test_file_reader_yields_every_whole_line_then_raises(truncated, prefetch, parse_ahead):
    path, lines = truncated
    got = []
    with pytest.raises(TruncatedInput, match=f"the {lines} lines before it were read"):
        for batch in file_reader(path, "criteo", batch_size=512, prefetch=prefetch, parse_ahead=parse_ahead)():
            got.append(batch.size)
    assert sum(got) == lines


def test_whole_gzip_files_end_quietly(tmp_path):
    one = gzip.compress(criteo_lines(3000, seed=1))
    two = one + gzip.compress(criteo_lines(2000, seed=2))         # two members, as `cat a.gz b.gz`
    for data, n in ((one, 3000), (two, 5000)):
        path = tmp_path / "whole.tsv.gz"
        path.write_bytes(data)
        assert sum(b.size for b in file_reader(path, "criteo", batch_size=700)()) == n


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("kind, what", [("dir", "a directory"), ("dev", "a character device"),
                                        ("fifo", "a named pipe (FIFO)"), ("missing", "no such file")])
def test_a_path_that_is_not_a_file_says_what_it_is(kind, what, tmp_path, fifo):
    path = {"dir": tmp_path, "dev": Path("/dev/null"), "fifo": fifo, "missing": tmp_path / "nope.tsv"}[kind]
    out = run(lr_job(path, tmp_path), tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].startswith(f"streamtrain: cannot open '{path}': ")
    assert what in out.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("fmt, text", [
    ("jsonl", '{"label": 1, "c": "a"}\n{"label": 0, "c": "b"}\n'),
    ("libsvm", "1 3:1\n0 4:1\n"),
    ("csv", "label,c\n1,a\n0,b\n"),
])
@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("prefetch", [0, 4])
def test_a_byte_order_mark_at_the_start_is_not_part_of_the_first_line(fmt, text, gz, prefetch, tmp_path):
    """Notepad and PowerShell start a UTF-8 file with a byte order mark: the first JSON line
    was a `decode` line, a libsvm first label a `label` one."""
    data = b"\xef\xbb\xbf" + text.encode()
    path = tmp_path / ("f.gz" if gz else "f")
    path.write_bytes(gzip.compress(data) if gz else data)
    m = Malformed()
    batches = list(file_reader(str(path), fmt, {}, 16, m, prefetch=prefetch)())
    assert sum(b.size for b in batches) == 2 and m.total == 0
    assert batches[0].labels.tolist() == [1, 0]


def test_a_json_array_read_as_json_lines_says_what_it_is(tmp_path):
    path = tmp_path / "clicks.json"
    path.write_text(json.dumps([{"label": 1, "c": "a"}, {"label": 0, "c": "b"}], indent=2))
    done = subprocess.run([sys.executable, "-m", "streamtrain", "run", "lr", "--set", f"reader.path={path}",
                           "--set", "reader.format=jsonl", "--set", "metrics.enabled=false",
                           "--set", "checkpoint.dir=null"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"streamtrain: cannot read {path}: it holds a JSON array ('[' first), not JSON lines (one object a "
        "line): write one object per line, e.g. jq -c '.[]' in.json > in.jsonl")


def test_produce_sends_the_first_line_without_its_byte_order_mark(tmp_path):
    from streamtrain.produce import iter_lines
    path = tmp_path / "clicks.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"label": 1}\r\n{"label": 0}\r\n')
    assert list(iter_lines(str(path))) == [b'{"label": 1}\r', b'{"label": 0}\r']
