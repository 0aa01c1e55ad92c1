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


def test_the_multiclass_example_learns_ratings_per_example_better_than_vw_oaa(ratings, tmp_path, capsys):
    """``streamtrain run multiclass`` on MovieLens' ratings as 5 classes (``label_map`` 1-5 to
    0-4), one pass: its K-wide linear terms learn example by example (``softmax.learn``), to a
    multi-class logloss below Vowpal Wabbit's ``--oaa 5 --probabilities`` on the same rows
    (1.3090; ``bench/ratings.py``) and far below the same terms learnt per batch."""
    path, y = ratings
    label_map = json.dumps({str(r): r - 1 for r in range(1, 6)})
    args = ["run", "multiclass", "--set", f"reader.path={path}", "--set", "reader.label=rating",
            "--set", f"reader.label_map={label_map}", "--set", "metrics.enabled=false",
            "--set", "checkpoint.dir=null", "--summary", str(tmp_path / "s.json")]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "per-example terms (sequential loss 'loss'): wide, linear, bias" in err
    assert "inferred reader.labels [0, ..., 4]: the classes of the softmax_ce loss 'loss' (the dim of its input 'wide' through 'logit')" in err
    got = json.loads((tmp_path / "s.json").read_text())
    assert got["examples"] == len(y) and got["malformed"] == 0
    assert got["logloss"] < 1.305 and got["accuracy"] > 0.42, got            # 1.3007, 0.4252
    prior = np.bincount(y.astype(int))[1:] / len(y)
    assert got["logloss"] < -(prior * np.log(prior)).sum() - 0.15             # the classes' entropy: 1.48
    assert main([*args, "--set", "layers.loss.sequential=false"]) == 0
    capsys.readouterr()
    assert json.loads((tmp_path / "s.json").read_text())["logloss"] > 2.0   # per batch: 3.67


def test_a_multiclass_checkpoint_is_served_and_scored(ratings, tmp_path, capsys):
    """Served records carry no label: a ``softmax_ce`` model answers each with its K class
    probabilities (it raised on the missing label: a 500); ``eval`` scores the checkpoint on the
    same stream with its labels."""
    from streamtrain import shipped
    from streamtrain.serve.saved import CheckpointModel
    from streamtrain.serve.service import Service
    from streamtrain.serve.settings import serve_settings
    path, _ = ratings
    ckpt = tmp_path / "ckpt"
    reader = ["--set", f"reader.path={path}", "--set", "reader.label=rating", "--set",
              f"reader.label_map={json.dumps({str(r): r - 1 for r in range(1, 6)})}", "--set", "metrics.enabled=false"]
    assert main(["run", "multiclass", *reader, "--set", f"checkpoint.dir={ckpt}"]) == 0
    cfg = configmod.validate(configmod.load(shipped.resolve("multiclass"), ["serve.port=0"]))
    source = CheckpointModel(cfg, serve_settings(cfg), str(ckpt))
    try:
        records = [{"user": "196", "item": "242", "age": "40", "gender": "M", "occupation": "writer"}, {"user": "1"}]
        body = json.dumps({"records": records}).encode()
        got = np.array(Service(source, serve_settings(cfg), cfg["reader"]).predict(body, "application/json")["predictions"])
    finally:
        source.close()
    assert got.shape == (2, 5) and np.allclose(got.sum(axis=1), 1, atol=1e-5) and (got > 0).all()
    capsys.readouterr()
    summary = tmp_path / "eval.json"
    assert main(["eval", "multiclass", "--restore", str(ckpt), *reader, "--summary", str(summary)]) == 0
    scored = json.loads(summary.read_text())
    assert scored["examples"] == 100_000 and scored["logloss"] < 1.3, scored    # the model at the end: below its progressive 1.3007


@pytest.mark.parametrize("example", ["lr", "auto"])
def test_a_softmax_over_one_logit_is_refused_before_the_run(example, capsys):
    """A click model with its loss set to softmax_ce (``lr.json``, or ``auto.json`` whose
    candidates stopped at their first batch naming a candidate's layer, ``layers.a0g0_loss``)
    passed ``validate``; its reader took labels 0 and 1 and a warning called the other classes a
    regression's numbers. It is a config error naming the job's loss and what gives the 1."""
    from streamtrain import shipped
    assert main(["validate", shipped.resolve(example), "--set", "layers.loss.type=softmax_ce"]) == 2
    assert ("layers.loss: loss 'loss' is a softmax_ce over K >= 2 logits per example, but its input 'logit' gives 1 "
            "(the dim of 'wide'): give the layers that make the logits dim K (examples/multiclass.json sets wide, "
            "linear and bias to K)") in capsys.readouterr().err
    assert main(["validate", shipped.resolve("multiclass")]) == 0
