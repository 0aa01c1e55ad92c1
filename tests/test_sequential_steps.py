"""One step of the per-example (sequential) engine against its closed form: each rule, the
implicit step's fixed point (with and without L1), per-example normalization, the FM term."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import brentq

from streamtrain.graph import Graph
from streamtrain.store.memory import MemoryStore
from streamtrain.testing import random_batch
from streamtrain.trainer import Trainer

from .sequential_helpers import OPTIMIZERS, SCHEMA, stream


def _one(layers, labels, dense=None, sparse_ids=None):
    graph = Graph.from_config(layers, SCHEMA)
    store = MemoryStore(dtype=np.float64)
    store.declare(graph.params, {"type": "sgd", "lr": 0.1})
    trainer = Trainer(graph, store, dtype=np.float64)
    batch = stream(len(labels))
    batch.labels[:] = labels
    result = trainer.step(batch)
    return store, np.asarray(result.predictions, np.float64), batch


def _bias(opt, kind="logloss", dim=1, **loss):
    return [{"name": "bias", "type": "bias", "dim": dim, "optimizer": opt},
            {"name": "loss", "type": kind, "inputs": ["bias"], "sequential": True, **loss}]


def _first_step(opt, g):
    """The closed form of a rule's first step from zero state on gradient ``g``."""
    h = OPTIMIZERS[opt]
    if opt == "sgd":
        return -h["lr"] * g
    if opt == "adagrad":
        return -h["lr"] * g / (abs(g) + 1e-7)
    return -np.sign(g) * max(abs(g) - h["l1"], 0) / ((h["beta"] + abs(g)) / h["alpha"] + h["l2"])   # FTRL: z = g, n = g²


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_one_explicit_step_of_each_rule(opt):
    """Two examples, one bias: the first is predicted at 0.5, its step is the rule's closed form,
    the second is predicted after it."""
    store, p, _ = _one(_bias(OPTIMIZERS[opt], implicit=False), [1.0, 0.0])
    w1 = _first_step(opt, 0.5 - 1.0)                 # the first example's logit gradient
    assert p[0] == pytest.approx(0.5, abs=1e-12)
    assert p[1] == pytest.approx(1 / (1 + np.exp(-w1)), abs=1e-12)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_one_explicit_squared_error_step_of_each_rule(opt):
    """mse: the first example (label 3) is predicted at 0, its gradient is 2 (0 − 3) and the
    second is predicted at the rule's step from it."""
    store, p, _ = _one(_bias(OPTIMIZERS[opt], "mse", implicit=False), [3.0, -1.0])
    assert p[0] == 0.0
    assert p[1] == pytest.approx(_first_step(opt, 2 * (0.0 - 3.0)), abs=1e-12)


@pytest.mark.parametrize("lr", [0.1, 5.0])
def test_implicit_squared_error_step_is_its_closed_form(lr):
    """One example, a bias, SGD: ρ = 2 (z − lr ρ − y), so ρ = 2 (0 − y) / (1 + 2 lr); the bias
    stops short of the label at any lr (an explicit step, 2 lr y, passes it for lr > ½)."""
    store, _, _ = _one(_bias({"type": "sgd", "lr": lr}, "mse"), [3.0])
    rho = 2 * (0.0 - 3.0) / (1 + 2 * lr)
    assert store.dense["bias.b"][0] == pytest.approx(-lr * rho, abs=1e-12)
    assert 0 < store.dense["bias.b"][0] < 3.0


def test_implicit_squared_error_step_with_l1_solves_its_fixed_point():
    """FTRL with L1 from zero: ρ = 2 (w(ρ) − y) with w(ρ) = −shrink(ρ, l1) / d, d from the
    explicit squares (r = 2 (0 − y))."""
    h = {"type": "ftrl", "alpha": 2.0, "beta": 1.0, "l1": 0.5, "l2": 0.0}
    store, _, _ = _one(_bias(h, "mse"), [3.0])
    r = 2 * (0.0 - 3.0)
    d = (h["beta"] + abs(r)) / h["alpha"]

    def w(rho):
        return -np.sign(rho) * max(abs(rho) - h["l1"], 0) / d

    rho = brentq(lambda q: q - 2 * (w(q) - 3.0), r, 0)
    assert store.dense["bias.b"][0] == pytest.approx(w(rho), abs=1e-12)


def test_implicit_step_solves_its_fixed_point():
    """One example, a bias only, SGD: the update uses rho = sigmoid(z - lr*rho) - y."""
    lr = 2.0
    store, _, _ = _one(_bias({"type": "sgd", "lr": lr}), [1.0])
    rho = brentq(lambda r: r - (1 / (1 + np.exp(lr * r)) - 1.0), -1, 1)     # z = 0 before
    assert store.dense["bias.b"][0] == pytest.approx(-lr * rho, abs=1e-12)
    # an explicit step would have jumped to lr * 0.5 = 1.0; the implicit one stops short of it
    assert 0 < store.dense["bias.b"][0] < lr * 0.5


def test_implicit_step_with_l1_solves_its_fixed_point():
    """FTRL with L1 from zero: w(ρ) = −shrink(ρ, l1) / d with d from the explicit squares; the
    implicit residual solves ρ = σ(−w(ρ)) − y, with w inside L1's dead zone for small ρ."""
    h = {"type": "ftrl", "alpha": 2.0, "beta": 1.0, "l1": 0.1, "l2": 0.0}
    store, _, _ = _one(_bias(h), [1.0])
    r = 0.5 - 1.0
    d = (h["beta"] + abs(r)) / h["alpha"]

    def w(rho):
        return -np.sign(rho) * max(abs(rho) - h["l1"], 0) / d

    rho = brentq(lambda q: q - (1 / (1 + np.exp(-w(q))) - 1.0), -1, 0)
    assert store.dense["bias.b"][0] == pytest.approx(w(rho), abs=1e-12)


