"""The job config's one schema: every section checked, unknown keys named with their path, the
docs' tables generated from it (``tests/test_docs.py`` holds the pages to them), and ``validate``
listing every problem at once (issue 15, defect 7)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamtrain import config as cfgmod
from streamtrain.cli import main
from streamtrain.schema import Option

DOCS = Path(__file__).resolve().parents[1] / "docs"
MODEL = [{"name": "x", "type": "dense_input"}, {"name": "loss", "type": "mse", "inputs": ["x"]}]


def problems(raw: dict) -> dict:
    return dict(cfgmod.problems(cfgmod.with_defaults(cfgmod.SCHEMA, {"layers": MODEL, **raw})))


def test_the_docs_show_every_table_of_the_schema():
    pages = "".join(page.read_text() for page in DOCS.glob("*.md"))
    for heading, table in cfgmod.tables().items():
        assert table in pages, f"the docs' table for {heading} differs from `python -m streamtrain.reference`"


def test_every_section_is_checked_with_its_path_and_known_keys():
    found = problems({"metrics": {"stall_seconds": -1, "refresh_seconds": "1", "lifecycle_seconds": 0,
                                  "colour": 1},
                      "log": {"format": "xml", "level": "LOUD", "every_second": 3},
                      "checkpoint": {"keep": 1.5}, "seed": "x", "name": 3})
    assert found == {
        "metrics.colour": "unknown key for metrics (known: enabled, host, lifecycle_seconds, max_connections, "
                          "port, refresh_seconds, stall_seconds, timeout_s, window)",
        "metrics.stall_seconds": "must be >= 0, got -1",
        "metrics.refresh_seconds": "expected int/float, got str '1'",
        "metrics.lifecycle_seconds": "must be > 0, got 0",
        "log.every_second": "unknown key for log (known: every_seconds, format, level)",
        "log.format": "expected one of text, json, got 'xml'",
        "log.level": "expected a logging level (DEBUG, INFO, WARNING, ERROR), got 'LOUD'",
        "checkpoint.keep": "expected int, got float 1.5",
        "seed": "expected int, got str 'x'",
        "name": "expected str/null, got int 3",
    }
    assert problems({"bogus": 1})["bogus"].startswith("unknown key for the job config (known: automl, batch_size, ")


def test_defaults_are_stated_once_in_the_schema():
    d = cfgmod.defaults()
    assert d["metrics"]["stall_seconds"] == cfgmod.METRICS["stall_seconds"].default == 300.0
    assert d["reader"] == {"type": "synthetic"} and d["store"] == {"backend": "memory"}
    assert "layers" not in d
    # a section given in part keeps the defaults of the rest; a kind's section keeps only its kind
    cfg = cfgmod.with_defaults(cfgmod.SCHEMA, {"metrics": {"port": 0}, "default_optimizer": {"type": "ftrl"},
                                               "store": {"urls": ["redis://h:1"]}})
    assert cfg["metrics"]["host"] == "127.0.0.1" and cfg["metrics"]["port"] == 0
    assert cfg["default_optimizer"] == {"type": "ftrl"}
    assert cfg["store"] == {"backend": "memory", "urls": ["redis://h:1"]}


def test_a_section_is_one_schema_entry(monkeypatch):
    """What another part (serve, graph) does to add its section: one Option in SCHEMA."""
    monkeypatch.setitem(cfgmod.SCHEMA, "serve", Option(fields={"port": Option(8080, (int,), doc="HTTP port")},
                                                       doc="HTTP predictions"))
    assert cfgmod.defaults()["serve"] == {"port": 8080}
    assert problems({"serve": {"port": "x", "host": 1}}) == {
        "serve.host": "unknown key for serve (known: port)",
        "serve.port": "expected int, got str 'x'"}


def test_validate_lists_option_and_graph_errors_together(tmp_path, capsys, monkeypatch):
    """Issue 15 defect 7: all three errors at once (the docs' example: tests/test_docs.py)."""
    (tmp_path / "job.json").write_text(json.dumps({"batch_size": -1, "layers": [
        {"name": "sparse", "type": "sparse_input"},
        {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 0},
        {"name": "fc1", "type": "fc", "inputs": ["fc9"], "dim": 1},
        {"name": "loss", "type": "logloss", "inputs": ["fc1"]}]}))
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "job.json"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n  ") == 3


def test_a_cycle_is_reported_beside_option_errors():
    found = problems({"layers": [
        {"name": "a", "type": "fc", "inputs": ["b"], "dim": -1},
        {"name": "b", "type": "fc", "inputs": ["a"], "dim": 1, "optimizer": {"type": "sgd", "lr": "x"}},
        {"name": "loss", "type": "mse", "inputs": ["a"], "colour": 1}]})
    assert found["layers[0].dim"] == "must be > 0, got -1"
    assert found["layers[1].optimizer.lr"] == "expected int/float, got str 'x'"
    assert "unknown option" in found["layers[2].colour"]
    assert found["layers"].startswith("cycle: ")


@pytest.mark.parametrize("reader", [{"type": "file", "format": "criteo"},
                                    {"type": "file", "path": "", "format": "criteo"}])
def test_a_file_reader_without_a_path_fails_validate(tmp_path, reader, capsys):
    """Issue 15 defect 7: a missing ``reader.path`` is a validate error, not a run-time one."""
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"reader": reader, "layers": MODEL}))
    assert main(["validate", str(path)]) == 2
    assert "reader.path: " in capsys.readouterr().err
    assert main(["validate", str(path), "--set", "reader.path=/data/x.tsv"]) == 0


def test_validate_lists_bad_overrides_with_the_config_problems(tmp_path, capsys):
    """A sibling of defect 7: a bad ``--set`` no longer hides the config's own problems."""
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"batch_size": 0, "layers": MODEL}))
    assert main(["validate", str(path), "--set", "layers.nope.dim=3", "--set", "seed",
                 "--set", "metrics.port=70000"]) == 2
    err = capsys.readouterr().err
    assert "  layers.nope.dim: no item named 'nope' in layers (names: x, loss)" in err
    assert "  --set: expected PATH=VALUE, got 'seed'" in err
    assert "  batch_size: must be > 0, got 0" in err
    assert "  metrics.port: expected a port number 0..65535 (0 = any free port), got 70000" in err
