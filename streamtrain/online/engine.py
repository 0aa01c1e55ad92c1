"""The per-example engine the trainer calls: it learns the terms of the logit its ``Plan`` owns
example by example inside each mini-batch (``kernels.learn``), gives the loss each example's
logit and residual, and pushes one combined gradient per row (``kernels.combine``).

For these terms a batch of ``B`` trains exactly as ``B`` batches of one: the same predictions,
weights and accumulators (``tests/test_sequential.py``), with either store.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from . import kernels
from .plan import plan

_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0)


@dataclass
class _Block:
    """Parameters flattened into one kernel array: rows ``[lo, hi)`` of it are ``param``'s."""

    params: list              # (name, lo, hi, value shape)
    w: np.ndarray             # [R, d] float64, updated by the kernel
    n: np.ndarray
    z: np.ndarray
    grp: np.ndarray           # [R] rule group
    start: tuple = ()         # (w, n, z) before the batch, in the store's precision


def _block(ctx, terms: list, group_of: dict, d: int) -> _Block:
    """The block's start values are the pulled arrays themselves (one parameter) or their
    concatenation; the kernel's float64 working copies are made from them once."""
    parts, w, n, z, grp, lo = [], [], [], [], [], 0
    for name, r in ((t.param, t.rows) for t in terms):
        value = ctx.value(name)
        state = ctx.states.get(name, {})
        w.append(value.reshape(r, d))
        for acc, slot in ((n, "n"), (z, "z")):
            acc.append(state[slot].reshape(r, d) if slot in state else np.zeros((r, d), value.dtype))
        grp.append(np.full(r, group_of[name], np.int64))
        parts.append((name, lo, lo + r, value.shape))
        lo += r
    cat = (lambda a: a[0] if len(a) == 1 else np.concatenate(a) if a else np.zeros((0, d)))
    start = tuple(np.ascontiguousarray(cat(a)) for a in (w, n, z))
    blk = _Block(parts, *(a.astype(np.float64) for a in start), cat(grp) if grp else _EMPTY_I)
    blk.start = start
    return blk


def _by_example(terms, blk: _Block, batch: int, fm: bool):
    """The terms' occurrences grouped by example for the kernel: (offsets [B+1], flat row,
    coefficient, field). Dense terms side by side need no sorting: example ``k``'s occurrences
    are row ``k`` of their ``[B, Σ m]`` concatenation; otherwise a counting sort."""
    lows = [lo for _, lo, _, _ in blk.params]
    if not terms:
        return _no_occurrences(batch)[:4]
    if all(t.example is None for t in terms):
        width = sum(t.pos.shape[1] for t in terms)
        row = np.hstack([t.pos + lo for t, lo in zip(terms, lows)]).reshape(-1)
        x = np.hstack([t.x for t in terms]).astype(np.float64, copy=False).reshape(-1)
        field = np.tile(np.concatenate([t.field for t in terms]), batch) if fm else _EMPTY_I
        return np.arange(batch + 1, dtype=np.int64) * width, row, x, field.astype(np.int64, copy=False)
    ex, row, x, field = [], [], [], []
    for t, lo in zip(terms, lows):
        if t.example is None:
            m = t.pos.shape[1]
            ex.append(np.repeat(np.arange(batch), m))
            field.append(np.tile(t.field, batch) if fm else _EMPTY_I)
        else:
            ex.append(t.example)
            field.append(t.field if fm else _EMPTY_I)
        row.append(t.pos.reshape(-1) + lo)
        x.append(np.asarray(t.x, np.float64).reshape(-1))
    cat = (lambda a: np.concatenate(a).astype(np.int64, copy=False))
    return kernels.by_example(cat(ex), batch, cat(row), np.concatenate(x), cat(field))


_NO_FM = _Block([], np.zeros((0, 1)), np.zeros((0, 1)), np.zeros((0, 1)), _EMPTY_I)


def _no_occurrences(batch: int):
    return np.zeros(batch + 1, np.int64), _EMPTY_I, _EMPTY_F, _EMPTY_I, _EMPTY_I


