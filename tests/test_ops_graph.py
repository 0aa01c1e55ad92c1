"""The engine through whole graphs: compute once, gradient sums over consumers, the state
machine, shared parameters, buffer reuse, and a whole-graph finite-difference check of every
example model."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.errors import LayerStateError
from streamtrain.graph import Graph, Schema
from streamtrain.params import init_dense, init_rows
from streamtrain.testing import random_batch

SCHEMA = Schema(sparse=("a", "b", "c"), dense=("d0", "d1", "d2"))


def batch_of(size=8, seed=0, **kw):
    return random_batch(size, multivalue=("c",), seed=seed, **kw)


def pull(g: Graph, ctx, *, noise=0.0, seed=0) -> None:
    """What the store does: every dense parameter and this batch's rows of every table
    (``noise`` moves them off their initial values, so zero biases and tiny rows are not special)."""
    rng = np.random.default_rng(seed)
    for name in g.dense_params:
        ctx.values[name] = init_dense(g.params[name], ctx.dtype)
    for name in g.table_params:
        ctx.values[name] = init_rows(g.params[name], ctx.table_ids[name], ctx.dtype)
    for v in ctx.values.values():
        v += (noise * rng.standard_normal(v.shape)).astype(ctx.dtype)


def step(g: Graph, ctx, batch, seed=0):
    """feed → forward → backward → gradients; the loss of the sum (reduction ``sum``) and copies
    of the gradients keyed by parameter name."""
    g.feed(ctx, batch)
    ctx.rng = np.random.default_rng(seed)        # the same dropout masks every run
    g.forward(ctx)
    g.backward(ctx)
    grads = g.gradients(ctx)
    out = {k: np.array(v) for k, v in grads.dense.items()}
    for name, (ids, rows) in grads.tables.items():
        np.testing.assert_array_equal(ids, ctx.table_ids[name])
        out[name] = np.array(rows)
    g.update(ctx)
    return ctx.loss * batch.size, out


def total_loss(g: Graph, ctx, batch, seed=0) -> float:
    g.feed(ctx, batch)
    ctx.rng = np.random.default_rng(seed)
    g.forward(ctx)
    return ctx.loss * batch.size


def graph_fd_check(g: Graph, batch, *, checks=6, eps=1e-6, rtol=1e-4, atol=1e-8, seed=0):
    """Whole-graph gradient of the summed loss against central differences, in float64."""
    ctx = g.context(dtype=np.float64, seed=seed)
    g.feed(ctx, batch)
    pull(g, ctx, noise=0.2, seed=seed)
    _, grads = step(g, ctx, batch, seed)
    rng = np.random.default_rng(seed)
    for name, value in ctx.values.items():
        analytic = grads.get(name, np.zeros_like(value)).reshape(-1)
        flat = value.reshape(-1)
        for i in rng.choice(flat.size, min(checks, flat.size), replace=False):
            old = flat[i]
            flat[i] = old + eps
            up = total_loss(g, ctx, batch, seed)
            flat[i] = old - eps
            down = total_loss(g, ctx, batch, seed)
            flat[i] = old
            numeric = (up - down) / (2 * eps)
            assert abs(analytic[i] - numeric) <= atol + rtol * max(abs(numeric), abs(analytic[i])), \
                f"d loss / d {name}[{i}]: analytic {analytic[i]:.8g} vs numeric {numeric:.8g}"
    return grads


def count_calls(layer, method):
    calls = []
    original = getattr(layer, method)

    def wrapper(*args):
        result = original(*args)
        calls.append(result)
        return result

    setattr(layer, method, wrapper)
    return calls


# ---- compute once, gradients summed over consumers ------------------------------------------
DIAMOND = [
    {"name": "x", "type": "dense_input"},
    {"name": "h", "type": "fc", "inputs": ["x"], "dim": 4, "activation": "tanh"},
    {"name": "a", "type": "fc", "inputs": ["h"], "dim": 1},
    {"name": "b", "type": "fc", "inputs": ["h"], "dim": 1, "activation": "sigmoid"},
    {"name": "logit", "type": "add", "inputs": ["a", "b"]},
    {"name": "loss", "type": "logloss", "inputs": ["logit"]},
]


def test_diamond_computes_once_and_sums_consumer_gradients():
    g = Graph.from_config(DIAMOND, SCHEMA)
    forwards = count_calls(g.layers["h"], "forward")
    grads_a = count_calls(g.layers["a"], "backward")
    grads_b = count_calls(g.layers["b"], "backward")
    ctx = g.context(dtype=np.float64)
    g.feed(ctx, batch_of())
    pull(g, ctx, noise=0.2)
    g.forward(ctx)
    g.forward(ctx, upto="a")
    g.forward(ctx, upto="h")
    assert len(forwards) == 1
    g.backward(ctx)
    np.testing.assert_allclose(ctx.grad_out["h"], grads_a[0][0] + grads_b[0][0])
    assert not np.allclose(grads_a[0][0], 0) and not np.allclose(grads_b[0][0], 0)
    g.feed(ctx, batch_of(seed=1))
    g.forward(ctx)
    assert len(forwards) == 2                   # once per batch
    graph_fd_check(g, batch_of())


def test_a_layer_consumed_twice_by_one_layer_gets_both_gradients():
    layers = [{"name": "x", "type": "dense_input"},
              {"name": "h", "type": "fc", "inputs": ["x"], "dim": 1},
              {"name": "twice", "type": "add", "inputs": ["h", "h"]},
              {"name": "loss", "type": "logloss", "inputs": ["twice"]}]
    g = Graph.from_config(layers, SCHEMA)
    grads = graph_fd_check(g, batch_of())
    assert np.abs(grads["h.W"]).sum() > 0


def test_a_gradient_handed_to_several_inputs_is_not_summed_into():
    """``add`` hands one array to each of its inputs; the first gradient a layer gets is kept
    as given (not copied), so ``h``'s second one (from ``t``) must go to a new sum, leaving the
    array ``g`` was handed (the same object) alone. Whole-graph FD on both branches."""
    layers = [{"name": "x", "type": "dense_input"},
              {"name": "h", "type": "fc", "inputs": ["x"], "dim": 2, "activation": "relu"},
              {"name": "g", "type": "fc", "inputs": ["x"], "dim": 2, "activation": "tanh"},
              {"name": "s", "type": "add", "inputs": ["h", "g"]},
              {"name": "t", "type": "fc", "inputs": ["h"], "dim": 2},
              {"name": "both", "type": "add", "inputs": ["s", "t"]},
              {"name": "out", "type": "fc", "inputs": ["both"], "dim": 1},
              {"name": "loss", "type": "logloss", "inputs": ["out"]}]
    g = Graph.from_config(layers, SCHEMA)
    graph_fd_check(g, batch_of(), checks=8)
    ctx = g.context()
    g.feed(ctx, batch_of())
    pull(g, ctx, noise=0.2)
    g.forward(ctx)
    g.backward(ctx)
    gs = ctx.grad_out["s"]
    assert ctx.grad_out["g"] is gs and ctx.grad_out["h"] is not gs
    np.testing.assert_array_equal(ctx.grad_out["h"], gs + ctx.grad_out["t"] @ ctx.values["t.W"].T)


# (was an engine bug: backward() raised on a layer the loss does not use)
def test_a_layer_the_loss_does_not_use_does_not_break_backward():
    g = Graph.from_config([*DIAMOND, {"name": "unused", "type": "fc", "inputs": ["x"], "dim": 2}], SCHEMA)
    ctx = g.context()
    g.feed(ctx, batch_of())
    pull(g, ctx)
    step(g, ctx, batch_of())


# ---- the state machine ------------------------------------------------------------------------
def _state_error(g, ctx, phases):
    for phase in phases[:-1]:
        getattr(g, phase)(ctx)
    with pytest.raises(LayerStateError) as err:
        getattr(g, phases[-1])(ctx)
    return str(err.value)


@pytest.mark.parametrize("phases,layer,need,have", [
    (["backward"], "loss", "FORWARD", "NULL"),
    (["forward", "gradients"], "x", "BACKWARD", "FORWARD"),
    (["forward", "backward", "update"], "x", "GRADIENT", "BACKWARD"),
])
def test_out_of_order_phase_names_layer_and_both_states(phases, layer, need, have):
    g = Graph.from_config(DIAMOND, SCHEMA)
    ctx = g.context()
    g.feed(ctx, batch_of())
    pull(g, ctx)
    msg = _state_error(g, ctx, phases)
    assert f"'{layer}'" in msg and need in msg and have in msg, msg


def test_a_full_step_leaves_every_layer_updated_and_feed_resets():
    g = Graph.from_config(DIAMOND, SCHEMA)
    ctx = g.context()
    g.feed(ctx, batch_of())
    pull(g, ctx)
    step(g, ctx, batch_of())
    assert {s.name for s in ctx.status.values()} == {"UPDATE"}
    g.feed(ctx, batch_of(seed=1))
    assert {s.name for s in ctx.status.values()} == {"NULL"}


# ---- Paddle's two-tower cosine model: one projection shared by name -----------------------------
TOWERS = [
    {"name": "user", "type": "sparse_input", "fields": ["u1", "u2"]},
    {"name": "item", "type": "sparse_input", "fields": ["i1", "i2"]},
    {"name": "uemb", "type": "embedding", "inputs": ["user"], "dim": 4, "init_scale": 0.3},
    {"name": "iemb", "type": "embedding", "inputs": ["item"], "dim": 4, "init_scale": 0.3},
    {"name": "utower", "type": "fc", "inputs": ["uemb"], "dim": 4, "activation": "tanh", "param": "proj"},
    {"name": "itower", "type": "fc", "inputs": ["iemb"], "dim": 4, "activation": "tanh", "param": "proj"},
    {"name": "sim", "type": "cosine", "inputs": ["utower", "itower"]},
    {"name": "loss", "type": "mse", "inputs": ["sim"]},
]
TOWER_FIELDS = ("u1", "u2", "i1", "i2")


def test_two_towers_share_one_matrix_and_both_gradients_reach_it():
    g = Graph.from_config(TOWERS, Schema(sparse=TOWER_FIELDS))
    assert "proj.W" in g.dense_params and not any(n.startswith(("utower.", "itower.")) for n in g.params)

    def contribution(layer):       # what this tower adds to proj.W's gradient
        seen = []
        original = layer.backward

        def wrapper(ctx, gy):
            before = np.array(ctx.param_grads.get("proj.W", 0.0))
            result = original(ctx, gy)
            seen.append(ctx.param_grads["proj.W"] - before)
            return result
        layer.backward = wrapper
        return seen

    from_user, from_item = contribution(g.layers["utower"]), contribution(g.layers["itower"])
    grads = graph_fd_check(g, random_batch(12, fields=TOWER_FIELDS))
    assert np.abs(from_user[0]).sum() > 0 and np.abs(from_item[0]).sum() > 0
    np.testing.assert_allclose(grads["proj.W"], from_user[0] + from_item[0], rtol=1e-12, atol=1e-12)


def test_two_towers_train_with_hand_written_sgd():
    g = Graph.from_config(TOWERS, Schema(sparse=TOWER_FIELDS))
    batch = random_batch(32, fields=TOWER_FIELDS, cardinality=5, seed=3)
    ctx = g.context()                                   # float32, as in production
    g.feed(ctx, batch)
    pull(g, ctx)
    losses = []
    for _ in range(40):
        loss, grads = step(g, ctx, batch)
        losses.append(loss / batch.size)
        for name, grad in grads.items():
            ctx.values[name] -= np.float32(0.05) * grad
        assert all(v.dtype == np.float32 for v in ctx.values.values())
    assert losses[-1] < 0.5 * losses[0], losses


# ---- buffers ------------------------------------------------------------------------------------
def test_buffers_are_reused_for_the_same_batch_size_and_reallocated_for_another():
    layers = [{"name": "sparse", "type": "sparse_input"},
              {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 3},
              {"name": "x", "type": "dense_input"},
              {"name": "cat", "type": "concat", "inputs": ["emb", "x"]},
              {"name": "fc", "type": "fc", "inputs": ["cat"], "dim": 1},
              {"name": "loss", "type": "logloss", "inputs": ["fc"]}]
    g = Graph.from_config(layers, SCHEMA)
    ctx = g.context()

    def arrays(batch):
        g.feed(ctx, batch)
        pull(g, ctx)
        g.forward(ctx)
        g.backward(ctx)
        return [ctx.outputs["emb"], ctx.outputs["cat"], ctx.grad_out["cat"], ctx.param_grads["fc.W"]]

    first = arrays(batch_of(8, seed=0))
    second = arrays(batch_of(8, seed=1))
    assert all(a is b for a, b in zip(first, second))
    third = arrays(batch_of(5, seed=2))
    assert all(a is not c for a, c in zip(first[:3], third[:3]))
    assert third[0].shape == (5, 3, 3) and third[1].shape == (5, 12)


# ---- every example model, whole-graph FD --------------------------------------------------------
INPUTS = [{"name": "sparse", "type": "sparse_input"}, {"name": "dense", "type": "dense_input"}]
WIDE = [{"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 1, "shared": True},
        {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
        {"name": "dense_lin", "type": "fc", "inputs": ["dense"], "dim": 1}]
EMB = {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 4}


def fc(name, src, dim, activation="identity"):
    return {"name": name, "type": "fc", "inputs": [src], "dim": dim, "activation": activation}


def head(*logits):
    return [{"name": "logit", "type": "add", "inputs": list(logits)},
            {"name": "loss", "type": "logloss", "inputs": ["logit"]}]


MODELS = {
    "lr": [*INPUTS, *WIDE, *head("wide_sum", "dense_lin")],
    "fm": [*INPUTS, *WIDE, EMB, {"name": "fm", "type": "fm", "inputs": ["emb"], "reduce": True},
           *head("wide_sum", "fm", "dense_lin")],
    "deepfm": [*INPUTS, *WIDE, {**EMB, "dim": 8},
               {"name": "fm", "type": "fm", "inputs": ["emb"], "reduce": True},
               {"name": "deep_in", "type": "concat", "inputs": ["emb", "dense"]},
               fc("h1", "deep_in", 16, "relu"), fc("h2", "h1", 8, "relu"), fc("deep", "h2", 1),
               *head("wide_sum", "fm", "deep", "dense_lin")],
    "wide_deep": [*INPUTS, *WIDE, EMB, {"name": "deep_in", "type": "concat", "inputs": ["emb", "dense"]},
                  fc("h1", "deep_in", 8, "relu"), {"name": "drop", "type": "dropout", "inputs": ["h1"], "rate": 0.2},
                  fc("h2", "drop", 8, "relu"), fc("deep", "h2", 1), *head("wide_sum", "deep", "dense_lin")],
    "dcn": [*INPUTS, EMB, {"name": "x0", "type": "concat", "inputs": ["emb", "dense"]},
            {"name": "cross", "type": "cross", "inputs": ["x0"], "layers": 2, "init_scale": 0.1},
            fc("h1", "x0", 8, "relu"), {"name": "both", "type": "concat", "inputs": ["cross", "h1"]},
            fc("logit", "both", 1), {"name": "loss", "type": "logloss", "inputs": ["logit"]}],
    "pnn": [*INPUTS, EMB, {"name": "ip", "type": "inner_product", "inputs": ["emb"]},
            {"name": "z", "type": "concat", "inputs": ["emb", "ip", "dense"]},
            fc("h1", "z", 8, "relu"), fc("logit", "h1", 1), {"name": "loss", "type": "logloss", "inputs": ["logit"]}],
    "nfm": [*INPUTS, *WIDE, EMB, {"name": "bi", "type": "fm", "inputs": ["emb"]},
            fc("h1", "bi", 8, "relu"), fc("deep", "h1", 1), *head("wide_sum", "deep", "dense_lin")],
}


@pytest.mark.parametrize("model", sorted(MODELS))
def test_example_model_whole_graph_gradients(model):
    g = Graph.from_config(MODELS[model], SCHEMA)
    assert Graph.from_config(g.get_config(), SCHEMA).get_config() == g.get_config()
    grads = graph_fd_check(g, batch_of(8, values=True))
    assert set(grads) == set(g.params)                   # every parameter gets a gradient


@pytest.mark.parametrize("model", sorted(MODELS))
def test_example_model_float32_step_is_finite_and_float32(model):
    g = Graph.from_config(MODELS[model], SCHEMA)
    ctx = g.context()
    batch = batch_of(16, seed=4)
    g.feed(ctx, batch)
    pull(g, ctx)
    loss, grads = step(g, ctx, batch)
    assert np.isfinite(loss) and ctx.predictions.shape == (16,)
    assert all(v.dtype == np.float32 and np.isfinite(v).all() for v in grads.values())
