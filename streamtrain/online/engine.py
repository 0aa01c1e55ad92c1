"""The per-example engine the trainer calls: it learns the terms of the logit its ``Plan`` owns
example by example inside each mini-batch (``kernels.learn``), gives the loss each example's
logit and residual, and pushes one combined gradient per row (``kernels.combine``) or, to a
store that ``assigns`` (the memory store), the rows' final values and optimizer slots.

For these terms a batch of ``B`` trains exactly as ``B`` batches of one: the same predictions,
weights and accumulators (``tests/test_sequential.py``), with either store.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from streamtrain.errors import ConfigError

from . import kernels, prep, softmax, terms
from .grids import GRID, _made_ahead, present_grids  # noqa: F401 - GRID: the memo key, named here too
from .arrays import Arrays
from .plan import plan

_EMPTY_I = np.zeros(0, np.int64)
_EMPTY_F = np.zeros(0)
_NO_X = np.zeros((0, 0))      # the coefficients of no fixed rows


@dataclass
class _Block:
    """Parameters flattened into one kernel array: rows ``[lo, hi)`` of it are ``param``'s."""

    params: list              # (name, lo, hi, value shape)
    w: np.ndarray             # [R, d] float64, updated by the kernel
    n: np.ndarray
    z: np.ndarray
    grp: np.ndarray           # [R] rule group
    start: tuple = ()         # (w, n, z) before the batch, in the store's precision


def _block(arrays: Arrays, ctx, terms: list, group_of: dict, d: int, key: str, start: bool = True) -> _Block:
    """The block's start values are the pulled arrays themselves (one parameter) or their
    concatenation; the kernel's float64 working copies are made from them into reused arrays.
    A slot no parameter of the block keeps (SGD's ``n``; SGD's and Adagrad's ``z``) is a zero
    array: only those rules' rows read or write it, and they leave it as it is. Without
    ``start`` (the final values are assigned, nothing is combined) no start is kept: the
    pulled arrays are copied straight into the working ones, or, for a parameter the store
    lends (``ctx.lent``), its rows gathered from the store's own arrays (``prep.gather_rows``)."""
    parts, lo = [], 0
    slots = {"w": [], "n": [], "z": []}
    grp = []
    dtype = None
    for name, r in ((t.param, t.rows) for t in terms):
        rows, value, state = ctx.lent.get(name) or (None, ctx.value(name), ctx.states.get(name, {}))
        dtype = value.dtype
        slots["w"].append((rows, value.reshape(-1, d)))
        for slot in "nz":
            slots[slot].append((rows, state[slot].reshape(-1, d)) if slot in state else (None, None))
        grp.append((lo, lo + r, group_of[name]))
        parts.append((name, lo, lo + r, value.shape if rows is None else (r, *value.shape[1:])))
        lo += r
    if dtype is None:
        return _Block([], np.zeros((0, d)), np.zeros((0, d)), np.zeros((0, d)), _EMPTY_I)
    starts, work = [], []
    for slot, parts_ in slots.items():
        if all(a is None for _, a in parts_):
            if start:
                starts.append(arrays.rows((key, slot, "zero0"), lo, d, dtype, zeros=True))
            work.append(arrays.rows((key, slot, "zero"), lo, d, np.float64, zeros=True))
            continue
        out = arrays.rows((key, slot), lo, d, np.float64)
        if not start:
            for (a, b, _), (rows, part) in zip(grp, parts_):
                if rows is not None:
                    prep.gather_rows(out, a, part, rows)
                else:
                    out[a:b] = 0 if part is None else part
        else:
            starts.append(_start(arrays, key, slot, out, grp, [part for _, part in parts_], lo, d, dtype))
        work.append(out)
    g = arrays.rows((key, "grp"), lo, 1, np.int64).reshape(-1)
    for a, b, group in grp:
        g[a:b] = group
    blk = _Block(parts, *work, g)
    blk.start = tuple(starts)
    return blk