class PerExample:
    """Built once per trainer from the graph and the parameters' optimizers."""

    def __init__(self, graph, optimizers: dict, *, implicit: bool = True, normalize: bool = True):
        self.plan = plan(graph, optimizers)
        self.optimizers = optimizers
        self.implicit, self.normalize = implicit, normalize
        rules: dict = {}
        self.group_of = {}
        for name in self.plan.params:
            code, hyper = optimizers[name].kernel_rule()
            key = (code, tuple(hyper))
            self.group_of[name] = rules.setdefault(key, len(rules))
        self.code = np.array([c for c, _ in rules], np.int64)
        self.hyper = np.zeros((len(rules), 4))
        for (_, hyper), g in rules.items():
            self.hyper[g, :len(hyper)] = hyper
        self._blocks: tuple = ()
        self._elide = {layer.name for pair in self.plan.fm for layer in pair} | \
            {layer.name for layer in self.plan.linear if layer.pools_rows}

    @property
    def elide(self) -> set:
        """Layers whose forward pass training leaves out (``Graph`` gives a zero output): the
        FM layers and the embeddings the engine owns. It computes their terms itself from the
        pulled rows and the batch's layout; their outputs only enter the logit it replaces."""
        return self._elide

    @property
    def layers(self) -> list:
        return self.plan.layers

    @property
    def params(self) -> list[str]:
        return self.plan.params

    @property
    def skip(self) -> set:
        return self.plan.skip

    def learn(self, ctx, z0: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each example's logit after the examples before it, and its residual ρ (the logit
        gradient of its update); the owned parameters' updates are kept for ``push``."""
        B = len(z0)
        linear = [t for layer in self.plan.linear for t in layer.linear_terms(ctx)]
        lin = _block(ctx, linear, self.group_of, 1)
        lptr, slot, x, _ = _by_example(linear, lin, B, fm=False)
        if self.plan.fm:
            fm_terms, fterm = [], []
            for t, (_, emb) in enumerate(self.plan.fm):
                for term in emb.field_terms(ctx):
                    fm_terms.append(term if not len(fterm) else
                                    replace(term, field=term.field + len(fterm)))
                fterm += [t] * len(emb.fields)
            fm = _block(ctx, fm_terms, self.group_of, self.plan.fm[0][1].output_shape[-1])
            fptr, frow, fx, ffield = _by_example(fm_terms, fm, B, fm=True)
            fterm = np.array(fterm, np.int64)
        else:
            fm, (fptr, frow, fx, ffield, fterm) = _NO_FM, _no_occurrences(B)
        # the rest of the logit: what the forward pass added besides the owned terms' outputs
        base = np.asarray(z0, np.float64) - sum(np.asarray(ctx.outputs[r], np.float64).reshape(-1)
                                                for r in self.plan.roots)
        zs, rho = kernels.learn(
            base, np.asarray(y, np.float64), self.implicit, self.normalize,
            self.code, self.hyper, lptr, slot, x, lin.w.reshape(-1), lin.n.reshape(-1), lin.z.reshape(-1), lin.grp,
            fptr, frow, fx, ffield, fterm, len(self.plan.fm), fm.w, fm.n, fm.z, fm.grp)
        self._blocks = (lin, fm) if self.plan.fm else (lin,)
        return zs, rho

    def push(self, ctx) -> None:
        """Add to ``ctx`` one gradient (and, for Adagrad/FTRL, squares) per owned parameter whose
        single update by the store equals the sum of this batch's per-example updates."""
        for blk in self._blocks:
            if not blk.params:
                continue
            g, sq = kernels.combine(self.code, self.hyper, blk.grp, *blk.start, blk.w, blk.n, blk.z)
            for name, lo, hi, shape in blk.params:
                squares = sq[lo:hi].astype(ctx.dtype).reshape(shape) if self.optimizers[name].squares else None
                ctx.add_param_grad(name, g[lo:hi].astype(ctx.dtype).reshape(shape), squares)
        self._blocks = ()
