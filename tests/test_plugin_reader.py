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
from streamtrain.readers import Malformed, open_reader, records_to_batch, validate_reader_config
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


def test_records_with_bad_labels_or_dense_values_are_counted_and_the_rest_trains():
    m = Malformed()
    records = [{"label": 1, "a": "x", "d": 1.5}, {"label": "yes", "a": "y", "d": 2.0},
               {"label": None, "a": "z"}, {"label": "0", "a": "w", "d": "oops"},
               {"label": 0, "a": "v", "d": float("nan")}, {"label": 1, "a": "u", "d": [1.0]},
               {"label": 0, "a": "t", "d": 1e39}, {"label": True, "a": "s", "d": "2.5"},
               {"label": 0, "a": "r", "d": None}]
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:make_lines",
                       "args": {"lines": records}}, 100, m)
    (batch,) = list(src.batches())
    assert batch.labels.tolist() == [1.0, 0.0, 1.0, 0.0]   # x, v (nan: missing), s ("2.5" is a number), r (missing)
    assert batch.dense[:, 0].tolist() == [1.5, 0.0, 2.5, 0.0]
    assert m.snapshot()["number"] == 3 and m.snapshot()["label"] == 2   # oops, [1.0], 1e39; yes, None


def test_records_take_labels_and_label_map_without_a_format():
    """A plug-in of dict records labelled -1/1 or yes/no could not be trained: the label options
    were format options, refused without a 'format'."""
    rows = [{"label": y, "a": f"x{i}"} for i, y in enumerate([-1, 1, "yes", "No", "maybe", 2])]
    m = Malformed()
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:make_lines", "args": {"lines": rows},
                       "label_map": {"-1": 0, "yes": 1, "no": 0}}, 10, m)
    (batch,) = list(src.batches())
    assert batch.labels.tolist() == [0.0, 1.0, 1.0, 0.0] and m.snapshot()["label"] == 2
    problems = validate_reader_config({"type": "plugin", "factory": "tests.test_plugin_reader:make_lines",
                                       "labels": [0, 1, 2], "label_map": {"yes": "one"}, "delimiter": ";"})
    assert [p for p, _ in problems] == ["reader.label_map", "reader.delimiter"]


def test_records_to_batch_without_a_counter_names_the_record_and_column():
    from streamtrain.readers import records_to_batch
    with pytest.raises(ValueError, match=r"record 1, column 'd': expected a finite number within float32's "
                                         r"range \(±3.4028235e38\), got 'oops'"):
        records_to_batch([{"label": 1, "d": 1.0}, {"label": 0, "d": "oops"}])


def drifting_records():
    """A dense column that later holds strings only, and a dense column that appears later."""
    def reader():
        for i in range(12):
            r = {"label": i % 2, "u": f"u{i}", "x": 1.0 if i < 4 else "high"}
            if i >= 8:
                r["y"] = 2.0
            yield r
    return reader


def test_each_columns_kind_is_fixed_by_the_first_batch_it_is_in(caplog):
    """Kinds were inferred batch by batch: a batch whose dense column held only strings made it a
    categorical field, and a dense column appearing later widened the dense input; both crashed the
    engine (``cannot reshape array``)."""
    m = Malformed()
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:drifting_records"}, 4, m)
    batches = list(src.batches())
    assert [b.size for b in batches] == [4]                         # records 4..11: x is not a number
    assert batches[0].dense_names == ("x",) and m.snapshot()["number"] == 8
    m2 = Malformed()
    rows = [{"label": 1, "x": 1.0}] * 4 + [{"label": 0, "x": 2.0, "y": 3.0, "c": "k"}] * 4
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:make_lines", "args": {"lines": rows}}, 4, m2)
    first, second = list(src.batches())
    assert first.dense_names == second.dense_names == ("x",) and set(second.sparse) == {"c"}
    assert "dense column 'y' first appears after the first batch" in caplog.text and m2.total == 0


def test_drifting_records_train_from_the_cli(tmp_path):
    summary = tmp_path / "s.json"
    out = subprocess.run([sys.executable, "-m", "streamtrain", "run", "lr", "--set",
                          'reader={"type": "plugin", "factory": "tests.test_plugin_reader:drifting_records"}',
                          "--set", "batch_size=4", "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
                          "--summary", str(summary)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(summary.read_text())["malformed_by_reason"]["number"] == 8
    assert "8 lines skipped as malformed: number 8" in out.stderr


def raises_after(n=5):
    def reader():
        for i in range(n):
            yield {"label": i % 2, "a": f"x{i}"}
        raise ConnectionError("upstream API returned 503")
    return reader


def test_an_exception_in_the_plugin_is_a_reader_error_naming_it(caplog):
    src = open_reader({"type": "plugin", "factory": "tests.test_plugin_reader:raises_after",
                       "args": {"n": 5}}, 2, Malformed())
    with pytest.raises(ReaderError, match=r"plug-in tests.test_plugin_reader:raises_after raised ConnectionError: "
                                          r"upstream API returned 503 \(after 5 items; its traceback is logged above\)"):
        list(src.batches())
    assert "raise ConnectionError" in caplog.text          # the plug-in's own line, in the logged traceback


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
    with pytest.raises(ReaderError, match="yielded an item of type float"):
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


def test_a_missing_number_as_pandas_or_a_file_writes_it_is_missing():
    """A generator over pandas rows (``df.to_dict("records")``) yields NaN for a missing number:
    each such record was counted bad (``number``) and dropped; "NA" likewise."""
    m = Malformed()
    b = records_to_batch([{"label": 1, "u": "a", "x": float("nan")}, {"label": 0, "u": "b", "x": "NA"},
                          {"label": 1, "u": "c", "x": np.float64("nan")}, {"label": 0, "u": "d", "x": 2.0},
                          {"label": 1, "u": "e", "x": "high"}], {"u": "sparse", "x": "dense"}, malformed=m)
    assert b.size == 4 and b.dense.ravel().tolist() == [0.0, 0.0, 0.0, 2.0] and m.snapshot()["number"] == 1
