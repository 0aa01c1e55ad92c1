"""Unique ids of a batch and where each occurrence falls among them, in one compiled pass.

A batch's ids go through a small open-addressing hash table (linear probing, at most half
full, slots found by multiplying the id by 2^64/phi and keeping the top bits, so ids that are
not hashes spread too): each id is either found (its unique position) or appended. That is
O(n) and ~20x cheaper than ``np.unique(..., return_inverse=True)``, which argsorts. The
unique ids come in the order of their first occurrence, not sorted.

>>> import numpy as np
>>> uniq, inverse = unique_inverse(np.array([7, 3, 7, 9, 3], np.uint64))
>>> uniq.tolist(), inverse.tolist()
([7, 3, 9], [0, 1, 0, 2, 1])
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit
from streamtrain.prefetch import prefetch

FIBONACCI = np.uint64(0x9E3779B97F4A7C15)      # 2^64 / golden ratio: Knuth's multiplicative hash


@njit(nogil=True, inline="always")
def home(x, shift):
    """The home slot of id ``x`` in a table of ``2 ** (64 - shift)`` slots (the hash above)."""
    return np.int64((x * FIBONACCI) >> shift)


def table_bits(n: int) -> int:
    """log2 of a power-of-two slot count of at least ``2 n`` (at most half full), at least 16 slots."""
    return max(4, int(2 * n - 1).bit_length())


def unique_inverse(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique ids in order of first occurrence, inverse) with ``unique[inverse] == ids``."""
    ids = np.ascontiguousarray(ids, dtype=np.uint64).reshape(-1)
    if len(ids) >= 1 << 30:                   # int32 slots; no batch comes near
        uniq, inverse = np.unique(ids, return_inverse=True)
        return uniq, inverse.reshape(-1)
    return _unique_inverse(ids, table_bits(len(ids)))


AHEAD = 16       # ids whose home slot is prefetched ahead of the probe (``prefetch``)


@njit(nogil=True)
def _unique_inverse(ids, bits):
    n = len(ids)
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    slots = np.full(1 << bits, -1, np.int32)       # position in ``uniq`` of the id in each slot
    uniq = np.empty(n, np.uint64)
    inverse = np.empty(n, np.int64)
    m = 0
    for i in range(min(AHEAD, n)):
        prefetch(slots, home(ids[i], shift))
    for i in range(n):
        if i + AHEAD < n:
            prefetch(slots, home(ids[i + AHEAD], shift))
        x = ids[i]
        s = home(x, shift)
        while True:
            k = slots[s]
            if k < 0:
                slots[s] = m
                uniq[m] = x
                inverse[i] = m
                m += 1
                break
            if uniq[k] == x:
                inverse[i] = k
                break
            s = (s + 1) & mask
    return uniq[:m].copy(), inverse