def _start(arrays: Arrays, key: str, slot: str, out: np.ndarray, grp: list, parts: list, lo: int, d: int,
           dtype) -> np.ndarray:
    """A slot's start values in the store's precision (the pulled array itself, or the pulled
    arrays side by side), copied into ``out``, the kernel's working copy."""
    if len(parts) == 1:
        s0 = np.ascontiguousarray(parts[0])
    else:
        s0 = arrays.rows((key, slot, "start"), lo, d, dtype)
        for (a, b, _), part in zip(grp, parts):
            s0[a:b] = 0 if part is None else part
    np.copyto(out, s0)
    return s0


def _unit(terms: list, fm: bool) -> bool:
    """Whether a linear block's grid terms are all unweighted present ones: every coefficient is
    1, so the grid is rows alone (padding -1) and the kernel reads no coefficient (a third of
    the fill's time, half the bytes it reads)."""
    return not fm and bool(terms) and all(t.present is not None and t.x is None for t in terms)


def _fixed(arrays: Arrays, t) -> bool:
    """A dense term every example has at the same rows, each once (an index grid: a dense
    parameter's, a bias's): the kernel takes its rows once (``Occurrences.fixed``) and its
    coefficients ``[B, m]`` beside the grid instead of a copy of both in every row of it."""
    return t.example is None and t.present is None and t.pos.strides[0] == 0 and arrays.distinct(t.param, t.pos)


def _fixed_tail(arrays: Arrays, terms: list) -> int:
    """How many of a linear block's last terms are ``_fixed`` (the FM loop reads a grid only):
    the kernel reads them after the grid's, so each example's occurrences keep their order."""
    n = 0
    while n < len(terms) and _fixed(arrays, terms[len(terms) - 1 - n]):
        n += 1
    return n


