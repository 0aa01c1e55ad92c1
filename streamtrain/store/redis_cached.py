"""The rows one parameter keeps in the redis store's write-back cache (redis_writeback): per
cached row (numbered by ``IdIndex``) its weights and optimizer slots as the memory store's tables
hold them, its tag and its value at this trainer's last read or write of it (``base``), and two
flags: ``dirty`` (changed since the last flush) and ``stale`` (to be read again when pulled). A
dense parameter is a table of one row.
"""
from __future__ import annotations

import numpy as np

from streamtrain.growth import capacity_for, grow_rows

from .idindex import IdIndex
from .memory import put_rows, take_rows


class Cached:
    """The cached rows of one parameter: values, slots, tags, base copies and flags."""

    def __init__(self, layout, capacity=1024):
        self.layout = layout
        self.table = layout.spec.table
        if not self.table:          # one row, as wide as the parameter (an MLP's weights: 10^4+ wide)
            capacity = 1
        self.index = IdIndex()
        self.w = np.zeros((capacity, layout.dim), layout.dtype)
        self.state = {k: np.zeros((capacity, width), layout.dtype) for k, width in layout.slots}
        self.base_w = np.zeros(self.w.shape, self.w.dtype)       # (np.zeros: pages zeroed lazily)
        self.base_state = {k: np.zeros(a.shape, a.dtype) for k, a in self.state.items()}
        self.tags = np.zeros(capacity, np.uint64)
        self.dirty = np.zeros(capacity, bool)
        self.stale = np.zeros(capacity, bool)
        self.last = None            # rows of the last pull (pull_states; its push reuses them)
        self.last_ids = None        # ... and the id array it was asked for

    def __len__(self) -> int:
        return len(self.index)

    def _grow(self, needed: int) -> None:
        if needed <= len(self.w):
            return
        cap = capacity_for(len(self.w), needed)
        self.w, self.base_w = grow_rows(self.w, cap), grow_rows(self.base_w, cap)
        self.state = {k: grow_rows(a, cap) for k, a in self.state.items()}
        self.base_state = {k: grow_rows(a, cap) for k, a in self.base_state.items()}
        self.tags, self.dirty, self.stale = (grow_rows(a, cap) for a in (self.tags, self.dirty, self.stale))

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id, -1 where not cached or stale (to be read from Redis)."""
        rows = self.index.lookup(ids)
        known = rows >= 0
        rows[known & self.stale[np.maximum(rows, 0)]] = -1
        return rows

    def fresh_dense(self) -> bool:
        """A dense parameter (its one row, id 0, is row 0): cached and not stale."""
        return len(self.index) > 0 and not self.stale[0]

    def take(self, ids: np.ndarray, tags, w, state) -> np.ndarray:
        """Cache rows read from (or created in) Redis as clean; their row numbers."""
        rows = self.index.find_or_add(ids)
        self._grow(len(self.index))
        for dst, base, src in ((self.w, self.base_w, w), *((self.state[k], self.base_state[k], state[k])
                                                           for k in self.state)):
            put_rows(dst, rows, src)
            put_rows(base, rows, src)
        self.tags[rows] = tags
        self.dirty[rows] = False
        self.stale[rows] = False
        return rows

    def values(self, rows: np.ndarray) -> tuple[np.ndarray, dict]:
        return take_rows(self.w, rows), {k: take_rows(a, rows) for k, a in self.state.items()}

    def drop(self, rows: np.ndarray) -> None:
        """Rows not written (a value not finite): clean and stale, so a pull reads them again,
        and untagged, so their local copy is never taken for a row Redis lost (``recover``)."""
        self.dirty[rows] = False
        self.stale[rows] = True
        self.tags[rows] = 0

    def recover(self, it, ids: np.ndarray) -> int:
        """Rows of ``it`` (just read, ``ids``) that Redis no longer has but this cache held (read
        or written: tagged) take their local copy instead of their initial value, to be written
        again as new rows by the next flush. How many."""
        absent = np.flatnonzero(~it.present)
        if not len(absent):
            return 0
        old = self.index.lookup(ids[absent])
        held = old >= 0
        held[held] = self.tags[old[held]] != 0
        at, src = absent[held], old[held]
        it.w[at] = take_rows(self.w, src)
        for k in it.state:
            it.state[k][at] = take_rows(self.state[k], src)
        return len(at)
