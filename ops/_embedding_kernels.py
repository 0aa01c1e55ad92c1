"""Compiled row gather and scatter-add of a single-valued embedding lookup (numba, cached).

``index[i]`` is the pulled row of slot ``i`` (example-major ``[B*F]``), ``total`` (one past the
last row) for a missing value: a zero row forward, nothing backward. The sums are float64 and
in slot order, as ``np.bincount`` adds them, so the results are the same numbers.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit


@njit(nogil=True, error_model="numpy")
def gather_rows(table, index, w, out):
    """``out[i] = w[i] * table[index[i]]`` (``w`` empty: 1), a zero row where ``index[i]`` is
    past the table."""
    total, dim = table.shape
    weighted = len(w) > 0
    for i in range(len(index)):
        r = index[i]
        if r >= total:
            for c in range(dim):
                out[i, c] = 0
        elif weighted:
            for c in range(dim):
                out[i, c] = table[r, c] * w[i]
        else:
            for c in range(dim):
                out[i, c] = table[r, c]


@njit(nogil=True, error_model="numpy")
def scatter_rows(index, g, w, total, grad, sq):
    """``grad[r] = Σ_{i: index[i] = r} w[i] g[i]`` and, when ``sq`` has rows, the sum of the
    squares of those products (computed in ``g``'s precision, summed in float64). A row's sum
    and its squares' sum sit side by side (``acc[r]`` is ``[2, dim]``): one block per slot to
    touch."""
    dim = g.shape[1]
    weighted = len(w) > 0
    squares = sq.shape[0] > 0
    acc = np.zeros((total, 2, dim))
    for i in range(len(index)):
        r = index[i]
        if r >= total:
            continue
        a = acc[r]
        gi = g[i]
        if squares and weighted:
            wi = w[i]
            for c in range(dim):
                v = gi[c] * wi
                a[0, c] += v
                a[1, c] += v * v
        elif squares:
            for c in range(dim):
                v = gi[c]
                a[0, c] += v
                a[1, c] += v * v
        elif weighted:
            wi = w[i]
            for c in range(dim):
                a[0, c] += gi[c] * wi
        else:
            for c in range(dim):
                a[0, c] += gi[c]
    for r in range(total):
        for c in range(dim):
            grad[r, c] = acc[r, 0, c]
        if squares:
            for c in range(dim):
                sq[r, c] = acc[r, 1, c]
