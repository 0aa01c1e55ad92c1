"""A compiled scatter with a cast (numba, cached) for the memory store's ``assigns``: the
per-example engine's float64 rows are written into the float32 tables in one pass per array,
without the float32 temporary (and the second pass) of ``put_rows``'s cast."""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit
from streamtrain.prefetch import prefetch

AHEAD = 16      # rows whose cache line is asked for before they are written (``prefetch``)


@njit(nogil=True)
def scatter_rows(W, rows, V):
    """``W[rows[i]] = V[i]`` (cast to W's dtype) for 2-D ``W``, ``V`` with rows of one width.
    The rows are scattered over a table larger than the caches: each is requested ``AHEAD``
    rows before it is written, so the misses overlap instead of stalling one after another."""
    n = len(rows)
    for i in range(min(AHEAD, n)):
        prefetch(W, rows[i])
    for i in range(n):
        if i + AHEAD < n:
            prefetch(W, rows[i + AHEAD])
        r = np.uint64(rows[i])                  # (unsigned: no negative-index wraparound)
        for c in range(W.shape[1]):
            W[r, np.uint64(c)] = V[np.uint64(i), np.uint64(c)]
