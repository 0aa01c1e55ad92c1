"""A compiled scatter and gather with a cast (numba, cached) for the memory store's ``assigns``
and ``gathers``: the per-example engine's float64 rows are read from and written into the
float32 tables in one pass per array, without the float32 temporary (and the second pass) of
``take_rows``/``put_rows`` and a cast."""
from __future__ import annotations

from streamtrain.compiled import njit


@njit(nogil=True)
def scatter_rows(W, rows, V):
    """``W[rows[i]] = V[i]`` (cast to W's dtype) for 2-D ``W``, ``V`` with rows of one width."""
    for i in range(len(rows)):
        r = rows[i]
        for c in range(W.shape[1]):
            W[r, c] = V[i, c]


@njit(nogil=True)
def gather_rows(V, W, rows):
    """``V[i] = W[rows[i]]`` (cast to V's dtype) for 2-D ``W``, ``V`` with rows of one width.
    Rows of one value (the linear terms' tables) as a 1-D loop: about twice as fast."""
    if W.shape[1] == 1:
        v, w = V.reshape(-1), W.reshape(-1)
        for i in range(len(rows)):
            v[i] = w[rows[i]]
        return
    for i in range(len(rows)):
        r = rows[i]
        for c in range(W.shape[1]):
            V[i, c] = W[r, c]
