"""Compiled preparation of the kernel's inputs (numba, cached): the grid of a batch's *dense*
occurrences, ``[B, W]`` (example ``k``'s are row ``k``), written in place into arrays the
engine reuses from batch to batch instead of building, stacking and casting per-term arrays.
"""
from __future__ import annotations

import numpy as np

from ..compiled import numba  # numba as streamtrain.compiled loads it (start-up: see there)

njit = numba.njit


@njit(cache=True, nogil=True, error_model="numpy")
def put_present(row, x, col, m, present, pos, lo, w):
    """Columns ``col .. col + m`` of ``row``/``x`` from a *present* term (``Term.present``):
    example ``k``'s column ``f`` holds the next occurrence of column ``f`` when
    ``present[f * B + k]`` (row ``lo + pos``, coefficient ``w``; ``w`` empty: 1), else padding
    (coefficient 0; its row is never read). Branch-free, example after example: a cursor per
    column walks the occurrences, which come column after column."""
    B = row.shape[0]
    n = len(pos)
    weighted = len(w) > 0
    cur = np.empty(m, np.int64)
    i = 0
    for f in range(m):
        cur[f] = i
        for k in range(B):
            i += present[f * B + k]
    for k in range(B):
        for f in range(m):
            here = present[f * B + k]
            j = min(cur[f], n - 1)
            row[k, col + f] = pos[j] + lo
            x[k, col + f] = here * (w[j] if weighted else 1.0)
            cur[f] += here
