"""A stream without categorical fields trains every example model on its numeric columns
(streamtrain/numeric_only.py): the layers that read only categorical fields are left out. Until
this, a CSV of numbers was refused by every example model ("no categorical fields to read")."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from streamtrain import config as configmod, saved as saved_checkpoint
from streamtrain.graph import Graph, Schema
from streamtrain.numeric_only import left_out, pruned

ROOT = Path(__file__).resolve().parents[1]
NUMERIC = Schema(sparse=(), dense=("a", "b", "c"))
KEPT = {
    "lr": ["dense", "linear", "bias", "logit", "loss"],
    "fm": ["dense", "linear", "bias", "logit", "loss"],
    "deepfm": ["dense", "linear", "bias", "deep_in", "deep1", "deep2", "deep_out", "logit", "loss"],
    "wide_deep": ["dense", "linear", "bias", "deep_in", "deep1", "deep2", "deep_out", "logit", "loss"],
    "dcn": ["dense", "linear", "bias", "x0", "cross", "deep1", "deep2", "joined", "out", "logit", "loss"],
    "pnn": ["dense", "linear", "bias", "deep_in", "deep1", "deep2", "deep_out", "logit", "loss"],
    "nfm": ["dense", "linear", "bias", "logit", "loss"],
}


@pytest.mark.parametrize("model", sorted(KEPT))
def test_each_example_keeps_its_numeric_half(model):
    layers = json.loads((ROOT / "examples" / f"{model}.json").read_text())["layers"]
    graph = Graph.from_config(layers, NUMERIC)
    assert [layer.name for layer in graph.order if layer.name in KEPT[model]] == \
        [n for n in [layer.name for layer in graph.order] if n in KEPT[model]]
    assert sorted(graph.layers) == sorted(KEPT[model])
    assert set(graph.left_out) == {c["name"] for c in layers} - set(KEPT[model])
    assert graph.layers["logit"].inputs == [n for n in ("linear", "deep_out", "out", "bias") if n in KEPT[model]]


def test_nothing_is_left_out_where_a_categorical_field_is_or_fields_are_named():
    layers = json.loads((ROOT / "examples" / "lr.json").read_text())["layers"]
    assert left_out(layers, Schema(sparse=("u",), dense=("a",))) == []
    named = [{**c, "fields": ["u"]} if c["type"] == "sparse_input" else c for c in layers]
    assert left_out(named, NUMERIC) == []
    assert pruned(layers, []) == layers


def test_a_csv_of_numbers_trains_lr_to_its_planted_weights(tmp_path):
    """y ~ Bernoulli(sigmoid(2a - b)), c is noise; numeric_transform none: the linear term's
    weights are the planted ones, and the progressive logloss is near the true model's."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(40_000, 3))
    p = 1 / (1 + np.exp(-(2 * x[:, 0] - x[:, 1])))
    y = (rng.random(40_000) < p).astype(int)
    path = tmp_path / "measurements.csv"
    path.write_text("y,a,b,c\n" + "".join(f"{t},{a:.4f},{b:.4f},{c:.4f}\n" for t, (a, b, c) in zip(y, x)))
    ckpt = tmp_path / "ckpt"
    out = subprocess.run(
        [sys.executable, "-m", "streamtrain", "run", "lr", "--set", f"reader.path={path}", "--set", "reader.label=y",
         "--set", 'reader.numeric=["a","b","c"]', "--set", "reader.numeric_transform=none",
         "--set", "metrics.enabled=false", "--set", f"checkpoint.dir={ckpt}", "--summary", str(tmp_path / "s.json")],
        capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("the stream has no categorical field: layers sparse, crosses, wide, wide_sum left out (they read only "
            "categorical fields); the model reads the numeric ones: a, b, c") in out.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    truth = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    assert summary["examples"] == 40_000 and summary["logloss"] < truth + 0.01
    cfg = configmod.load(ROOT / "examples" / "lr.json")
    saved = saved_checkpoint.read(str(ckpt))
    graph, store = saved.build(cfg, saved.schema)
    assert sorted(graph.layers) == sorted(KEPT["lr"])
    w = store.pull(["linear.W"], {})["linear.W"].ravel()
    np.testing.assert_allclose(w, [2.0, -1.0, 0.0], atol=0.15)


def test_automl_on_numbers_proposes_no_setting_that_changes_only_left_out_layers(tmp_path):
    """Before, a third of auto.json's proposals on a numeric stream changed crosses, the FM term
    or the wide rate: layers left out, so copies of a live candidate in a slot of four."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(30_000, 4))
    y = (rng.random(30_000) < 1 / (1 + np.exp(-(x[:, 0] - x[:, 1] + x[:, 2] * x[:, 3])))).astype(int)
    path = tmp_path / "measurements.csv"
    path.write_text("y,a,b,c,d\n" + "".join(f"{t},{r[0]:.3f},{r[1]:.3f},{r[2]:.3f},{r[3]:.3f}\n" for t, r in zip(y, x)))
    out = subprocess.run(
        [sys.executable, "-m", "streamtrain", "run", "auto", "--set", f"reader.path={path}", "--set", "reader.label=y",
         "--set", 'reader.numeric=["a","b","c","d"]', "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
         "--summary", str(tmp_path / "s.json")], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    born = [ast.literal_eval(line.split(" born: ", 1)[1]) for line in out.stderr.splitlines() if " born: " in line]
    start = born[0]
    assert len(born) >= 4
    for assign in born:
        assert "fm" not in assign["terms"] and assign["crosses"] == []
        assert all(assign[k] == start[k] for k in ("wide_rate", "wide_l2", "fm_dim", "products", "crosses"))
    assert "changes only layers it leaves out" in out.stderr
    assert json.loads((tmp_path / "s.json").read_text())["examples"] == 30_000
