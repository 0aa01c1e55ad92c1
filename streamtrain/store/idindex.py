"""A growing map from uint64 ids to row numbers, looked up a whole batch at a time.

Two sorted arrays, a large main one and a small recent one (merged into main when it grows
past an eighth of it), so both lookups (``searchsorted``) and inserts stay vectorised and
amortised O(log n) per id.
"""
from __future__ import annotations

import numpy as np


class IdIndex:
    def __init__(self):
        empty_k, empty_r = np.zeros(0, np.uint64), np.zeros(0, np.int64)
        self._main = (empty_k, empty_r)
        self._recent = (empty_k, empty_r)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    @staticmethod
    def _find(part, ids):
        keys, rows = part
        if not len(keys):
            return np.full(len(ids), -1, np.int64)
        pos = np.searchsorted(keys, ids)
        pos_c = np.minimum(pos, len(keys) - 1)
        return np.where(keys[pos_c] == ids, rows[pos_c], -1)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, -1 where unknown."""
        ids = np.asarray(ids, np.uint64)
        found = self._find(self._main, ids)
        missing = found < 0
        if missing.any() and len(self._recent[0]):
            found[missing] = self._find(self._recent, ids[missing])
        return found

    def insert(self, ids: np.ndarray) -> np.ndarray:
        """Add ids that are not present (unique, unknown); return their new row numbers."""
        ids = np.asarray(ids, np.uint64)
        rows = np.arange(self.size, self.size + len(ids), dtype=np.int64)
        self.size += len(ids)
        keys = np.concatenate([self._recent[0], ids])
        vals = np.concatenate([self._recent[1], rows])
        order = np.argsort(keys, kind="stable")
        self._recent = (keys[order], vals[order])
        if len(self._recent[0]) > max(4096, len(self._main[0]) // 8):
            keys = np.concatenate([self._main[0], self._recent[0]])
            vals = np.concatenate([self._main[1], self._recent[1]])
            order = np.argsort(keys, kind="stable")
            self._main = (keys[order], vals[order])
            empty_k, empty_r = np.zeros(0, np.uint64), np.zeros(0, np.int64)
            self._recent = (empty_k, empty_r)
        return rows

    def items(self) -> tuple[np.ndarray, np.ndarray]:
        """All (ids, rows), ids sorted."""
        keys = np.concatenate([self._main[0], self._recent[0]])
        vals = np.concatenate([self._main[1], self._recent[1]])
        order = np.argsort(keys, kind="stable")
        return keys[order], vals[order]
