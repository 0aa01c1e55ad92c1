"""What a user who gives only ``reader.path`` meets: the file reader and the format its suffix
names are inferred (and said), a suffix that names none is refused with the choices, and a file
with no example line (empty, or a CSV header alone) says so."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from streamtrain import config as configmod

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["--set", "metrics.enabled=false", "--set", "checkpoint.dir=null"]


def run(*sets: str, summary: Path | None = None) -> subprocess.CompletedProcess:
    more = ["--summary", str(summary)] if summary else []
    return subprocess.run([sys.executable, "-m", "streamtrain", "run", "lr", *sum((["--set", s] for s in sets), []),
                           *QUIET, *more], capture_output=True, text=True, timeout=120, cwd=ROOT)


@pytest.mark.parametrize("name, fmt, text", [
    ("clicks.csv", "csv", "label,site\n" + "1,a\n0,b\n" * 50),
    ("clicks.CSV.gz", "csv", None),
    ("clicks.jsonl", "jsonl", '{"label": 1, "site": "a"}\n{"label": 0, "site": "b"}\n' * 50),
    ("clicks.ndjson", "jsonl", '{"label": 1, "site": "a"}\n' * 100),
    ("clicks.svm", "libsvm", "1 3:1 7:0.5\n0 2:1\n" * 50),
])
def test_a_path_alone_infers_the_file_reader_and_its_format(name, fmt, text, tmp_path):
    if text is None:
        (tmp_path / name).write_bytes(gzip.compress(b"label,site\n" + b"1,a\n0,b\n" * 50))
    else:
        (tmp_path / name).write_text(text)
    out = run(f"reader.path={tmp_path / name}", summary=tmp_path / "s.json")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "inferred reader.type file (reader.path is given and reader.type is not)" in out.stderr
    assert f"inferred reader.format {fmt} (the suffix of {tmp_path / name}" in out.stderr
    assert json.loads((tmp_path / "s.json").read_text())["examples"] == 100


def test_what_is_named_is_never_overridden(tmp_path):
    raw = {"reader": {"type": "synthetic"}, "layers": []}
    cfg = configmod.with_defaults(configmod.SCHEMA, {**raw, "reader": {**raw["reader"], "path": "x.csv"}})
    assert configmod.infer_reader(cfg, named_type=True) == [] and cfg["reader"] == {"type": "synthetic", "path": "x.csv"}
    cfg = {"reader": {"type": "file", "path": "x.csv", "format": "criteo"}}
    assert configmod.infer_reader(cfg, named_type=False) == [] and cfg["reader"]["format"] == "criteo"
    cfg = {"reader": {"type": "kafka", "path": "x.csv"}}
    assert configmod.infer_reader(cfg, named_type=False) == [] and "format" not in cfg["reader"]


def test_a_suffix_that_names_no_format_is_refused_with_the_choices(tmp_path):
    (tmp_path / "clicks.tsv").write_text("label\tsite\n1\ta\n")
    out = run(f"reader.path={tmp_path / 'clicks.tsv'}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert ("reader.format: required by reader type 'file': one of criteo, csv, jsonl, libsvm (a TSV with a "
            "header row is csv with delimiter '\\t'; Criteo's log is criteo)") in out.stderr


@pytest.mark.parametrize("text", ["", "label,site\n", "label,site\r\n\r\n"])
def test_a_file_with_no_example_line_says_so(text, tmp_path):
    path = tmp_path / "clicks.csv"
    path.write_text(text)
    out = run(f"reader.path={path}")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr.strip().splitlines()[-1].endswith(
        f"WARNING streamtrain: nothing was trained: {path} holds no example line (it is empty, or a header alone)")
