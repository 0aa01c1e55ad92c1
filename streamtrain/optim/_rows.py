"""Compiled in-place updates (numba, cached): a table's touched rows for the memory store, and
Adam's step on a dense parameter.

``step`` on the rows a push touched is a gather of the rows and their state, the rule's numpy
arithmetic (a temporary per operation), and a scatter back. For the rules that accumulate squared
gradients (Adagrad, FTRL) the kernels here compile the rule's own function (``adagrad.rule``,
``ftrl.rule``: the one the numpy ``step`` runs on arrays) and run it coordinate by coordinate in
the table's own precision, on the table in place: one pass (each row's weights and slots
prefetched ``AHEAD`` rows before its update), the same numbers
(``tests/test_optim.py``); a division by zero gives inf / NaN as numpy does (the trainer
then skips the batch as non-finite) instead of raising. ``h`` holds the hyperparameters in the table's dtype, then a zero, so
no constant widens float32 arithmetic to float64.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit
from streamtrain.prefetch import prefetch

from .base import OPTIMIZERS        # (by name, not an import of adagrad/ftrl: they import this module)


_adagrad = njit(nogil=True, error_model="numpy", inline="always")(OPTIMIZERS.get("adagrad").rule)
_ftrl = njit(nogil=True, error_model="numpy", inline="always")(OPTIMIZERS.get("ftrl").rule)


AHEAD = 8       # rows whose weights and slots are requested ahead of their update (``prefetch``)


@njit(nogil=True, inline="always")
def _ahead(A, B, C, r):
    """Start loading row ``r`` of the weights and slots: a batch's rows are scattered over a
    table larger than the core's own caches, and a row's update is long enough that the
    processor does not reach the next rows' loads on its own."""
    prefetch(A, r)
    prefetch(B, r)
    prefetch(C, r)


@njit(nogil=True, error_model="numpy")
def adagrad_rows(W, N, rows, g, sq, h):
    """Adagrad's ``rule`` on rows ``rows`` (distinct) of W, N (the squares ``sq``, else g²)."""
    have_sq = sq.shape[0] > 0
    for i in range(min(AHEAD, len(rows))):
        _ahead(W, N, N, rows[i])
    for i in range(len(rows)):
        if i + AHEAD < len(rows):
            _ahead(W, N, N, rows[i + AHEAD])
        r = rows[i]
        for c in range(W.shape[1]):
            gi = g[i, c]
            W[r, c], N[r, c], _ = _adagrad(h, W[r, c], N[r, c], h[2], gi, sq[i, c] if have_sq else gi * gi)


@njit(nogil=True, error_model="numpy")
def ftrl_rows(W, Z, N, rows, g, sq, h):
    """FTRL-Proximal's ``rule`` on rows ``rows`` (distinct) of W, Z, N."""
    have_sq = sq.shape[0] > 0
    for i in range(min(AHEAD, len(rows))):
        _ahead(W, Z, N, rows[i])
    for i in range(len(rows)):
        if i + AHEAD < len(rows):
            _ahead(W, Z, N, rows[i + AHEAD])
        r = rows[i]
        for c in range(W.shape[1]):
            gi = g[i, c]
            W[r, c], N[r, c], Z[r, c] = _ftrl(h, W[r, c], N[r, c], Z[r, c], gi, sq[i, c] if have_sq else gi * gi)


def usable(weights: np.ndarray, state: dict, g: np.ndarray) -> bool:
    """Whether the kernels apply: 2-D C-contiguous float arrays of one dtype."""
    arrays = [weights, *state.values()]
    return (weights.dtype in (np.float32, np.float64) and g.dtype == weights.dtype
            and all(a.ndim == 2 and a.flags.c_contiguous and a.dtype == weights.dtype
                    and a.shape[1] == weights.shape[1] for a in arrays))


def flat(w: np.ndarray, *others: np.ndarray) -> bool:
    """Whether arrays of ``w``'s size, dtype (float32/64) and C order can be updated flat."""
    dtype, size = w.dtype, w.size
    if dtype not in _FLOATS or not w.flags.c_contiguous:
        return False
    for a in others:
        if a.dtype != dtype or a.size != size or not a.flags.c_contiguous:
            return False
    return True


