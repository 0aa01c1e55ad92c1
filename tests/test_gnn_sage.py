"""The ``sage`` layer kind gives the numbers of the layer-by-layer GraphSAGE it is made of, bit
for bit: forward, every gradient, and whole training runs (dropout included)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest

from streamtrain import config as C
from streamtrain.graph import Graph, Schema
from streamtrain.job import Job
from streamtrain.testing import random_batch

ROOT = Path(__file__).resolve().parents[1]


def expand(entry: dict) -> list[dict]:
    """A ``sage`` entry as the primitive entries it is made of, with the same parameter names."""
    n, x, b = entry["name"], entry["inputs"][0], entry.get("block", -1)
    extra = {k: entry[k] for k in ("optimizer",) if k in entry}
    weights = {"dim": entry["dim"], **{k: entry[k] for k in ("init", "init_scale") if k in entry}}
    mean = entry.get("aggregator", "mean") == "mean"
    rate = entry.get("dropout", 0)
    out = [
        {"name": f"{n}/self", "type": "partial_linear", "inputs": [x], "param": f"{n}.self", "block": b,
         **weights, **extra},
        {"name": f"{n}/agg", "type": "scatter_gather", "inputs": [x], "block": b},
        *([{"name": f"{n}/norm", "type": "indegree_norm", "inputs": [f"{n}/agg"], "block": b}] if mean else []),
        {"name": f"{n}/neigh", "type": "fc", "inputs": [f"{n}/norm" if mean else f"{n}/agg"], "param": f"{n}.neigh",
         "bias": False, **weights, **extra},
        {"name": f"{n}/add", "type": "add", "inputs": [f"{n}/self", f"{n}/neigh"]},
        {"name": f"{n}/act" if rate else n, "type": "bias_act", "inputs": [f"{n}/add"], "param": n,
         "activation": entry.get("activation", "identity"), **extra},
    ]
    if rate:
        out.append({"name": n, "type": "dropout", "inputs": [f"{n}/act"], "rate": rate})
    return out


def primitive(layers: list[dict]) -> list[dict]:
    return [p for e in layers for p in (expand(e) if e["type"] == "sage" else [copy.deepcopy(e)])]


TWO_LAYERS = [
    {"name": "h0", "type": "node_input", "dim": 3, "features": 2},
    {"name": "s0", "type": "sage", "inputs": ["h0"], "dim": 4, "activation": "relu", "dropout": 0.2, "block": 0},
    {"name": "s1", "type": "sage", "inputs": ["s0"], "dim": 2, "aggregator": "sum", "activation": "tanh",
     "block": 1, "init": "normal", "init_scale": 0.3},
    {"name": "seed", "type": "seed_rows", "inputs": ["s1"]},
    {"name": "out", "type": "fc", "inputs": ["seed"], "dim": 1},
    {"name": "loss", "type": "logloss", "inputs": ["out"]},
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_forward_and_every_gradient_equal_the_layer_by_layer_form(dtype):
    batch = random_batch(7, blocks=2, node_features=2, seed=4)
    graphs = [Graph.from_config(layers, Schema.of(batch)) for layers in (TWO_LAYERS, primitive(TWO_LAYERS))]
    assert graphs[0].params.keys() == graphs[1].params.keys()
    values, results = {}, []
    for g in graphs:
        ctx = g.context(dtype=dtype, seed=5)
        g.feed(ctx, batch)
        for n in sorted(g.params):
            rng = np.random.default_rng(len(values))
            spec = g.params[n]
            values.setdefault(n, rng.standard_normal((len(ctx.table_ids[n]), spec.dim) if spec.table else spec.shape))
        ctx.values = {n: v.astype(dtype) for n, v in values.items()}
        g.forward(ctx)
        g.backward(ctx)
        results.append((ctx.loss, np.array(ctx.predictions), {k: np.array(v) for k, v in ctx.param_grads.items()},
                        np.array(ctx.grad_out["h0"])))
    (l1, p1, g1, h1), (l2, p2, g2, h2) = results
    assert l1 == l2 and np.isfinite(l1)
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(h1, h2)                 # the input's gradient, both paths summed
    assert g1.keys() == g2.keys() == values.keys()
    for name in g1:
        np.testing.assert_array_equal(g1[name], g2[name], err_msg=name)


def test_graphsage_example_trains_to_the_same_numbers_in_both_forms():
    """``examples/graphsage.json`` (the seed's form) and the same model written with ``sage``
    entries train to the same predictions and parameters (dropout masks included)."""
    sets = ["reader.examples=2000", "reader.nodes=200", "metrics.enabled=false", "log.every_seconds=1000"]
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage.json", sets))
    layers = cfg["layers"]
    assert [x["type"] for x in layers].count("partial_linear") == 2   # kept layer by layer on purpose
    sage = [layers[0],
            {"name": "l0", "type": "sage", "inputs": ["h0"], "dim": 64, "activation": "relu", "dropout": 0.1,
             "block": 0},
            {"name": "l1", "type": "sage", "inputs": ["l0"], "dim": 4, "block": 1},
            {"name": "seed", "type": "seed_rows", "inputs": ["l1"]}, layers[-1]]
    summaries, stores = [], []
    for form in (sage, primitive(sage)):
        job = Job(json.loads(json.dumps({**cfg, "layers": form})))
        summaries.append(job.run())
        stores.append(job.store.snapshot())
    assert summaries[0]["accuracy"] == summaries[1]["accuracy"] > 0.5
    assert summaries[0]["logloss"] == summaries[1]["logloss"]
    for name, arrays in stores[0].dense.items():
        np.testing.assert_array_equal(arrays["value"], stores[1].dense[name]["value"], err_msg=name)


def test_graphsage_rec_example_is_written_with_sage_layers():
    layers = json.loads((ROOT / "examples" / "graphsage_rec.json").read_text())["layers"]
    kinds = [x["type"] for x in layers]
    assert kinds.count("sage") == 2 and "partial_linear" not in kinds and "scatter_gather" not in kinds
