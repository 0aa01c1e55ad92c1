"""A multi-class job's labels: the classes 0..K−1 of a ``softmax_ce`` are the reader's labels
unless it names them, so a label that is not a class is a bad line, never an error inside the
loss that stops the job; labels that could let one through are refused before the run."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.cli import main

LAYERS = [{"name": "sparse", "type": "sparse_input"},
          {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 4, "shared": True},
          {"name": "pool", "type": "sum_pooling", "inputs": ["emb"]},
          {"name": "out", "type": "fc", "inputs": ["pool"], "dim": 5},
          {"name": "loss", "type": "softmax_ce", "inputs": ["out"]}]


@pytest.fixture
def job(tmp_path):
    path = tmp_path / "mc.json"
    path.write_text(json.dumps({"name": "mc", "batch_size": 64, "layers": LAYERS}))
    rng = np.random.default_rng(0)
    rows = [f"{c},u{rng.integers(0, 50)},i{rng.integers(0, 50)}" for c in rng.integers(0, 5, 2000)]
    rows.insert(700, "7,u1,i1")                                   # not a class of the 5
    data = tmp_path / "classes.csv"
    data.write_text("cls,user,item\n" + "\n".join(rows) + "\n")
    return path, data


def test_the_classes_are_the_readers_labels_and_another_is_a_bad_line(job, tmp_path, capsys):
    path, data = job
    summary = tmp_path / "s.json"
    code = main(["run", str(path), "--set", f"reader.path={data}", "--set", "reader.label=cls", "--set",
                 "metrics.enabled=false", "--summary", str(summary)])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "inferred reader.labels [0, ..., 4]: the classes of the softmax_ce loss 'loss' (the dim of its input 'out')" in err
    assert "labels 7 are numbers outside reader.labels [0, 1, 2, 3, 4]: their lines are skipped (label). Classes" in err
    got = json.loads(summary.read_text())
    assert got["examples"] == 2000 and got["malformed"] == 1 and 0 <= got["accuracy"] <= 1


@pytest.mark.parametrize("labels, accepts", [("null", "null (any number)"), ("[0, 1, 2, 3, 4, 5]", "[0, 1, 2, 3, 4, 5]"),
                                             ("[0.5, 1]", "[0.5, 1]")])
def test_labels_that_let_a_non_class_through_are_refused(job, labels, accepts):
    path, data = job
    cfg, found, _ = configmod.load_listing(str(path), [f"reader.path={data}", f"reader.labels={labels}"])
    assert not found
    assert dict(configmod.problems(cfg))["reader.labels"] == (
        f"loss 'loss' is a softmax_ce, whose labels are the class indices 0..4, but the reader accepts {accepts}: "
        f"give the classes (e.g. [0, 1, 2, 3, 4]; a label that is not one would stop the job)")
    cfg, _, said = configmod.load_listing(str(path), [f"reader.path={data}", "reader.labels=[0, 2]"])
    assert not configmod.problems(cfg) and not any("reader.labels" in s for s in said)   # some classes: the reader's choice
