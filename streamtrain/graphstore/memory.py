"""The in-process graph store: per node its K most recent distinct neighbours, oldest first.

Rows are found with ``store.idindex.IdIndex`` (vectorised lookups); the arrays grow by half
when full. Reading a frontier's lists is a few numpy calls; inserting a batch of edges is one
compiled pass (``_adjacency_kernels``): a neighbour already held moves to the newest end, so
inserting the same edges again changes nothing.
"""
from __future__ import annotations

import numpy as np

from streamtrain.store.idindex import IdIndex

from .base import COMMON_OPTIONS, GraphStore, register


@register
class MemoryGraphStore(GraphStore):
    kind = "memory"
    options = COMMON_OPTIONS

    @classmethod
    def test_params(cls):
        return {"neighbours": 3}

    def __init__(self, neighbours: int = 32, **_):
        super().__init__(neighbours)
        self.index = IdIndex()
        self.nbr = np.zeros((0, self.k), np.uint64)
        self.count = np.zeros(0, np.int64)            # neighbours held (at most K)
        self.feat_index = IdIndex()
        self.feats = np.zeros((0, 0), np.float32)

    def _rows(self, index: IdIndex, ids: np.ndarray) -> np.ndarray:
        """Rows of ``ids`` in ``index``, adding the unknown ones."""
        rows = index.lookup(ids)
        missing = rows < 0
        if missing.any():
            new = np.unique(ids[missing])
            index.insert(new)
            rows[missing] = index.lookup(ids[missing])
        return rows

    def _grow(self, n: int) -> None:
        if n > len(self.count):
            cap = max(n, len(self.count) * 3 // 2, 1024)
            self.nbr = np.concatenate([self.nbr, np.zeros((cap - len(self.nbr), self.k), np.uint64)])
            self.count = np.concatenate([self.count, np.zeros(cap - len(self.count), np.int64)])

    def insert(self, src, dst) -> None:
        src, dst = np.asarray(src, np.uint64), np.asarray(dst, np.uint64)
        if not len(src):
            return
        rows = self._rows(self.index, src)
        self._grow(len(self.index))
        from ._adjacency_kernels import insert_edges     # numba: imported by the first graph job only
        insert_edges(self.nbr, self.count, rows, dst)

    def neighbours(self, ids):
        ids = np.asarray(ids, np.uint64)
        rows = self.index.lookup(ids)
        known = rows >= 0
        out = np.zeros((len(ids), self.k), np.uint64)
        counts = np.zeros(len(ids), np.int64)
        out[known] = self.nbr[rows[known]]
        counts[known] = self.count[rows[known]]
        return out, counts

    def set_features(self, ids, features) -> None:
        ids, features = np.asarray(ids, np.uint64), np.asarray(features, np.float32)
        if self.feats.shape[1] != features.shape[1]:
            self.feats = np.zeros((len(self.feats), features.shape[1]), np.float32)
        rows = self._rows(self.feat_index, ids)
        if len(self.feat_index) > len(self.feats):
            cap = max(len(self.feat_index), len(self.feats) * 3 // 2, 1024)
            self.feats = np.concatenate([self.feats, np.zeros((cap - len(self.feats), self.feats.shape[1]),
                                                              np.float32)])
        self.feats[rows] = features                        # a repeated id: its last row wins

    def features(self, ids, width):
        out = np.zeros((len(ids), width), np.float32)
        if width and self.feats.shape[1] == width:
            rows = self.feat_index.lookup(np.asarray(ids, np.uint64))
            known = rows >= 0
            out[known] = self.feats[rows[known]]
        return out

    def stats(self):
        n = len(self.index)
        return {"nodes": n, "edges": int(self.count[:n].sum())}

    def snapshot(self):
        ids, rows = self.index.items()
        fids, frows = self.feat_index.items()
        return {"ids": ids, "neighbours": self.nbr[rows], "counts": self.count[rows],
                "feature_ids": fids, "features": self.feats[frows] if len(fids) else np.zeros((0, 0), np.float32)}

    def restore(self, arrays) -> None:
        self.__init__(self.k)
        self.fill(arrays)
