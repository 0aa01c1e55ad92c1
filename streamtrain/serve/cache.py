"""Where a server reads parameters from: the live Redis rows through a bounded-staleness cache,
or a running trainer's own memory store between two of its steps.

Both answer ``pull(dense, tables, may_read=True) -> (values, fetched_at)``: the values of the
dense parameters and of the rows of ``tables[name]`` (unique ids, any order), and the monotonic
time at which the oldest of them was read from where the trainers write it. Neither ever
creates a row: unknown ids read as their deterministic initial rows. With ``may_read=False``
a pull that would have to wait (a store read, a trainer's step) raises ``MustWait`` instead:
the HTTP layer answers such requests on its event loop and hands only these to a thread.

The Redis cache keeps the rows requests use fresh in the background (``refresh``, called by
``Refresher``): a row a request used within ``refresh_window_s`` is re-read once it is 0.7 of
``max_staleness_s`` old, so a request finds it in the cache, never older than the bound, and
waits for the store only for rows it is the first to ask for (or when the store is slower
than the bound). The bound itself is checked on every request: a row older than
``max_staleness_s`` is never used without reading it again.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import time

import numpy as np

from streamtrain.errors import StoreError
from streamtrain.growth import capacity_for, grow_rows
from streamtrain.store.idindex import IdIndex
from streamtrain.store.memory import put_rows, take_rows

log = logging.getLogger("streamtrain.serve")
REFRESH_MAX_ROWS = 100_000      # rows re-read per refresh pass at most (the most recently used first)
REFRESH_CHUNK = 2_000           # rows per background read
REFRESH_AT = 0.7                # re-read a row in use at this fraction of the bound ...
REFRESH_EVERY = 0.1             # ... looking for such rows this often (fractions of max_staleness_s)


class MustWait(Exception):
    """``pull(may_read=False)`` could not answer without waiting for the store or a step.
    ``resume``, when set, finishes the request (in a thread that may wait)."""

    resume = None


class _TableCache:
    """Rows of one table with the time each was read and last used; cleared whole when it
    reaches its cap."""

    def __init__(self, dim: int, capacity: int):
        self.dim, self.capacity = dim, capacity
        self.clear()

    def clear(self) -> None:
        self.index = IdIndex()
        self.values = np.zeros((1024, self.dim), np.float32)
        self.fetched = np.zeros(1024)
        self.used = np.zeros(1024)
        self.ids = np.zeros(1024, np.uint64)

    def lookup(self, ids, now, max_age):
        """(rows, stale mask): a row is stale when unknown or read more than ``max_age`` ago.
        The rows found are marked used now."""
        rows = self.index.lookup(ids)
        known = rows >= 0
        if known.all():
            stale = now - self.fetched[rows] > max_age
            self.used[rows] = now
            return rows, stale
        if len(self.index) + int((~known).sum()) > self.capacity:     # full: start again
            self.clear()
            return np.full(len(ids), -1, np.int64), np.ones(len(ids), bool)
        stale = ~known
        hit = rows[known]
        stale[known] = now - self.fetched[hit] > max_age
        self.used[hit] = now
        return rows, stale

    def put(self, ids, values, read_at, now) -> None:
        """Store rows read at ``read_at``; a row someone stored from a later read keeps its value."""
        rows = self.index.lookup(ids)
        new = rows < 0
        if new.any():
            if len(self.index) + int(new.sum()) > self.capacity:
                self.clear()
                rows, new = np.full(len(ids), -1, np.int64), np.ones(len(ids), bool)
            rows[new] = self.index.insert(ids[new])
            self._grow(len(self.index))
            self.ids[rows[new]] = ids[new]
        newer = self.fetched[rows] < read_at
        if not newer.all():
            rows, values = rows[newer], values[newer]
        put_rows(self.values, rows, values)
        self.fetched[rows] = read_at
        if now is not None:
            self.used[rows] = now

    def refresh(self, ids, values, read_at) -> None:
        """Rows re-read in the background: only those still cached (a clear drops the rest)."""
        rows = self.index.lookup(ids)
        keep = rows >= 0
        keep[keep] = self.fetched[rows[keep]] < read_at
        rows = rows[keep]
        put_rows(self.values, rows, values[keep])
        self.fetched[rows] = read_at

    def due(self, now, age, window, limit) -> np.ndarray:
        """Ids of the rows read more than ``age`` ago and used within ``window``."""
        n = len(self.index)
        fetched, used = self.fetched[:n], self.used[:n]
        rows = np.flatnonzero((now - fetched > age) & (now - used <= window))
        if len(rows) > limit:
            rows = rows[np.argpartition(-used[rows], limit - 1)[:limit]]
        return np.sort(self.ids[rows])

    def _grow(self, needed: int) -> None:
        if needed <= len(self.fetched):
            return
        capacity = capacity_for(len(self.fetched), needed)
        self.values, self.fetched = grow_rows(self.values, capacity), grow_rows(self.fetched, capacity)
        self.used, self.ids = grow_rows(self.used, capacity), grow_rows(self.ids, capacity)


class CachedParams:
    """The Redis store's rows, re-read once older than ``max_staleness_s``; dense parameters too.

    The store is this server's own client (never the trainers'); its reads go through
    ``io_lock`` (a store client is not thread-safe) and never under ``lock``, which guards the
    cached arrays only: a request that finds its rows cached never waits for a store read,
    whoever is reading.
    """

    def __init__(self, store, max_staleness_s: float = 1.0, max_rows: int = 4_000_000,
                 refresh_window_s: float = 10.0, refresh_store=None):
        self.store, self.max_age = store, float(max_staleness_s)
        self.refresh_store = refresh_store if refresh_store is not None else store
        self.window = float(refresh_window_s)
        self.tables = {name: _TableCache(spec.dim, max_rows) for name, spec in store.specs.items() if spec.table}
        self.dense: dict[str, tuple[np.ndarray, float]] = {}
        self.dense_used = 0.0
        self.lock = threading.Lock()
        self.io_lock = threading.Lock()
        self.refresh_lock = threading.Lock()
        self.hits = self.misses = self.reads = 0
        self.pause_s, self.down_until, self.last_error = 0.25, 0.0, None
        self.replica = None             # a complete copy of the tables (replica.py), when kept

    def pull(self, dense, tables, may_read: bool = True):
        now = time.monotonic()
        max_age = self.max_age
        values, oldest = {}, now
        wanted, old = {}, []
        hits = misses = 0
        with self.lock:
            for name in dense:
                if self.replica is not None and (got := self.replica.dense(name, now, max_age)) is not None:
                    values[name] = got[0]
                    oldest = min(oldest, got[1])
                    continue
                self.dense_used = now
                got = self.dense.get(name)
                if got is None or now - got[1] > max_age:
                    old.append(name)
                else:
                    values[name] = got[0]
                    oldest = min(oldest, got[1])
            for name, ids in tables.items():
                if self.replica is not None and (got := self.replica.rows(name, ids, now, max_age)) is not None:
                    values[name] = got[0]
                    oldest = min(oldest, got[1])
                    hits += len(ids)
                    continue
                cache = self.tables[name]
                rows, stale = cache.lookup(ids, now, max_age)
                n_stale = int(stale.sum())
                misses += n_stale
                hits += len(ids) - n_stale
                if n_stale:
                    wanted[name] = (ids, stale)
                    rows = np.where(stale, 0, rows)
                    if n_stale == len(ids):
                        values[name] = np.empty((len(ids), cache.dim), np.float32)
                        continue
                values[name] = take_rows(cache.values, rows)
                if len(rows):
                    oldest = min(oldest, float(cache.fetched[rows[~stale] if n_stale else rows].min()))
            if not (old or wanted) or may_read:        # (a MustWait is counted by its retry)
                self.hits += hits
                self.misses += misses
        if not (old or wanted):
            return values, oldest
        if not may_read:
            raise MustWait
        read_at = time.monotonic()
        fresh = self._read(old, {name: ids[stale] for name, (ids, stale) in wanted.items()})
        with self.lock:
            self.reads += 1
            for name in old:
                self.dense[name] = (fresh[name], read_at)
                values[name] = fresh[name]
            for name, (ids, stale) in wanted.items():
                self.tables[name].put(ids[stale], fresh[name], read_at, now)
                values[name][stale] = fresh[name]
        return values, min(oldest, read_at)

    def _read(self, dense, tables, store=None, lock=None):
        """The store's values; after a failed read, requests fail at once for ``pause_s`` (0.25 s) instead
        of queueing behind the store client for ``store_give_up_s`` each."""
        if time.monotonic() < self.down_until:
            raise StoreError(f"parameter store unreachable (last attempt failed: {self.last_error})")
        with lock or self.io_lock:
            if time.monotonic() < self.down_until:
                raise StoreError(f"parameter store unreachable (last attempt failed: {self.last_error})")
            try:
                return (store or self.store).pull(dense, tables, create=False)
            except StoreError as err:
                self.down_until, self.last_error = time.monotonic() + self.pause_s, err
                raise

    def refresh(self) -> int:
        """Re-read the rows (and dense parameters) requests used within ``refresh_window_s`` once
        they are ``REFRESH_AT`` of ``max_staleness_s`` old; the number of rows read."""
        now = time.monotonic()
        age = self.max_age * REFRESH_AT
        copied = set()              # what the complete copy answers: rows cached before it did need no re-read
        if self.replica is not None and self.replica.fresh(now, self.max_age * (1 - REFRESH_AT)):
            copied = self.replica.held()
        with self.lock:
            dense = [n for n, (_, at) in self.dense.items()
                     if now - at > age and now - self.dense_used <= self.window and n not in copied]
            tables = {name: ids for name, cache in self.tables.items()
                      if name not in copied and len(ids := cache.due(now, age, self.window, REFRESH_MAX_ROWS))}
        if not (dense or tables):
            return 0
        own = self.refresh_store is not self.store          # its own client: requests never wait for it
        store, lock = (self.refresh_store, self.refresh_lock) if own else (self.store, self.io_lock)
        chunks = [(dense, {})] if dense else []
        chunks += [([], {name: ids[i:i + REFRESH_CHUNK]}) for name, ids in tables.items()
                   for i in range(0, len(ids), REFRESH_CHUNK)]
        for dense_part, part in chunks:                     # short reads: redis-server answers others between them
            read_at = time.monotonic()
            fresh = self._read(dense_part, part, store, lock)
            with self.lock:
                for name in dense_part:
                    if self.dense[name][1] < read_at:
                        self.dense[name] = (fresh[name], read_at)
                for name, ids in part.items():
                    self.tables[name].refresh(ids, fresh[name], read_at)
        return sum(len(ids) for ids in tables.values())

    def hit_ratio(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class Refresher:
    """A daemon thread calling ``work()`` every ``interval_s`` until ``stop()``; a failure
    (a store outage) is logged once and retried on the next round."""

    def __init__(self, work, interval_s: float, name: str = "serve-refresh"):
        self.work, self.interval = work, float(interval_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        failing = False
        while not self._stop.wait(self.interval):
            try:
                self.work()
                failing = False
            except StoreError as err:
                if not failing:
                    log.warning("background refresh of the served parameters failed: %s", err)
                failing = True
            except Exception:                   # a bug: logged, the requests still check the bound
                log.exception("background refresh of the served parameters failed")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class LiveParams:
    """A running job's own store, read while it holds no step (``job.step_lock``): never half
    an update. The values are the current ones: their age is 0.

    A request waits for the store at most ``give_up_s`` (``serve.store_give_up_s``), as from
    ``streamtrain serve``: for the step in progress (which holds the lock while it retries an
    unreachable store) and for its own reads, which retry for that long only; then
    ``StoreError`` (a 503). While the job itself waits for the store, and for ``pause_s`` after
    a failed read, requests get it at once."""

    def __init__(self, job, give_up_s: float = 2.0):
        self.job, self.give_up_s = job, float(give_up_s)
        self.pause_s, self.down_until, self.last_error = 0.25, 0.0, None

    def pull(self, dense, tables, may_read: bool = True):
        waiting = self.job.waiting_for_store
        if waiting:
            raise StoreError(f"the trainer is waiting for its store ({waiting} failed)")
        if time.monotonic() < self.down_until:
            raise StoreError(f"parameter store unreachable (last attempt failed: {self.last_error})")
        lock = self.job.step_lock
        if not (lock.acquire(timeout=self.give_up_s) if may_read else lock.acquire(blocking=False)):
            if not may_read:
                raise MustWait
            raise StoreError(f"the trainer's step held the parameters for over {self.give_up_s:g} s "
                             f"(serve.store_give_up_s): its store is slow or unreachable")
        try:
            with _bounded(self.job.store, self.give_up_s):
                values = self.job.store.pull(dense, tables, create=False)
        except StoreError as err:
            self.down_until, self.last_error = time.monotonic() + self.pause_s, err
            raise
        finally:
            lock.release()
        return values, time.monotonic()


def _bounded(store, seconds: float):
    """The store's retries bounded to ``seconds`` in this thread (a store without retries: as is)."""
    shards = getattr(store, "shards", None)
    return shards.give_up_within(seconds) if shards is not None else contextlib.nullcontext()
