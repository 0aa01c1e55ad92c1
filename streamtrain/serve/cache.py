"""Where a server reads parameters from: the live Redis rows through a bounded-staleness cache,
or a running trainer's own memory store between two of its steps.

Both answer ``pull(dense, tables) -> (values, fetched_at)``: the values of the dense parameters
and of the rows of ``tables[name]`` (unique ids, any order), and the monotonic time at which the
oldest of them was read from where the trainers write it. Neither ever creates a row: unknown
ids read as their deterministic initial rows.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from streamtrain.errors import StoreError
from streamtrain.growth import capacity_for, grow_rows
from streamtrain.store.idindex import IdIndex
from streamtrain.store.memory import put_rows, take_rows


class _TableCache:
    """Rows of one table with the time each was read; cleared whole when it reaches its cap."""

    def __init__(self, dim: int, capacity: int):
        self.dim, self.capacity = dim, capacity
        self.clear()

    def clear(self) -> None:
        self.index = IdIndex()
        self.values = np.zeros((1024, self.dim), np.float32)
        self.fetched = np.zeros(1024)

    def lookup(self, ids, now, max_age):
        """(rows, stale mask): a row is stale when unknown or read more than ``max_age`` ago."""
        rows = self.index.lookup(ids)
        stale = rows < 0
        stale[~stale] = now - self.fetched[rows[~stale]] > max_age
        if len(self.index) + int((rows < 0).sum()) > self.capacity:     # full: start again
            self.clear()
            rows, stale = np.full(len(ids), -1, np.int64), np.ones(len(ids), bool)
        return rows, stale

    def put(self, ids, rows, values, now) -> np.ndarray:
        new = rows < 0
        if new.any():
            rows = rows.copy()
            rows[new] = self.index.insert(ids[new])
            self._grow(len(self.index))
        put_rows(self.values, rows, values)
        self.fetched[rows] = now
        return rows

    def _grow(self, needed: int) -> None:
        if needed <= len(self.fetched):
            return
        capacity = capacity_for(len(self.fetched), needed)
        self.values, self.fetched = grow_rows(self.values, capacity), grow_rows(self.fetched, capacity)


class CachedParams:
    """The Redis store's rows, re-read once older than ``max_staleness_s``; dense parameters too.

    The store is this server's own client (never the trainers'); reads go through one lock
    because a store client is not thread-safe, but the cache lookups around them are vectorised.
    """

    def __init__(self, store, max_staleness_s: float = 1.0, max_rows: int = 4_000_000):
        self.store, self.max_age = store, float(max_staleness_s)
        self.tables = {name: _TableCache(spec.dim, max_rows) for name, spec in store.specs.items() if spec.table}
        self.dense: dict[str, tuple[np.ndarray, float]] = {}
        self.lock = threading.Lock()
        self.hits = self.misses = 0
        self.pause_s, self.down_until, self.last_error = 0.25, 0.0, None

    def pull(self, dense, tables):
        now = time.monotonic()
        with self.lock:
            old = [n for n in dense if n not in self.dense or now - self.dense[n][1] > self.max_age]
            plan = {}
            for name, ids in tables.items():
                rows, stale = self.tables[name].lookup(ids, now, self.max_age)
                plan[name] = (rows, stale)
                self.misses += int(stale.sum())
                self.hits += len(ids) - int(stale.sum())
            wanted = {name: ids[plan[name][1]] for name, ids in tables.items() if plan[name][1].any()}
            if old or wanted:
                fresh = self._read(old, wanted)
                read_at = time.monotonic()
                for name in old:
                    self.dense[name] = (fresh[name], read_at)
                for name, ids in wanted.items():
                    rows, stale = plan[name]
                    rows = rows.copy()
                    rows[stale] = self.tables[name].put(ids, rows[stale], fresh[name], read_at)
                    plan[name] = (rows, stale)
            values, oldest = {}, now
            for name in dense:
                values[name], at = self.dense[name]
                oldest = min(oldest, at)
            for name, (rows, _) in plan.items():
                cache = self.tables[name]
                values[name] = take_rows(cache.values, rows)
                if len(rows):
                    oldest = min(oldest, float(cache.fetched[rows].min()))
        return values, oldest

    def _read(self, dense, tables):
        """The store's values; after a failed read, requests fail at once for ``pause_s`` (0.25 s) instead
        of queueing behind this lock for ``store_give_up_s`` each."""
        if time.monotonic() < self.down_until:
            raise StoreError(f"parameter store unreachable (last attempt failed: {self.last_error})")
        try:
            return self.store.pull(dense, tables, create=False)
        except StoreError as err:
            self.down_until, self.last_error = time.monotonic() + self.pause_s, err
            raise

    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class LiveParams:
    """A running job's own store, read while it holds no step (``job.step_lock``): never half
    an update. The values are the current ones: their age is 0."""

    def __init__(self, job):
        self.job = job

    def pull(self, dense, tables):
        with self.job.step_lock:
            values = self.job.store.pull(dense, tables, create=False)
        return values, time.monotonic()