def test_normalization_divides_an_examples_gradients_by_its_norm():
    layers = [{"name": "sparse", "type": "sparse_input"},
              {"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 1, "shared": True,
               "init": "zeros", "optimizer": {"type": "sgd", "lr": 1.0}},
              {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
              {"name": "loss", "type": "logloss", "inputs": ["wide_sum"], "sequential": True,
               "implicit": False}]
    store, _, batch = _one(layers, [1.0])
    active = sum(int(batch.sparse[f].offsets[1]) for f in SCHEMA.sparse)
    w = store.tables["wide.table"].weights[:active, 0]
    np.testing.assert_allclose(w, 0.5 / np.sqrt(active))


def test_fm_step_is_the_gradient_of_the_fm_term():
    """One example, SGD, explicit: each FM row moves by −lr·ρ·∂φ/∂v, ∂φ/∂v by finite differences
    of the fm layer's own forward."""
    lr = 0.7
    layers = [{"name": "sparse", "type": "sparse_input"},
              {"name": "v", "type": "embedding", "inputs": ["sparse"], "dim": 3, "shared": True,
               "init_scale": 0.5, "optimizer": {"type": "sgd", "lr": lr}},
              {"name": "fm", "type": "fm", "inputs": ["v"], "reduce": True},
              {"name": "loss", "type": "logloss", "inputs": ["fm"], "sequential": True, "implicit": False}]
    graph = Graph.from_config(layers, SCHEMA)
    store = MemoryStore(dtype=np.float64)
    store.declare(graph.params, {"type": "sgd", "lr": lr})
    batch = random_batch(1, cardinality=50, missing=0.0, seed=1)
    batch.labels[:] = 1.0
    ctx = graph.context(training=False, dtype=np.float64)
    graph.feed(ctx, batch)
    ids = ctx.table_ids["v.table"]
    v0 = store.pull([], {"v.table": ids})["v.table"].copy()

    def phi(v):
        ctx.values = {"v.table": v}
        graph.feed(ctx, batch)
        return float(graph.forward(ctx, "fm")[0, 0])

    rho = 1 / (1 + np.exp(-phi(v0))) - 1.0
    grad = np.zeros_like(v0)
    for i in np.ndindex(v0.shape):
        e = np.zeros_like(v0)
        e[i] = 1e-6
        grad[i] = (phi(v0 + e) - phi(v0 - e)) / 2e-6
    Trainer(graph, store, dtype=np.float64).step(batch)
    v1 = store.pull([], {"v.table": ids}, create=False)["v.table"]
    np.testing.assert_allclose(v1, v0 - lr * rho * grad, atol=1e-8)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_one_softmax_step_of_each_rule_is_the_gradient_of_the_loss(opt):
    """``softmax_ce`` over 3 logits, a bias of 3 alone: the first example (class 2) is predicted
    at a third each; each coordinate steps by its rule on the loss's gradient there, found by
    finite differences of the non-sequential layer's own forward (p − onehot); the second
    example is predicted at the softmax of the stepped bias."""
    graph = Graph.from_config([{"name": "bias", "type": "bias", "dim": 3},
                               {"name": "loss", "type": "softmax_ce", "inputs": ["bias"]}], SCHEMA)
    ctx = graph.context(training=False, dtype=np.float64)
    batch = stream(1)
    batch.labels[:] = 2.0
    graph.feed(ctx, batch)

    def loss(z):
        graph.loss.forward(ctx, [z.reshape(1, 3)])
        return ctx.loss

    eps = 1e-6
    g = np.array([(loss(np.eye(3)[c] * eps) - loss(-np.eye(3)[c] * eps)) / (2 * eps) for c in range(3)])
    np.testing.assert_allclose(g, [1 / 3, 1 / 3, -2 / 3], atol=1e-8)
    store, p, _ = _one(_bias(OPTIMIZERS[opt], "softmax_ce", dim=3), [2.0, 0.0])
    b = np.array([_first_step(opt, gc) for gc in g])
    np.testing.assert_allclose(p[0], 1 / 3, atol=1e-12)
    np.testing.assert_allclose(p[1], np.exp(b) / np.exp(b).sum(), atol=1e-7)
    store, _, _ = _one(_bias(OPTIMIZERS[opt], "softmax_ce", dim=3), [2.0])
    np.testing.assert_allclose(store.dense["bias.b"], b, atol=1e-7)


def test_softmax_normalization_divides_an_examples_gradients_by_its_norm():
    """A wide part of 3 outputs, SGD 1.0, one example of class 0: each of its rows moves by
    −(p − onehot) / √(its feature count), p a third each."""
    layers = [{"name": "sparse", "type": "sparse_input"},
              {"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 3, "shared": True,
               "init": "zeros", "optimizer": {"type": "sgd", "lr": 1.0}},
              {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
              {"name": "loss", "type": "softmax_ce", "inputs": ["wide_sum"], "sequential": True}]
    store, _, batch = _one(layers, [0.0])
    active = sum(int(batch.sparse[f].offsets[1]) for f in SCHEMA.sparse)
    w = store.tables["wide.table"].weights[:active]
    np.testing.assert_allclose(w, np.tile([2 / 3, -1 / 3, -1 / 3], (active, 1)) / np.sqrt(active), atol=1e-12)