def _by_example(arrays: Arrays, terms, blk: _Block, batch: int, fm: bool, key: str, memo: dict, nfix: int = 0):
    """The terms' occurrences grouped by example for the kernel: (offsets [B+1], flat row,
    coefficient, field, twice, fixed rows, their coefficients). Dense terms side by side need
    no sorting: example ``k``'s occurrences are row ``k`` of their ``[B, Σ m]`` grid, filled in
    place (or made ahead: ``present_grids``), then the rows of the last ``nfix`` terms, which
    are ``_fixed`` (the same for every example: once, with their coefficients ``[B, m]``);
    otherwise a counting sort. ``twice``: whether an example may hold a row twice
    (``kernels.Occurrences.repeats``); only within a term (the terms' rows are disjoint), and not
    when each of its rows is in one column (``prep.one_column``, found with a grid made ahead)
    or it is an index grid."""
    lows = [lo for _, lo, _, _ in blk.params]
    if not terms:
        return _no_occurrences(batch)
    if all(t.example is None for t in terms):
        fixed, fx = _fixed_part(arrays, terms[len(terms) - nfix:], lows[len(terms) - nfix:], batch, key)
        terms, lows = terms[:len(terms) - nfix], lows[:len(terms) - nfix]
        if not terms:
            return (*_no_occurrences(batch)[:5], fixed, fx)
        widths = [len(t.present) // batch if t.present is not None else t.pos.shape[1] for t in terms]
        unit = _unit(terms, fm)
        ahead = [_made_ahead(memo, t) if t.present is not None else None for t in terms]
        ahead = [a if a is not None and (a[1] is None) == unit else None for a in ahead]   # (made as the block is)
        total = sum(widths)
        first = 0
        if ahead[0] is not None and lows[0] == 0 and ahead[0][0].shape[1] == total:
            row, x = ahead[0][:2]        # made ahead with room for the other terms: the grid itself
            first = 1
        else:
            row = arrays.grid((key, "row"), batch, total, np.int64)
            x = None if unit else arrays.grid((key, "x"), batch, total, np.float64)
        twice = first == 1 and not ahead[0][2]
        col = sum(widths[:first])
        for t, lo, m, made in zip(terms[first:], lows[first:], widths[first:], ahead[first:]):
            if made is not None and not unit:
                np.add(made[0][:, :m], lo, out=row[:, col:col + m])
                x[:, col:col + m] = made[1][:, :m]
                twice = twice or not made[2]
            elif t.present is not None:          # (a bare grid's padding stays -1: filled again)
                prep.put_present(row, _NO_X if unit else x, col, m, t.present, t.pos, lo,
                                 _EMPTY_F if t.x is None else np.asarray(t.x, np.float64))
                twice = twice or not (made[2] if made is not None else prep.one_column(t.present, t.pos, m))
            else:
                np.add(t.pos, lo, out=row[:, col:col + m])
                x[:, col:col + m] = t.x
                twice = twice or not arrays.distinct(t.param, t.pos)
            col += m
        field = arrays.fields(batch, [t.field for t in terms]) if fm else _EMPTY_I
        return (arrays.offsets(batch, total), row.reshape(-1), _EMPTY_F if unit else x.reshape(-1), field, twice,
                fixed, fx)
    return _sorted(terms, lows, batch, fm)


def _sorted(terms: list, lows: list, batch: int, fm: bool):
    """``_by_example`` of terms that list their occurrences: a counting sort by example."""
    ex, row, x, field = [], [], [], []
    for t, lo in zip(terms, lows):
        if t.example is None:
            pos, tx = t.grid(batch)
            m = pos.shape[1]
            ex.append(np.repeat(np.arange(batch), m))
            field.append(np.tile(t.field, batch) if fm else _EMPTY_I)
        else:
            pos, tx = t.pos, t.x
            ex.append(t.example)
            field.append(t.field if fm else _EMPTY_I)
        row.append(pos.reshape(-1) + lo)
        x.append(np.asarray(tx, np.float64).reshape(-1))
    cat = (lambda a: np.concatenate(a).astype(np.int64, copy=False))
    return (*kernels.by_example(cat(ex), batch, cat(row), np.concatenate(x), cat(field)), True, _EMPTY_I, _NO_X)


def _fixed_part(arrays: Arrays, terms: list, lows: list, batch: int, key: str):
    """The ``_fixed`` terms' rows (each term's first example's, moved to its block rows) and
    their coefficients side by side, ``[B, Σ m]`` float64 (into a reused array)."""
    if not terms:
        return _EMPTY_I, _NO_X
    rows = np.concatenate([t.pos[0] + lo for t, lo in zip(terms, lows)]).astype(np.int64, copy=False)
    fx = arrays.grid((key, "fixed x"), batch, len(rows), np.float64)
    col = 0
    for t in terms:
        m = t.pos.shape[1]
        fx[:, col:col + m] = t.x
        col += m
    return rows, fx


_NO_FM = _Block([], np.zeros((0, 1)), np.zeros((0, 1)), np.zeros((0, 1)), _EMPTY_I)


def _no_occurrences(batch: int):
    """(offsets, row, x, field, twice, fixed rows, their coefficients) of no occurrences."""
    return np.zeros(batch + 1, np.int64), _EMPTY_I, _EMPTY_F, _EMPTY_I, False, _EMPTY_I, _NO_X


class PerExample:
    """Built once per trainer from the graph and the parameters' optimizers."""

    def __init__(self, graph, optimizers: dict, *, implicit: bool = True, normalize: bool = True,
                 assign: bool = False, squared: bool = False):
        self.plan = plan(graph, optimizers)
        self.optimizers = optimizers
        self.implicit, self.normalize = implicit, normalize
        self.squared = squared    # the loss is squared error (else logistic): ``residual._residual``
        self.assign = assign      # the store ``assigns``: hand over final values, not a gradient
        self.tables = {name: graph.params[name].table for name in self.plan.params}
        rules: dict = {}
        self.group_of = {}
        for name in self.plan.params:
            code, hyper = optimizers[name].kernel_rule()
            if kernels.RULES[code] is not optimizers[name].rule:     # the core compiled another
                raise ConfigError([(name, f"optimizer '{optimizers[name].kind}' claims the per-example "
                                          f"rule of '{terms.KERNEL_RULES[code]}' but its rule is its own")])
            key = (code, tuple(hyper))
            self.group_of[name] = rules.setdefault(key, len(rules))
        self.code = np.array([c for c, _ in rules], np.int64)
        self.hyper = np.zeros((len(rules), 4))
        for (_, hyper), g in rules.items():
            self.hyper[g, :len(hyper)] = hyper
        self.rules = kernels.Rules(self.code, self.hyper)
        self._blocks: tuple = ()
        self._arrays = Arrays()
        self._room: dict = {}     # param -> the columns of its block's other terms (``present_grids``)
        self._bare: set = set()   # params whose grids are rows alone (``_unit``; ``present_grids``)
        self.before_loop = None   # called as the compiled loop (no GIL held) is about to start

    @property
    def layers(self) -> list:
        return self.plan.layers

    @property
    def params(self) -> list[str]:
        return self.plan.params

    @property
    def skip(self) -> set:
        """Layers whose forward (in training) and backward passes the graph leaves out (forward
        gives a zero output): every layer the engine learns and every ``add``/``sum_pooling``
        between them and the logit (``Plan.skip``). It computes their terms itself from the
        pulled rows, the batch's layout and the inputs of the linear layers, and their updates;
        their outputs only enter the logit it replaces, so the loss's input is the rest of it."""
        return self.plan.skip

    def prepare(self, ctx) -> None:
        """The occurrence grids of this batch's embedding terms, from a context fed with the
        batch alone (``Trainer.prepare``, in the reader's thread): see ``present_grids``."""
        present_grids(ctx, [layer for layer in self.layers if layer.pools_rows], self._room, self._bare)

    def learn(self, ctx, z0: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each example's logit after the examples before it, and its residual ρ (the logit
        gradient of its update); the owned parameters' updates are kept for ``push``. A loss
        over ``K`` logits: ``z0`` is ``[B, K]``, ``y`` the class indices (``softmax.learn``)."""
        if self.plan.width > 1:
            return self._learn_classes(ctx, z0, y)
        B = len(z0)
        arrays = self._arrays
        lin, (lptr, slot, x, lfield, ltwice, lfixed, lfx) = self._linear(ctx, B, 1, "linear")
        if self.plan.fm:
            fm_terms, fterm = [], []
            for t, (_, emb) in enumerate(self.plan.fm):
                for term in emb.field_terms(ctx):
                    fm_terms.append(term if not len(fterm) else
                                    replace(term, field=term.field + len(fterm)))
                fterm += [t] * len(emb.fields)
            fm = _block(arrays, ctx, fm_terms, self.group_of, self.plan.fm[0][1].output_shape[-1], "fm",
                        not self.assign)
            fptr, frow, fx, ffield, ftwice = _by_example(arrays, fm_terms, fm, B, True, "fm", ctx.memo)[:5]
            fterm = np.array(fterm, np.int64)
        else:
            fm, (fptr, frow, fx, ffield, ftwice), fterm = _NO_FM, _no_occurrences(B)[:5], _EMPTY_I
        base = np.asarray(z0, np.float64)     # the rest of the logit: the owned terms are elided
        if self.before_loop is not None:      # (the job: the parse thread's turn, Prepare.pace)
            self.before_loop()
        zs, rho = kernels.learn(
            base, np.asarray(y, np.float64), self.implicit, self.normalize, self.rules,
            kernels.Occurrences(lptr, slot, x, lfield, _EMPTY_I, 0, ltwice, lfixed, lfx),
            kernels.Slots(lin.w.reshape(-1), lin.n.reshape(-1), lin.z.reshape(-1), lin.grp),
            kernels.Occurrences(fptr, frow, fx, ffield, fterm, len(self.plan.fm), ftwice, _EMPTY_I, _NO_X),
            kernels.Slots(fm.w, fm.n, fm.z, fm.grp), True if self.squared else None)
        self._blocks = (lin, fm) if self.plan.fm else (lin,)
        return zs, rho

    def _linear(self, ctx, batch: int, width: int, key: str) -> tuple:
        """The linear layers' terms as one block of rows ``width`` wide, and their occurrences
        grouped by example (``_by_example``)."""
        linear = [t for layer in self.plan.linear for t in layer.linear_terms(ctx)]
        blk = _block(self._arrays, ctx, linear, self.group_of, width, key, not self.assign)
        nfix = _fixed_tail(self._arrays, linear)
        self._make_room(linear, batch, nfix)
        return blk, _by_example(self._arrays, linear, blk, batch, False, key, ctx.memo, nfix)

    def _learn_classes(self, ctx, z0: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``learn`` of ``K`` logits: the linear layers' rows ``K`` wide, in one block."""
        B, K = len(z0), self.plan.width
        blk, (ptr, row, x, _, twice, fixed, fx) = self._linear(ctx, B, K, "classes")
        if self.before_loop is not None:
            self.before_loop()
        zs, rho = softmax.learn(
            np.asarray(z0, np.float64).reshape(B, K), np.asarray(y, np.float64), self.normalize, self.rules,
            kernels.Occurrences(ptr, row, x, _EMPTY_I, _EMPTY_I, 0, twice, fixed, fx),
            kernels.Slots(blk.w, blk.n, blk.z, blk.grp))
        self._blocks = (blk,)
        return zs, rho

    def _make_room(self, terms: list, batch: int, nfix: int) -> None:
        """A block of dense terms whose first is made ahead: the next batches' grids of that term
        are made with room for the others' columns (``present_grids``), so it is the block's grid;
        and rows alone if the block's grid is (``_unit``)."""
        grid = terms[:len(terms) - nfix]               # (the last ``nfix``: fixed rows, beside the grid)
        self._bare = {t.param for t in grid} if _unit(grid, False) else set()
        if terms and terms[0].present is not None and all(t.example is None for t in terms[1:]):
            self._room = {terms[0].param: sum(t.pos.shape[1] if t.present is None else len(t.present) // batch
                                              for t in grid[1:])}

    def push(self, ctx) -> dict:
        """Add to ``ctx`` one gradient (and, for Adagrad/FTRL, squares) per owned parameter whose
        single update by the store equals the sum of this batch's per-example updates. With
        ``assign``: none; the parameters' final values and slots instead, as
        ``Gradients.assigned`` (views of the working arrays: written before the next batch)."""
        if self.assign:
            return self._assigned(ctx)
        for blk in self._blocks:
            if not blk.params:
                continue
            g, sq = kernels.combine(self.code, self.hyper, blk.grp, *blk.start, blk.w, blk.n, blk.z)
            for name, lo, hi, shape in blk.params:
                squares = sq[lo:hi].astype(ctx.dtype).reshape(shape) if self.optimizers[name].squares else None
                ctx.add_param_grad(name, g[lo:hi].astype(ctx.dtype).reshape(shape), squares)
        self._blocks = ()
        return {}

    def _assigned(self, ctx) -> dict:
        out = {}
        for blk in self._blocks:
            for name, lo, hi, shape in blk.params:
                slots = {k: getattr(blk, k)[lo:hi].reshape(shape) for k in self.optimizers[name].slots}
                out[name] = (ctx.table_ids[name] if self.tables[name] else None, blk.w[lo:hi].reshape(shape), slots)
        self._blocks = ()
        return out
