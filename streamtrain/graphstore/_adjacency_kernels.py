"""The memory graph store's insert, compiled (numba, cached): per node its ``K`` most recent
distinct neighbours, oldest first. Edges are applied one at a time in stream order: a
neighbour already in the row moves to the newest end, a new one is appended, and a full row
drops its oldest. At most ``K`` steps per edge."""
from __future__ import annotations

from streamtrain.compiled import njit


@njit(nogil=True)
def insert_edges(nbr, count, rows, dst):
    """Insert ``dst[e]`` into row ``rows[e]`` of ``nbr`` (``count``: entries held per row), in
    order; returns how many entries were added (a moved or dropped one adds none)."""
    k = nbr.shape[1]
    added = 0
    for e in range(len(rows)):
        r, d = rows[e], dst[e]
        n = count[r]
        at = n
        for j in range(n):
            if nbr[r, j] == d:
                at = j
                break
        if at == n and n < k:
            nbr[r, n] = d
            count[r] = n + 1
            added += 1
            continue
        if at == n:                  # full: the oldest falls out
            at = 0
        for j in range(at, n - 1):
            nbr[r, j] = nbr[r, j + 1]
        nbr[r, n - 1] = d
    return added
