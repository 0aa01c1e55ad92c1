"""Reading batch k+1's rows on a thread while batch k computes (the redis store's overlap).

``start(dense, tables)`` sends the MGET of the next batch's rows from a background thread (its
own pooled connection). Every row this store writes afterwards (``record``: creates, updates,
restores, from the compare-and-set's answer) is kept, and ``take(dense, tables)`` patches those
writes into what the thread read. With one trainer the patched rows are exactly what a read
after the push would return, so results are unchanged. Rows another trainer writes meanwhile
are at most one batch stale in the forward pass; the push's compare-and-set then finds their
tag changed, re-reads and recomputes them, so no update is lost (redis_scripts).

>>> import numpy as np
>>> positions(np.array([2, 5, 9], np.uint64), np.array([9, 3, 2], np.uint64))
(array([2, 0]), array([ True, False,  True]))
>>> positions(np.array([9, 2, 5], np.uint64), np.array([9, 3, 2], np.uint64))
(array([0, 1]), array([ True, False,  True]))
"""
from __future__ import annotations

import threading

import numpy as np

from .redis_rows import Rows


def positions(pulled: np.ndarray, written: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each ``written`` id sits in the ``pulled`` ids (unique, in any order), and which
    ones are there."""
    order = np.argsort(pulled, kind="stable")
    ordered = pulled[order]
    pos = np.searchsorted(ordered, written)
    inside = pos < len(ordered)
    found = inside.copy()
    found[inside] = ordered[pos[inside]] == written[inside]
    return order[pos[found]], found


class Prefetch:
    def __init__(self, store):
        self.store = store
        self.thread: threading.Thread | None = None
        self.items: list[Rows] = []
        self.error: BaseException | None = None
        self.writes: list[tuple] = []          # (name, ids or None, encoded values) since start
        self.hits = self.misses = 0

    def start(self, dense, tables) -> None:
        """Read these rows in the background (a read still in flight is dropped first)."""
        self.cancel()
        self.items = [Rows(self.store, n, None) for n in dense]
        self.items += [Rows(self.store, n, np.array(ids, np.uint64)) for n, ids in tables.items()]
        self.writes, self.error = [], None

        def read():
            try:
                self.store.read_rows(self.items, "prefetch next batch's rows")
            except BaseException as err:  # noqa: BLE001 - the pull reads again and reports it
                self.error = err

        self.thread = threading.Thread(target=read, name="streamtrain-redis-prefetch", daemon=True)
        self.thread.start()

    def record(self, name: str, ids, values: np.ndarray) -> None:
        """This store wrote ``values`` (encoded rows) for ``ids`` of ``name`` (None: dense).
        An attempt that wrote nothing (its compare-and-set lost every row) is not a write."""
        if self.thread is not None and len(values):
            self.writes.append((name, ids, values))

    def take(self, dense, tables) -> list[Rows] | None:
        """The prefetched rows patched with this store's writes since, if they are exactly the
        rows asked for (and the read succeeded); None otherwise (the caller reads them)."""
        if self.thread is None:
            return None
        self.thread.join()
        self.thread = None
        items, writes = self.items, self.writes
        self.items, self.writes = [], []
        if self.error is not None or not _same(items, dense, tables):
            self.misses += 1
            return None
        by_name = {it.name: it for it in items}
        for name, ids, values in writes:
            it = by_name.get(name)
            if it is None or it.present is None:
                continue
            if it.ids is None:
                rows, keep = np.zeros(1, np.int64), np.ones(1, bool)
            else:
                rows, keep = positions(it.ids, ids)
            if len(rows):
                it.set_encoded(rows, values[keep])
        self.hits += 1
        return items

    def cancel(self) -> None:
        """Drop a read in flight (restore, close): its rows are not used."""
        if self.thread is not None:
            self.thread.join()
        self.thread, self.items, self.writes = None, [], []


def _same(items: list[Rows], dense, tables) -> bool:
    want = [(n, None) for n in dense] + [(n, np.asarray(ids, np.uint64)) for n, ids in tables.items()]
    if len(want) != len(items):
        return False
    for it, (name, ids) in zip(items, want):
        if it.name != name or (ids is None) != (it.ids is None):
            return False
        if ids is not None and not np.array_equal(ids, it.ids):
            return False
    return True
