"""A compiled scatter with a cast (numba, cached) for the memory store's ``assigns``: the
per-example engine's float64 rows are written into the float32 tables in one pass per array,
without the float32 temporary (and the second pass) of ``put_rows``'s cast."""
from __future__ import annotations

from streamtrain.compiled import njit


@njit(nogil=True)
def scatter_rows(W, rows, V):
    """``W[rows[i]] = V[i]`` (cast to W's dtype) for 2-D ``W``, ``V`` with rows of one width."""
    for i in range(len(rows)):
        r = rows[i]
        for c in range(W.shape[1]):
            W[r, c] = V[i, c]
