"""Unique ids of a batch and where each occurrence falls among them, fast.

``np.unique(..., return_inverse=True)`` argsorts the 64-bit ids, which costs ~4x a plain
sort. Ids here are hashes, so their high bits are already well spread: we sort one uint64
array holding ``(id >> k) << k | position`` (k bits for the position), which is a plain,
SIMD-accelerated sort, and read both the order and the id prefix back from it. If two
different ids share a prefix in one batch (about n²/2^(65-k) odds), we fall back to the exact
argsort path, so the result is always exact.
"""
from __future__ import annotations

import numpy as np


def unique_inverse(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted unique ids, inverse) with ``unique[inverse] == ids``."""
    ids = np.asarray(ids, dtype=np.uint64)
    n = len(ids)
    if n == 0:
        return ids.copy(), np.zeros(0, np.int64)
    bits = max(1, int(n - 1).bit_length())
    if bits > 40:
        return _exact(ids)
    shift = np.uint64(bits)
    keys = (ids >> shift) << shift
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort()
    order = (keys & np.uint64((1 << bits) - 1)).astype(np.int64)
    prefix = keys >> shift
    sorted_ids = ids[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(prefix[1:], prefix[:-1], out=new[1:])
    same_prefix_other_id = ~new[1:] & (sorted_ids[1:] != sorted_ids[:-1])
    if same_prefix_other_id.any():
        return _exact(ids)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return sorted_ids[new], inverse


def _exact(ids):
    uniq, inverse = np.unique(ids, return_inverse=True)
    return uniq, inverse.reshape(-1)
