"""The FM's compiled gradient summed with another consumer's in one pass (``fm_backward_add``,
``Context.take_gradient``) against the two-step path it replaces (``fm_backward`` written out,
then ``Context.accumulate``'s add): the same numbers, bit for bit."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain.context import Context
from streamtrain.graph import Graph, Schema
from streamtrain.ops._fm_kernels import fm_backward, fm_backward_add, fm_forward
from streamtrain.store.memory import MemoryStore
from streamtrain.testing import random_batch
from streamtrain.trainer import Trainer
from tests.conftest import ROOT


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("reduce", [True, False])
def test_backward_add_is_backward_then_numpy_add(dtype, reduce):
    rng = np.random.default_rng(3)
    B, F, d = 33, 5, 4
    v = rng.normal(size=(B, F, d)).astype(dtype)
    s, y = np.empty((B, d), dtype), np.empty((B, 1 if reduce else d), dtype)
    fm_forward(v, s, y)
    gy = rng.normal(size=y.shape).astype(dtype)
    wide = rng.normal(size=(B, F * d + 3)).astype(dtype)
    have = wide[:, :F * d].reshape(B, F, d)                 # a concat's gradient slice: strided
    assert not have.flags.c_contiguous
    own = np.empty_like(v)
    fm_backward(v, s, gy, own)
    got = np.empty_like(v)
    fm_backward_add(v, s, gy, have, got)
    assert np.array_equal(got, np.add(have, own)) and np.array_equal(got, np.add(own, have))


def test_take_gradient_takes_only_a_single_contribution_kept_as_given():
    ctx = Context(["a", "b"])
    first = np.ones((2, 3), np.float32)
    assert ctx.take_gradient("a", (2, 3), np.float32) is None             # nothing yet
    ctx.accumulate(ctx.grad_out, "a", first)
    assert ctx.take_gradient("a", (2, 3), np.float64) is None             # another dtype: left
    assert ctx.take_gradient("a", (3, 2), np.float32) is None             # another shape: left
    assert ctx.take_gradient("a", (2, 3), np.float32) is first and "a" not in ctx.grad_out
    ctx.accumulate(ctx.grad_out, "b", first)
    ctx.accumulate(ctx.grad_out, "b", first)                              # a sum in the context's buffer
    assert ctx.take_gradient("b", (2, 3), np.float32) is None and "b" in ctx.grad_out


def _trainer(config: dict, batch) -> Trainer:
    graph = Graph.from_config(config["layers"], Schema.of(batch))
    store = MemoryStore()
    store.declare(graph.params, config["default_optimizer"])
    return Trainer(graph, store)


@pytest.mark.parametrize("model", ["deepfm", "nfm"])
def test_a_model_trains_bit_for_bit_as_with_the_add_apart(model, monkeypatch):
    """DeepFM's embedding feeds its FM and its MLP's concat; NFM's its bi-interaction alone."""
    config = json.loads((ROOT / "examples" / f"{model}.json").read_text())
    batches = [random_batch(64, fields=("a", "b", "c"), seed=s) for s in range(8)]
    fused, apart = _trainer(config, batches[0]), _trainer(config, batches[0])
    taken, original = [], Context.take_gradient

    def watched(self, *args):
        taken.append(original(self, *args))
        return taken[-1]
    for seed, batch in enumerate(batches):
        with monkeypatch.context() as m:
            m.setattr(Context, "take_gradient", lambda self, *a: None)
            want = apart.step(batch)
        twin = random_batch(64, fields=("a", "b", "c"), seed=seed)
        with monkeypatch.context() as m:
            m.setattr(Context, "take_gradient", watched)
            got = fused.step(twin)
        np.testing.assert_array_equal(got.predictions, want.predictions)
        assert got.loss == want.loss
    assert any(t is not None for t in taken) == (model == "deepfm")      # the one pass ran
    for name, spec in fused.graph.params.items():
        if spec.table:
            ids = np.unique(np.concatenate([f.ids for b in batches for f in b.sparse.values()]))
            a, b = fused.store.pull([], {name: ids})[name], apart.store.pull([], {name: ids})[name]
        else:
            a, b = fused.store.pull([name], {})[name], apart.store.pull([name], {})[name]
        np.testing.assert_array_equal(a, b, err_msg=name)
