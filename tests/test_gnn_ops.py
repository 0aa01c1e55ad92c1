"""Graph layer kinds: hand-computed values, finite differences on blocks whose source rows
outnumber their destination rows, and the engine's gradient where one tensor feeds both
``partial_linear`` and ``scatter_gather`` (GraphSAGE's self and neighbour terms)."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.batch import Batch
from streamtrain.context import Context
from streamtrain.errors import ShapeError
from streamtrain.graph import Graph, Schema
from streamtrain.graphstore.blocks import Block, Subgraph
from streamtrain.ops import LAYERS as REGISTRY, load_all
from streamtrain.testing import gradcheck

load_all()

# block 1 (innermost): dst rows 0, 1 (the seeds); src rows 0..3; row 1 has no edge in block 0
B1 = Block(4, 2, np.array([1, 2, 3, 0]), np.array([0, 0, 0, 1]))
# block 0 (outermost): 4 dst rows among 6 src rows
B0 = Block(6, 4, np.array([4, 5, 0, 2, 5]), np.array([0, 0, 2, 3, 3]))


def batch_with(blocks, labels=(0.0, 1.0, 1.0), seeds=(0, 1, 0), features=0):
    n = blocks[0].num_src
    feats = np.arange(n * features, dtype=np.float32).reshape(n, features)
    sub = Subgraph(list(blocks), np.arange(100, 100 + n, dtype=np.uint64), feats,
                   {"src": np.array(seeds), "dst": np.array(seeds[::-1])})
    return Batch(labels=np.array(labels, np.float32), subgraph=sub)


def run(kind, x, batch, values=None, **opts):
    layer = REGISTRY[kind]("l", ["x"] if x is not None else [], **opts)
    layer.build([x.shape[1:]] if x is not None else [], Schema())
    ctx = Context(["l"], dtype=np.float64)
    ctx.reset(batch)
    ctx.values = values or {}
    return layer, ctx, layer.forward(ctx, [x] if x is not None else [])


def test_scatter_gather_sum_and_mean_by_hand():
    x = np.arange(12, dtype=np.float64).reshape(6, 2)       # row r = (2r, 2r+1)
    batch = batch_with([B0, B1])
    _, _, out = run("scatter_gather", x, batch, block=0)
    want = np.array([[8 + 10, 9 + 11], [0, 0], [0, 1], [4 + 10, 5 + 11]])
    np.testing.assert_array_equal(out, want)
    _, _, out = run("scatter_gather", x, batch, block=0, reduce="mean")
    np.testing.assert_array_equal(out, want / np.array([2, 1, 1, 2])[:, None])


def test_indegree_norm_by_hand_zero_edges_give_zero():
    x = np.ones((4, 3))
    _, _, out = run("indegree_norm", x, batch_with([B0, B1]), block=0)
    np.testing.assert_allclose(out, np.array([[.5] * 3, [0] * 3, [1] * 3, [.5] * 3]))


def test_partial_linear_uses_the_first_num_dst_rows():
    x = np.arange(8, dtype=np.float64).reshape(4, 2)
    layer, ctx, out = run("partial_linear", x, batch_with([B0, B1]), {"l.W": np.array([[1.0], [10.0]])},
                          dim=1, block=1)
    np.testing.assert_array_equal(out, [[10.0], [32.0]])
    gx = layer.backward(ctx, np.array([[1.0], [2.0]]))[0]
    np.testing.assert_array_equal(gx, [[1, 10], [2, 20], [0, 0], [0, 0]])
    np.testing.assert_array_equal(ctx.param_grads["l.W"], [[0 + 4], [1 + 6]])


def test_seed_rows_pick_and_add_back():
    x = np.array([[1.0, 2.0], [3.0, 4.0]])
    layer, ctx, out = run("seed_rows", x, batch_with([B0, B1]))
    np.testing.assert_array_equal(out, [[1, 2], [3, 4], [1, 2]])
    gx = layer.backward(ctx, np.ones((3, 2)))[0]
    np.testing.assert_array_equal(gx, [[2, 2], [1, 1]])
    _, _, out = run("seed_rows", x, batch_with([B0, B1]), endpoint="dst")
    np.testing.assert_array_equal(out, [[1, 2], [3, 4], [1, 2]])


def test_node_input_rows_follow_node_ids_and_features():
    batch = batch_with([B0, B1], features=2)
    layer = REGISTRY["node_input"]("n", dim=1, features=2)
    layer.build([], Schema())
    ctx = Context(["n"], dtype=np.float64)
    ctx.reset(batch)
    ids = batch.subgraph.node_ids
    ctx.table_ids["n.table"], ctx.table_pos[("n", "n.table")] = ids[::-1].copy(), np.arange(6)[::-1].copy()
    ctx.values = {"n.table": np.arange(6, dtype=np.float64)[::-1, None] * 10}
    out = layer.forward(ctx, [])
    np.testing.assert_array_equal(out[:, 0], np.arange(6) * 10)
    np.testing.assert_array_equal(out[:, 1:], np.arange(12).reshape(6, 2))
    layer.backward(ctx, np.arange(18, dtype=np.float64).reshape(6, 3))
    np.testing.assert_array_equal(ctx.param_grads["n.table"][:, 0], np.arange(0, 18, 3)[::-1])


@pytest.mark.parametrize("kind,opts,rows,block", [
    ("scatter_gather", {}, 6, 0), ("scatter_gather", {"reduce": "mean"}, 4, 1),
    ("indegree_norm", {}, 4, 0), ("partial_linear", {"dim": 3}, 6, 0),
    ("partial_linear", {"dim": 2, "bias": True}, 4, 1), ("bias_act", {"activation": "relu"}, 5, 0),
    ("seed_rows", {}, 2, 1),
])
def test_finite_differences_on_uneven_blocks(kind, opts, rows, block):
    batch = batch_with([B0, B1])
    if kind != "bias_act" and kind != "seed_rows":
        opts = {**opts, "block": block}
    x = np.random.default_rng(0).standard_normal((rows, 3)) + 0.1
    layer = REGISTRY[kind]("l", ["x"], **opts)
    report = gradcheck(layer, [x], batch)
    assert report["input0"] < 1e-6


def test_node_input_finite_differences():
    layer = REGISTRY["node_input"]("n", dim=3, features=2)
    report = gradcheck(layer, [], batch_with([B0, B1], features=2))
    assert report["n.table"] < 1e-6


def test_wrong_rows_name_the_layer_and_block():
    with pytest.raises(ShapeError, match=r"layer 'l' \(scatter_gather\): input has 5 rows, the block has 6 source"):
        run("scatter_gather", np.ones((5, 2)), batch_with([B0, B1]), block=0)
    with pytest.raises(ValueError, match="carries no sampled blocks"):
        run("indegree_norm", np.ones((2, 2)), Batch(labels=np.zeros(2, np.float32)))
    with pytest.raises(IndexError, match="block 5 asked, the batch carries 2"):
        run("indegree_norm", np.ones((2, 2)), batch_with([B0, B1]), block=5)


SAGE = [
    {"name": "h0", "type": "node_input", "dim": 3, "features": 2, "init_scale": 0.5},
    {"name": "self0", "type": "partial_linear", "inputs": ["h0"], "dim": 4, "block": 0},
    {"name": "agg0", "type": "scatter_gather", "inputs": ["h0"], "block": 0},
    {"name": "norm0", "type": "indegree_norm", "inputs": ["agg0"], "block": 0},
    {"name": "neigh0", "type": "fc", "inputs": ["norm0"], "dim": 4, "bias": False},
    {"name": "sum0", "type": "add", "inputs": ["self0", "neigh0"]},
    {"name": "h1", "type": "bias_act", "inputs": ["sum0"], "activation": "tanh", "init": "normal",
     "init_scale": 0.3},
    {"name": "self1", "type": "partial_linear", "inputs": ["h1"], "dim": 3, "block": 1},
    {"name": "agg1", "type": "scatter_gather", "inputs": ["h1"], "block": 1, "reduce": "mean"},
    {"name": "neigh1", "type": "fc", "inputs": ["agg1"], "dim": 3, "bias": False},
    {"name": "sum1", "type": "add", "inputs": ["self1", "neigh1"]},
    {"name": "h2", "type": "bias_act", "inputs": ["sum1"], "init": "normal", "init_scale": 0.3},
    {"name": "seed", "type": "seed_rows", "inputs": ["h2"]},
    {"name": "loss", "type": "softmax_ce", "inputs": ["seed"]},
]


def test_one_tensor_feeding_partial_linear_and_scatter_gather_gets_the_sum():
    """The whole two-layer GraphSAGE through the engine: every parameter's gradient (the node
    table's rows included, which reach the loss through both consumers of ``h0`` and ``h1``)
    against central differences of the loss."""
    g = Graph.from_config(SAGE, Schema())
    batch = batch_with([B0, B1], labels=(0.0, 2.0, 1.0), features=2)
    ctx = g.context(dtype=np.float64)
    g.feed(ctx, batch)
    rng = np.random.default_rng(1)
    ctx.values = {n: rng.standard_normal((len(ctx.table_ids[n]), s.dim) if s.table else s.shape) * 0.7
                  for n, s in g.params.items()}

    def loss():
        values = ctx.values
        g.feed(ctx, batch)
        ctx.values = values
        g.forward(ctx)
        return ctx.loss * batch.size

    loss()
    g.backward(ctx)
    grads = {k: np.array(v) for k, v in ctx.param_grads.items()}
    assert set(grads) == set(g.params)
    for name, value in ctx.values.items():
        flat, analytic = value.reshape(-1), grads[name].reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + 1e-6
            up = loss()
            flat[i] = old - 1e-6
            down = loss()
            flat[i] = old
            assert analytic[i] == pytest.approx((up - down) / 2e-6, rel=1e-5, abs=1e-8), f"{name}[{i}]"


def test_no_gradient_flows_into_inputs_without_parameters_upstream():
    """Features-only node input: the engine asks for no gradient of it, so neither consumer
    (partial_linear, and scatter_gather through the chain) computes one; parameters still get theirs."""
    layers = [dict(cfg, dim=0) if cfg["name"] == "h0" else cfg for cfg in SAGE]
    g = Graph.from_config(layers, Schema())
    assert not g.needs_grad["h0"] and not g.needs_grad["agg0"] and not g.needs_grad["norm0"]
    assert g.needs_grad["neigh0"] and g.needs_grad["self0"]
    batch = batch_with([B0, B1], labels=(0.0, 2.0, 1.0), features=2)
    ctx = g.context(dtype=np.float64)
    g.feed(ctx, batch)
    rng = np.random.default_rng(2)
    ctx.values = {n: rng.standard_normal(s.shape) for n, s in g.params.items()}
    g.forward(ctx)
    g.backward(ctx)
    assert "h0" not in ctx.grad_out and "norm0" not in ctx.grad_out and "self0.W" in ctx.param_grads
