"""Plug-in readers: by dotted path and by a real entry point (a dist-info on sys.path)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from streamtrain.batch import Batch, SparseField
from streamtrain.errors import ConfigError, ReaderError
from streamtrain.readers import Malformed, open_reader, validate_reader_config
from streamtrain.readers.plugin import entry_points

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


# factories used by dotted path ---------------------------------------------------------------
def make_records(n=10):
    return lambda: ({"label": i % 2, "user": f"u{i % 3}", "age": float(i)} for i in range(n))


def make_lines(lines):
    return list(lines)


class Batches:
    """An iterable of ready batches with commit(): what a plug-in with its own offsets looks like."""

    def __init__(self, n=3):
        self.n, self.committed = n, []

    def __iter__(self):
        for i in range(self.n):
            ids = np.arange(4, dtype=np.uint64) + np.uint64(100 * i)
            yield Batch(labels=np.array([0, 1, 0, 1], np.float32),
                        sparse={"f": SparseField(ids, np.arange(5, dtype=np.int64))},
                        offsets={"seq": i + 1})

    def commit(self, offsets):
        self.committed.append(dict(offsets))


def test_dotted_path_dict_records_are_batched():
    m = Malformed()
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:make_records",
                       "args": {"n": 10}}, 4, m)
    batches = list(src.batches())
    assert [b.size for b in batches] == [4, 4, 2]
    assert batches[0].dense_names == ("age",) and set(batches[0].sparse) == {"user"}
    assert m.total == 0


def test_lines_are_parsed_by_the_format_and_bad_ones_counted():
    m = Malformed()
    lines = ["1 3:0.5 7:1", "0 3:1", "2 3:1", "1 x:y", b"\xff 1:1"]
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:make_lines",
                       "args": {"lines": lines}, "format": "libsvm"}, 100, m)
    (batch,) = list(src.batches())
    assert batch.size == 2
    assert m.snapshot() == {"decode": 1, "field_count": 0, "number": 1, "label": 1, "field_length": 0, "graph": 0, "too_large": 0}


def test_ready_batches_pass_through_and_commit_reaches_the_plugin():
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:Batches",
                       "args": {"n": 3}}, 256, Malformed())
    for b in src.batches():
        src.commit(b.offsets)
    assert src.plugin.committed == [{"seq": 1}, {"seq": 2}, {"seq": 3}]


def test_records_with_bad_labels_are_counted_and_skipped():
    m = Malformed()
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:make_lines",
                       "args": {"lines": [{"label": 1, "a": "x"}, {"label": 7, "a": "y"},
                                          {"a": "z"}, {"label": 0, "a": "w"}]}}, 10, m)
    (batch,) = list(src.batches())
    assert batch.labels.tolist() == [1.0, 0.0] and m.snapshot()["label"] == 2


def test_config_problems_are_listed():
    assert validate_reader_config({"type": "plugin", "factory": "no_such_mod:f"})[0][0] == "reader.factory"
    assert validate_reader_config({"type": "plugin", "factory": "bad spec"})[0][0] == "reader.factory"
    assert validate_reader_config({"type": "plugin"})[0][0] == "reader.factory"
    assert validate_reader_config({"type": "plugin", "entry_point": "nope"})[0][0] == "reader.entry_point"
    with pytest.raises(ConfigError):
        open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:make_records",
                     "format": "libsvm", "bogus": 1}, 4)
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:make_lines",
                       "args": {"lines": [3.5]}}, 4)
    with pytest.raises(ReaderError, match="yielded a float"):
        list(src.batches())


@pytest.fixture
def entry_point_dist(tmp_path, monkeypatch):
    """A real installed-looking distribution: a module + a .dist-info with entry_points.txt."""
    (tmp_path / "clickplug.py").write_text(textwrap.dedent("""
        def make_reader(n=5):
            def reader():
                for i in range(n):
                    yield {"label": i % 2, "page": "p%d" % (i % 2)}
            return reader
    """))
    info = tmp_path / "clickplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: clickplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[streamtrain.readers]\nclicks = clickplug:make_reader\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_entry_point_plugin(entry_point_dist):
    assert "clicks" in entry_points()
    src = open_reader({"type": "plugin", "entry_point": "clicks", "args": {"n": 7}}, 3, Malformed())
    assert [b.size for b in src.batches()] == [3, 3, 1]


def test_worked_example_trains_from_the_cli(tmp_path):
    """examples/plugin_reader.json (docs/plugins.md's example) runs and learns its planted rule."""
    summary = tmp_path / "s.json"
    out = subprocess.run([sys.executable, "-m", "streamtrain", "run", "examples/plugin_reader.json",
                          "--set", "metrics.enabled=false", "--summary", str(summary)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    s = json.loads(summary.read_text())
    assert s["examples"] == 20000 and s["auc"] > 0.62


def test_worked_example_runs_through_the_console_script(tmp_path):
    """Issue 15 defect 3: docs/plugins.md's command, as a user types it (the ``streamtrain`` script
    does not put the current directory on the path; ``python -m`` did, hiding the bug)."""
    script = Path(sys.executable).with_name("streamtrain")
    out = subprocess.run([str(script), "run", "examples/plugin_reader.json", "--set", "metrics.enabled=false",
                          "--set", "reader.args.n=600", "--summary", str(tmp_path / "s.json")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "s.json").read_text())["examples"] == 600
    out = subprocess.run([str(script), "validate", "examples/plugin_reader.json", "--set", "reader.seed=1",
                          "--set", "reader.format=criteo", "--set", "reader.colour=red"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "  reader.colour: unknown key for format 'criteo'" in out.stderr and "reader.reader" not in out.stderr
    assert "  reader.seed: unknown key for format 'criteo'" in out.stderr


def test_entry_point_plugin_from_the_cli(entry_point_dist, tmp_path):
    cfg = json.loads((ROOT / "examples" / "plugin_reader.json").read_text())
    cfg["reader"] = {"type": "plugin", "entry_point": "clicks", "args": {"n": 500}}
    cfg["metrics"] = {"enabled": False}
    (tmp_path / "c.json").write_text(json.dumps(cfg))
    env = {**__import__("os").environ, "PYTHONPATH": str(entry_point_dist)}
    out = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(tmp_path / "c.json"),
                          "--summary", str(tmp_path / "s.json")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads((tmp_path / "s.json").read_text())["examples"] == 500
