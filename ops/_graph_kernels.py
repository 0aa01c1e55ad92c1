"""Compiled sums over a block's edges (numba, cached): the per-edge loops of ``scatter_gather``."""
from __future__ import annotations

from streamtrain.compiled import njit


@njit(nogil=True)
def gather_sum(indptr, src, x, out):
    """``out[d] = sum of x[src[e]]`` over the edges ``e`` of destination ``d`` (CSR ``indptr``)."""
    n, f = out.shape
    for d in range(n):
        for j in range(f):
            out[d, j] = 0
        for e in range(indptr[d], indptr[d + 1]):
            s = src[e]
            for j in range(f):
                out[d, j] += x[s, j]


@njit(nogil=True)
def scatter_sum(dst, src, g, out):
    """``out[s] = sum of g[dst[e]]`` over the edges ``e`` leaving source ``s``."""
    f = out.shape[1]
    out[:] = 0
    for e in range(len(src)):
        s, d = src[e], dst[e]
        for j in range(f):
            out[s, j] += g[d, j]
