"""A growing map from uint64 ids to row numbers, looked up a whole batch at a time.

Rows are numbered in the order ids arrive (0, 1, 2, ...). The map is an open-addressing hash
table (linear probing, at most half full, doubled when a batch could fill it past that) whose
slots hold ``(id, row + 1)`` side by side, 0 marking an empty slot, so a probe reads one cache
line; the slot of an id is the top bits of ``id * 2^64/phi``. Lookups and inserts run as one
compiled loop over the batch: O(1) per id, no sort. ``ids[row]`` keeps the id of every row.

>>> import numpy as np
>>> index = IdIndex()
>>> index.find_or_add(np.array([5, 9, 5], np.uint64)).tolist()
[0, 1, 0]
>>> index.lookup(np.array([9, 4], np.uint64)).tolist()
[1, -1]
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit
from streamtrain.growth import capacity_for, grow_rows
from streamtrain.prefetch import prefetch
from streamtrain.uniq import home, table_bits


class IdIndex:
    def __init__(self, capacity: int = 1024):
        self._bits = table_bits(capacity)
        self._slots = np.zeros((1 << self._bits, 2), np.uint64)     # (id, row + 1); 0: empty
        self._ids = np.zeros(capacity, np.uint64)                    # id of each row
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, -1 where unknown."""
        ids = np.ascontiguousarray(ids, np.uint64).reshape(-1)
        return _lookup(self._slots, self._bits, ids)

    def find_or_add(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, adding the unknown ones (in order of first occurrence; a repeated id
        gets one row). The new rows are those ``>= len(self)`` before the call."""
        ids = np.ascontiguousarray(ids, np.uint64).reshape(-1)
        self._reserve(self.size + len(ids))
        rows, self.size = _find_or_add(self._slots, self._bits, self._ids, self.size, ids)
        return rows

    insert = find_or_add       # the name callers that add only unknown ids use

    def _reserve(self, needed: int) -> None:
        """Room for ``needed`` ids: the id column and the slots (kept at most half full)."""
        if needed > len(self._ids):
            self._ids = grow_rows(self._ids, capacity_for(len(self._ids), needed))
        bits = table_bits(needed)
        if bits > self._bits:
            self._slots = _rehash(self._slots, bits)
            self._bits = bits

    @property
    def ids(self) -> np.ndarray:
        """The id of every row (a view: row ``r``'s id is ``ids[r]``)."""
        return self._ids[:self.size]

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """All (ids, rows), ids sorted."""
        ids = self.ids
        order = np.argsort(ids, kind="stable")
        return ids[order], order.astype(np.int64)


@njit(nogil=True, inline="always")
def _slot(slots, mask, shift, x):
    """The slot holding ``x``, else the empty slot where it goes (linear probing)."""
    s = home(x, shift)
    while True:
        if slots[s, 1] == 0 or slots[s, 0] == x:
            return s
        s = (s + 1) & mask


@njit(nogil=True)
def _lookup(slots, bits, ids):
    mask, shift = (1 << bits) - 1, np.uint64(64 - bits)
    rows = np.empty(len(ids), np.int64)
    for i in range(len(ids)):
        rows[i] = np.int64(slots[_slot(slots, mask, shift, ids[i]), 1]) - 1      # empty: -1
    return rows


AHEAD = 16       # ids whose home slot is prefetched ahead of the probe (``prefetch``)


@njit(nogil=True)
def _find_or_add(slots, bits, row_ids, size, ids):
    """The probes of a batch's ids: each id's home slot is requested ``AHEAD`` ids before its
    probe, so the cache misses of a table larger than the caches overlap instead of queueing."""
    mask, shift = (1 << bits) - 1, np.uint64(64 - bits)
    rows = np.empty(len(ids), np.int64)
    for i in range(min(AHEAD, len(ids))):
        prefetch(slots, home(ids[i], shift))
    for i in range(len(ids)):
        if i + AHEAD < len(ids):
            prefetch(slots, home(ids[i + AHEAD], shift))
        x = ids[i]
        s = _slot(slots, mask, shift, x)
        r = slots[s, 1]
        if r == 0:
            slots[s, 0] = x
            slots[s, 1] = np.uint64(size + 1)
            row_ids[size] = x
            rows[i] = size
            size += 1
        else:
            rows[i] = np.int64(r) - 1
    return rows, size


@njit(nogil=True)
def _rehash(slots, bits):
    out = np.zeros((1 << bits, 2), np.uint64)
    mask, shift = (1 << bits) - 1, np.uint64(64 - bits)
    for j in range(len(slots)):
        if slots[j, 1] != 0:
            s = _slot(out, mask, shift, slots[j, 0])
            out[s, 0] = slots[j, 0]
            out[s, 1] = slots[j, 1]
    return out
