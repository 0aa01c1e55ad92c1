"""Per-example (sequential) learning of the linear terms inside a mini-batch: a batch of B
predicts and learns exactly as B batches of one example; the implicit step and the
normalization against their closed forms; which layers take part."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from streamtrain.batch import Batch
from streamtrain.graph import Graph, Schema
from streamtrain.optim import make_optimizer
from streamtrain.store.memory import MemoryStore
from streamtrain.testing import random_batch
from streamtrain.trainer import Trainer

SCHEMA = Schema(sparse=("a", "b", "c"), dense=("d0", "d1", "d2"))
OPTIMIZERS = {
    "sgd": {"type": "sgd", "lr": 0.3},
    "adagrad": {"type": "adagrad", "lr": 0.5},
    "ftrl": {"type": "ftrl", "alpha": 0.5, "beta": 1.0, "l1": 0.0, "l2": 0.5},
}


def lr_layers(loss_opts: dict, optimizer: dict, *, cross=False, deep=False) -> list:
    wide_in = "cross" if cross else "sparse"
    layers = [
        {"name": "sparse", "type": "sparse_input"},
        {"name": "dense", "type": "dense_input"},
        {"name": "wide", "type": "embedding", "inputs": [wide_in], "dim": 1, "shared": True,
         "init": "zeros", "optimizer": optimizer},
        {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
        {"name": "linear", "type": "fc", "inputs": ["dense"], "dim": 1, "init": "zeros", "optimizer": optimizer},
        {"name": "bias", "type": "bias", "optimizer": optimizer},
    ]
    logits = ["wide_sum", "linear", "bias"]
    if cross:
        layers.insert(1, {"name": "cross", "type": "feature_cross", "inputs": ["sparse"]})
    if deep:
        layers += [
            {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 3, "shared": True},
            {"name": "flat", "type": "sum_pooling", "inputs": ["emb"]},
            {"name": "hidden", "type": "fc", "inputs": ["flat"], "dim": 4, "activation": "tanh",
             "optimizer": {"type": "adam", "lr": 0.01}},
            {"name": "deep_out", "type": "fc", "inputs": ["hidden"], "dim": 1,
             "optimizer": {"type": "adam", "lr": 0.01}},
        ]
        logits.append("deep_out")
    layers += [{"name": "logit", "type": "add", "inputs": logits},
               {"name": "loss", "type": "logloss", "inputs": ["logit"], **loss_opts}]
    return layers


def stream(n=96, seed=3, **kw) -> Batch:
    """Few distinct values per field, so examples of a batch share many rows (strong coupling);
    no missing values and numeric features of ±1, so every example's linear features have the
    same squared norm (the normalization is per batch: a batch of 1 would see its own)."""
    batch = random_batch(n, cardinality=4, missing=0.0, seed=seed, **kw)
    batch.dense = np.where(batch.dense < 0, -1.0, 1.0).astype(np.float32)
    return batch


def train(layers, data: Batch, batch_size: int, dtype=np.float64):
    graph = Graph.from_config(layers, SCHEMA)
    store = MemoryStore(dtype=dtype)
    store.declare(graph.params, {"type": "adagrad", "lr": 0.1})
    trainer = Trainer(graph, store, dtype=dtype)
    preds = []
    for start in range(0, data.size, batch_size):
        part = data.take(np.arange(start, min(start + batch_size, data.size)))
        preds.append(np.array(trainer.step(part).predictions, np.float64).reshape(-1))
    return np.concatenate(preds), store.snapshot(), trainer


@pytest.fixture
def tight(monkeypatch):
    """Newton run to convergence (the default stops at a 1e-4 logit step, error ~1e-6)."""
    import streamtrain.ops.sequential as seq
    monkeypatch.setattr(seq, "TOLERANCE", 1e-10)


def params(snap) -> dict:
    out = {name: arrays["value"] for name, arrays in snap.dense.items()}
    for name, arrays in snap.tables.items():
        order = np.argsort(arrays["ids"])
        out[name] = arrays["value"][order]
    return out


@pytest.mark.parametrize("implicit", [False, True])
@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_a_batch_learns_exactly_as_its_examples_one_by_one(opt, implicit, normalize, tight):
    layers = lr_layers({"sequential": True, "implicit": implicit, "normalize": normalize}, OPTIMIZERS[opt])
    data = stream()
    p1, snap1, _ = train(layers, data, 1)
    p16, snap16, _ = train(layers, data, 16)
    np.testing.assert_allclose(p16, p1, atol=1e-7)
    w1, w16 = params(snap1), params(snap16)
    for name in w1:
        np.testing.assert_allclose(w16[name], w1[name], atol=1e-7, err_msg=name)
    # the accumulators too: each example's squared gradient, not the batch sum's
    for name, arrays in snap1.dense.items():
        for slot in ("n", "z"):
            if slot in arrays:
                np.testing.assert_allclose(snap16.dense[name][slot], arrays[slot], atol=1e-7)


def test_default_tolerance_stays_within_1e_5_of_one_by_one():
    layers = lr_layers({"sequential": True}, OPTIMIZERS["ftrl"])
    data = stream()
    p1, _, _ = train(layers, data, 1)
    p16, _, _ = train(layers, data, 16)
    np.testing.assert_allclose(p16, p1, atol=1e-5)


def test_crossed_wide_part_learns_exactly_as_one_by_one(tight):
    # multi-valued: examples have different numbers of active features, so the per-batch
    # normalization would differ between a batch of 32 and one of 1; compare without it
    layers = lr_layers({"sequential": True, "normalize": False}, OPTIMIZERS["adagrad"], cross=True)
    data = stream(64, seed=5, multivalue=("c",))
    p1, snap1, _ = train(layers, data, 1)
    p32, snap32, _ = train(layers, data, 32)
    np.testing.assert_allclose(p32, p1, atol=1e-7)
    for name, w in params(snap1).items():
        np.testing.assert_allclose(params(snap32)[name], w, atol=1e-7, err_msg=name)


def test_without_sequential_a_batch_predicts_with_the_parameters_before_it():
    layers = lr_layers({}, OPTIMIZERS["sgd"])
    p16, _, _ = train(layers, stream(), 16)
    # zero-initialised linear model: the whole first batch is predicted at 0.5
    np.testing.assert_allclose(p16[:16], 0.5)
    seq, _, _ = train(lr_layers({"sequential": True}, OPTIMIZERS["sgd"]), stream(), 16)
    assert seq[0] == pytest.approx(0.5) and np.abs(seq[1:16] - 0.5).max() > 0.01


def test_implicit_step_solves_its_fixed_point():
    """One example, a bias only, SGD: the update uses rho = sigmoid(z - lr*rho) - y."""
    lr, y = 2.0, 1.0
    layers = [{"name": "bias", "type": "bias", "optimizer": {"type": "sgd", "lr": lr}},
              {"name": "loss", "type": "logloss", "inputs": ["bias"], "sequential": True, "normalize": False}]
    graph = Graph.from_config(layers, SCHEMA)
    store = MemoryStore(dtype=np.float64)
    store.declare(graph.params, {"type": "sgd", "lr": lr})
    trainer = Trainer(graph, store, dtype=np.float64)
    batch = stream(1)
    batch.labels[:] = y
    trainer.step(batch)
    rho = brentq(lambda r: r - (1 / (1 + np.exp(lr * r)) - y), -1, 1)     # z = 0 before
    assert store.dense["bias.b"][0] == pytest.approx(-lr * rho, abs=1e-9)
    # an explicit step would have jumped to lr * 0.5 = 1.0; the implicit one stops short of it
    assert 0 < store.dense["bias.b"][0] < lr * 0.5


def test_normalization_divides_step_sizes_by_root_mean_active_features():
    layers = [{"name": "sparse", "type": "sparse_input"},
              {"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 1, "shared": True,
               "init": "zeros", "optimizer": {"type": "sgd", "lr": 1.0}},
              {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
              {"name": "loss", "type": "logloss", "inputs": ["wide_sum"], "sequential": True,
               "implicit": False}]
    graph = Graph.from_config(layers, SCHEMA)
    store = MemoryStore(dtype=np.float64)
    store.declare(graph.params, {"type": "sgd", "lr": 1.0})
    trainer = Trainer(graph, store, dtype=np.float64)
    batch = stream(1)
    batch.labels[:] = 1.0
    trainer.step(batch)            # 3 active features: each weight moves by 0.5 / sqrt(3)
    np.testing.assert_allclose(store.tables["wide.table"].weights[:3, 0], 0.5 / np.sqrt(3))


def test_which_layers_learn_per_example():
    layers = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"], deep=True)
    graph = Graph.from_config(layers, SCHEMA)
    # deep_out is linear in its own weights but trained by Adam, which has no step size to predict with
    assert {layer.name for layer in graph.linear_layers} == {"wide", "linear", "bias", "deep_out"}
    store = MemoryStore()
    store.declare(graph.params, {"type": "adagrad"})
    trainer = Trainer(graph, store)
    assert [layer.name for layer in trainer.ctx.sequential] == ["wide", "linear", "bias"]
    # a layer whose parameter another layer shares, or one consumed twice, is left to the batch
    shared = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"])
    shared.insert(-2, {"name": "bias2", "type": "bias", "param": "bias"})
    shared[-2]["inputs"] = ["wide_sum", "linear", "bias", "bias2"]
    assert "bias" not in {layer.name for layer in Graph.from_config(shared, SCHEMA).linear_layers}
    twice = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"])
    twice[-2]["inputs"] = ["wide_sum", "linear", "bias", "bias"]
    assert "bias" not in {layer.name for layer in Graph.from_config(twice, SCHEMA).linear_layers}
    assert Graph.from_config(lr_layers({}, OPTIMIZERS["sgd"]), SCHEMA).linear_layers == []


def test_deep_parts_still_train_and_the_step_is_finite():
    layers = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"], deep=True)
    data = stream(128, seed=9)
    p, snap, trainer = train(layers, data, 32, dtype=np.float32)
    assert np.isfinite(p).all() and trainer.nonfinite == 0
    assert np.abs(snap.dense["hidden.W"]["m"]).max() > 0          # Adam saw gradients


def test_evaluation_predicts_from_the_parameters():
    layers = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"])
    data = stream(32)
    _, _, trainer = train(layers, data, 32)
    graph, store = trainer.graph, trainer.store
    ctx = graph.context(training=False, dtype=np.float64)
    graph.feed(ctx, data)
    dense, tables = graph.needs(ctx)
    ctx.values = store.pull(dense, tables, create=False)
    graph.forward(ctx)
    z = np.log(ctx.predictions / (1 - ctx.predictions))
    wide = store.pull([], {"wide.table": ctx.table_ids["wide.table"]}, create=False)["wide.table"][:, 0]
    pos = ctx.table_pos[("wide", "wide.table")]
    want = (np.bincount(np.tile(np.arange(32), 3), wide[pos], minlength=32)
            + data.dense @ store.dense["linear.W"][:, 0] + store.dense["linear.b"][0] + store.dense["bias.b"][0])
    np.testing.assert_allclose(z, want, atol=1e-6)


@pytest.mark.parametrize("kind", ["sgd", "adagrad", "ftrl"])
def test_rates_are_the_derivative_of_the_step(kind):
    """``rates`` is d w / d(-g) of ``step`` at fixed squares: checked by a small step."""
    hyper = {"ftrl": {"alpha": 0.3, "l1": 0.0, "l2": 0.7}}.get(kind, {"lr": 0.3})
    opt = make_optimizer({"type": kind, **hyper})
    rng = np.random.default_rng(0)
    w = rng.standard_normal(6)
    state = opt.init_state(w.shape, table=False, dtype=np.float64)
    opt.step(w, rng.standard_normal(6), state)               # move the state off zero
    sq = rng.uniform(0.1, 2.0, 6)
    g = 1e-6 * rng.standard_normal(6)
    w1, st1 = w.copy(), {k: v.copy() for k, v in state.items()}
    opt.step(w1, g, st1, sq)
    np.testing.assert_allclose((w - w1) / g, opt.rates(state, sq), rtol=1e-5)


def test_optimizers_without_step_size_say_so():
    with pytest.raises(NotImplementedError, match="adam"):
        make_optimizer({"type": "adam"}).rates({}, np.zeros(1))
    assert not make_optimizer({"type": "momentum"}).sequential


def test_sequential_needs_sum_reduction():
    from streamtrain.errors import ConfigError
    layers = lr_layers({"sequential": True, "reduction": "mean"}, OPTIMIZERS["sgd"])
    with pytest.raises(ConfigError, match="reduction 'sum'"):
        Graph.from_config(layers, SCHEMA)


def test_job_names_the_layers_it_learns_per_example(caplog):
    import logging
    from streamtrain import config as cfgmod
    from streamtrain.job import Job
    base = {"reader": {"type": "synthetic", "examples": 512, "fields": 3}, "batch_size": 256,
            "metrics": {"enabled": False}}
    with caplog.at_level(logging.INFO, logger="streamtrain"):
        Job(cfgmod.validate(cfgmod.merge(cfgmod.defaults(), {**base, "layers": lr_layers({"sequential": True}, OPTIMIZERS["ftrl"])}))).run()
    assert "per-example linear terms (sequential loss 'loss'): wide, linear, bias" in caplog.text
    adam = {"type": "adam", "lr": 0.01}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="streamtrain"):
        Job(cfgmod.validate(cfgmod.merge(cfgmod.defaults(), {**base, "layers": lr_layers({"sequential": True}, adam)}))).run()
    assert "is sequential but no layer qualifies" in caplog.text


@pytest.mark.parametrize("batch_size", [8, 64, 300])
def test_coupling_matrix_and_product_match_their_definition(batch_size):
    """M_kj = Σ_rows x_k η_j x_j over rows both touch, j < k: the exact product (the residual)
    and the Jacobian's matrix (dense block for shared rows, pairs for the others) both agree
    with it, whichever side of the dense/pairs threshold a row falls."""
    from streamtrain.ops.sequential import LinearTerm, Sequential
    rng = np.random.default_rng(batch_size)
    B, rows = batch_size, 40
    n = B * 5
    example = np.sort(rng.integers(0, B, n))
    pos = rng.zipf(1.5, n) % rows                    # a few rows many examples share, a long tail
    x = rng.uniform(0.5, 1.5, n)
    term = LinearTerm("w", example, pos, x, rows, (rows, 1))
    sgd = make_optimizer({"type": "sgd", "lr": 1.0})
    seq = Sequential([term], {"w": sgd}, {"w": {}}, B, normalize=False)
    eta_x = rng.uniform(0.1, 1.0, len(seq.x)) * seq.x
    X = np.zeros((B, rows))
    E = np.zeros((B, rows))
    np.add.at(X, (seq.ex, seq.row), seq.x)
    np.add.at(E, (seq.ex, seq.row), eta_x)
    want = np.tril(X @ E.T, -1)
    np.testing.assert_allclose(np.tril(seq.matrix(eta_x), -1), want, rtol=1e-5, atol=1e-5)
    v = rng.standard_normal(B)
    np.testing.assert_allclose(seq.lower_times(eta_x, v), want @ v, rtol=1e-10, atol=1e-10)