_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def hyper(dtype, *values) -> np.ndarray:
    """``[*values, 0]`` in ``dtype``, made once per distinct (dtype, values): a row update is
    one kernel call, and building this array cost as much as the kernel on a small parameter.
    The kernels only read it."""
    key = (dtype, values)
    h = _HYPER.get(key)
    if h is None:
        if len(_HYPER) >= 256:          # hyperparameters that keep changing (a schedule)
            _HYPER.clear()
        h = _HYPER[key] = np.array([*values, 0.0], dtype)
        h.flags.writeable = False
    return h


_HYPER: dict = {}


def corrections(beta1, beta2, t: np.ndarray) -> tuple:
    """Adam's bias corrections ``(1 − β1^t, 1 − β2^t)`` as scalars of ``t``'s dtype, computed
    once per (β1, β2, step): every dense parameter of a model takes the same step each batch."""
    key = (beta1, beta2, t.dtype, t.tobytes())
    c = _CORRECTIONS.get(key)
    if c is None:
        if len(_CORRECTIONS) >= 256:
            _CORRECTIONS.clear()
        c = _CORRECTIONS[key] = ((1 - beta1 ** t).reshape(-1)[0], (1 - beta2 ** t).reshape(-1)[0])
    return c


_CORRECTIONS: dict = {}


def squares(sq, g) -> np.ndarray:
    return np.zeros((0, g.shape[1]), g.dtype) if sq is None else np.ascontiguousarray(sq, g.dtype)


@njit(nogil=True, error_model="numpy")
def adam_dense(w, m, v, g, h, c1, c2):
    """Adam's moment updates and step on flat arrays (one bias correction ``c1 = 1 − β1^t``,
    ``c2 = 1 − β2^t`` for all of them): ``Adam.step``'s arithmetic in ``w``'s precision."""
    lr, beta1, beta2, eps, one_b1, one_b2 = h[0], h[1], h[2], h[3], h[4], h[5]
    for i in range(len(w)):
        gi = g[i]
        mi = m[i] * beta1 + one_b1 * gi
        vi = v[i] * beta2 + one_b2 * gi * gi
        m[i] = mi
        v[i] = vi
        w[i] -= lr * (mi / c1) / (np.sqrt(vi / c2) + eps)


FUSED = 8          # parameters per ``adam_many`` call: one compiled signature whatever the model


def fused_args(parts: list) -> tuple:
    """``adam_many``'s arrays of up to ``FUSED`` dense ``(w, g, state)``: flat weights, moments,
    gradients and step counts, each a tuple of ``FUSED`` (the last repeated), and how many count.
    The weights', moments' and step counts' tuples are made once per set of parameters
    (``_held``): a store steps the same arrays every batch, only the gradients are new."""
    ws, ms, vs, ts = _held(parts)
    gs = [g.reshape(-1) for _, g, _ in parts]
    gs += [gs[-1]] * (FUSED - len(gs))
    return ws, ms, vs, tuple(gs), ts, len(parts)


def _held(parts: list) -> tuple:
    """The flat (weights, m, v, t) tuples of ``parts``, kept while the very same arrays come."""
    key = tuple(id(w) for w, _, _ in parts)
    got = _HELD.get(key)
    if got is not None:
        owners, flat = got
        if all(w is o[0] and st["m"] is o[1] and st["v"] is o[2] and st["t"] is o[3]
               for (w, _, st), o in zip(parts, owners)):
            return flat
    if len(_HELD) >= 64:                    # parameters that keep changing (tests, a rebuilt model)
        _HELD.clear()
    owners = [(w, st["m"], st["v"], st["t"]) for w, _, st in parts]
    columns = [tuple(a.reshape(-1) for a in o) for o in owners]
    columns += [columns[-1]] * (FUSED - len(columns))
    flat = tuple(tuple(column) for column in zip(*columns))
    _HELD[key] = (owners, flat)
    return flat


_HELD: dict = {}        # id()s of the weights -> (the arrays, held so the ids stay theirs; tuples)


@njit(nogil=True, error_model="numpy")
def adam_many(ws, ms, vs, gs, ts, n, h):
    """``adam_dense`` on the first ``n`` parameters of the tuples, each after its step count
    ``t`` moved on by one and with its own corrections ``1 − β^t``, computed as ``Adam.step``
    does (``corrections``: float32 or float64 powers of ``t``'s precision)."""
    one = h[6]
    for k in range(n):
        t = ts[k]
        t[0] += one
        adam_dense(ws[k], ms[k], vs[k], gs[k], h, one - h[1] ** t[0], one - h[2] ** t[0])
