"""Helpers for tests: random batches and a finite-difference gradient check for any layer.

Part of the package (not of tests/) because it is documented for plug-in layer authors
(docs/layers.md, docs/testing.md: ``streamtrain.testing.gradcheck``), who have no tests/ folder.
The product never imports it (``tests/test_startup.py`` checks that no other module does).
"""
from __future__ import annotations

import numpy as np

from .batch import Batch, SparseField
from .context import Context
from .graph import Schema
from .graphstore.blocks import random_subgraph
from .hashing import splitmix64
from .ops.base import Layer, SparseShape
from .uniq import unique_inverse


def random_batch(size=16, fields=("a", "b", "c"), dense=3, *, cardinality=10, multivalue=(),
                 missing=0.1, values=False, seed=0, blocks=0, node_features=0, endpoints=("src",)) -> Batch:
    """A small batch with ids from a few values per field, some missing, some multi-valued;
    with ``blocks`` > 0 it carries that many sampled blocks of ``size`` rows each
    (``graphstore.blocks.random_subgraph``)."""
    rng = np.random.default_rng(seed)
    sparse = {}
    for fi, name in enumerate(fields):
        counts = rng.integers(1, 4, size) if name in multivalue else np.ones(size, np.int64)
        counts = np.where(rng.random(size) < missing, 0, counts)
        offsets = np.zeros(size + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        raw = rng.integers(0, cardinality, offsets[-1]).astype(np.uint64)
        ids = splitmix64(raw + np.uint64(1000 * (fi + 1)))
        vals = rng.uniform(0.5, 1.5, offsets[-1]).astype(np.float32) if values else None
        sparse[name] = SparseField(ids, offsets, vals)
    sub = random_subgraph(size, blocks, batch_size=size, features=node_features, endpoints=endpoints,
                          seed=seed) if blocks else None
    return Batch(labels=(rng.random(size) < 0.4).astype(np.float32), sparse=sparse,
                 dense=rng.standard_normal((size, dense)).astype(np.float32),
                 dense_names=tuple(f"d{i}" for i in range(dense)), subgraph=sub)


def input_shape(x):
    if isinstance(x, dict):
        return SparseShape(tuple(x))
    return tuple(np.shape(x)[1:])


def feed_tables(ctx: Context, layer: Layer) -> None:
    """What ``Graph.feed`` does for one layer alone: unique ids per table and their positions."""
    for t, ids in layer.table_ids(ctx).items():
        ctx.table_ids[t], ctx.table_pos[(layer.name, t)] = unique_inverse(ids)


def gradcheck(layer: Layer, xs: list, batch: Batch, *, eps=1e-6, rtol=1e-5, atol=1e-7,
              max_checks=40, seed=0, param_scale=0.5) -> dict:
    """Compare ``layer.backward`` with central differences, in float64, for every input and
    parameter (a sample of ``max_checks`` entries each). Returns the worst relative errors by
    name; raises ``AssertionError`` naming the first entry that disagrees."""
    rng = np.random.default_rng(seed)
    xs = [x if isinstance(x, dict) else np.asarray(x, np.float64) for x in xs]
    layer.output_shape = layer.build([input_shape(x) for x in xs], Schema.of(batch))
    ctx = Context([layer.name], dtype=np.float64, seed=seed)
    ctx.reset(batch)
    feed_tables(ctx, layer)
    for spec in layer.params.values():
        shape = (len(ctx.table_ids.get(spec.name, ())), spec.dim) if spec.table else spec.shape
        ctx.values[spec.name] = rng.standard_normal(shape) * param_scale
    probe = None

    def run():
        nonlocal probe
        ctx.reset(batch)
        ctx.rng = np.random.default_rng(seed)
        out = layer.forward(ctx, xs)
        if layer.is_loss:
            n = batch.size if layer.opts.get("reduction", "sum") == "sum" else 1
            return ctx.loss * n, out
        if isinstance(out, dict):       # sparse output (sparse_input): nothing differentiable
            return 0.0, out
        if probe is None:
            probe = rng.standard_normal(np.shape(out))
        return float(np.sum(np.asarray(out) * probe)), out

    _, out = run()
    if isinstance(out, dict):
        return {}
    # copies: a layer may hand back arrays it reuses in the next forward
    grads_in = [None if g is None else np.array(g) for g in layer.backward(ctx, None if layer.is_loss else probe)]
    grads_param = {k: np.array(v) for k, v in ctx.param_grads.items()}
    report = {}

    def check(name, array, analytic):
        report[name] = _worst_error(layer, name, array, analytic, run, rng.choice, eps=eps, rtol=rtol, atol=atol,
                                    max_checks=max_checks)

    for j, (x, g) in enumerate(zip(xs, grads_in)):
        if isinstance(x, dict) or g is None:
            continue
        check(f"input{j}", x, np.asarray(g))
    for spec in layer.params.values():
        check(spec.name, ctx.values[spec.name], grads_param.get(spec.name, np.zeros_like(ctx.values[spec.name])))
    return report


def _worst_error(layer: Layer, name: str, array, analytic, run, choice, *, eps, rtol, atol, max_checks) -> float:
    """Central differences of ``run()``'s value over a sample of ``array``'s entries (changed in
    place and put back), against ``analytic``: the worst relative error; ``AssertionError``
    naming the first entry that disagrees."""
    flat = array.reshape(-1)
    picks = choice(flat.size, min(max_checks, flat.size), replace=False) if flat.size else []
    worst = 0.0
    for i in picks:
        old = flat[i]
        flat[i] = old + eps
        up, _ = run()
        flat[i] = old - eps
        down, _ = run()
        flat[i] = old
        numeric = (up - down) / (2 * eps)
        got = analytic.reshape(-1)[i]
        err = abs(got - numeric)
        if err > atol + rtol * max(abs(numeric), abs(got)):
            raise AssertionError(f"layer '{layer.name}' ({layer.kind}): d/d{name}[{i}] "
                                 f"analytic {got:.8g} vs numeric {numeric:.8g}")
        worst = max(worst, err / max(abs(numeric), 1e-12))
    return worst
