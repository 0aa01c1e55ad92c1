"""The redis store's write-back cache: a local copy of the rows this trainer pulled, stepped
locally and written to Redis at most every ``store.write_back_s`` seconds (a **flush**).

Each parameter keeps its cached rows in a ``Cached`` (redis_cached): weights and optimizer slots
as the memory store's tables hold them (so a push steps them exactly as the memory store does),
the row's tag and its value at this trainer's last read or write of it (``base``), and two
flags: ``dirty`` (changed since the last flush) and ``stale`` (not written by this trainer in
the last flush: a later pull reads it again). A dense parameter is a table of one row.

A flush is the store's compare-and-set retry loop (redis_cas, shared with a push writing
through), expecting the tag last read or written. A row another
trainer wrote meanwhile fails the check; it is read again and written as
``current + (local - base)`` for the weights and every slot (each trainer's change of the
window is added, none is lost), and the local copy takes that merged value.

A row Redis has lost (absent when the flush reads it again: ``FLUSHALL``, a restart without
persistence) is written again from the local copy, as a new row; a cached row a pull finds lost
takes its local copy too (not in a table with a TTL, whose rows expire on purpose). A row whose
local values are not finite is never written (redis_integrity): it leaves the cache, and the
next pull reads the stored row again.

The job's periodic flushes overlap training (``begin`` / ``poll``): ``begin`` copies the dirty
rows' values, marks them clean and sends the compare-and-set from a thread; training goes on
on the local copy (a row changed meanwhile is dirty again: the next flush writes it). When the
thread has its answer, ``poll`` makes the written values the rows' base and tags; rows that
another trainer changed are dirty again and a synchronous ``flush`` merges and writes them
before ``poll`` reports the flush done, so a batch's offsets are only committed once all its rows are
in Redis. ``flush`` (checkpoints, the end, a Kafka rebalance) first waits for a flush in flight.
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

from .memory import put_rows, step_table_rows, take_rows
from . import redis_cas
from .redis_cached import Cached
from .redis_rows import Rows

log = logging.getLogger("streamtrain.store.redis")


class WriteBack:
    """The cache of one ``RedisStore`` (``store.wb``); the store calls ``pull``, ``push``, ``flush``."""

    def __init__(self, store, every_s: float, max_rows: int):
        self.store, self.every_s, self.max_rows = store, float(every_s), int(max_rows)
        self.cached: dict[str, Cached] = {}
        self.last_flush = time.monotonic()
        self.flushes = self.rows_flushed = self.conflicts = 0
        self.flush_seconds = 0.0
        self.flight: _Flight | None = None     # a flush whose compare-and-set runs on a thread

    def reset(self) -> None:
        """Forget every cached row (restore, the memory cap). Only when nothing is dirty."""
        if self.flight is not None:         # (its rows are clean: nothing waits on its answer)
            self.flight.join()
            self.flight = None
        self.cached.clear()

    def of(self, name: str) -> Cached:
        c = self.cached.get(name)
        if c is None:
            c = self.cached[name] = Cached(self.store.layouts[name])
        return c

    @property
    def unflushed(self) -> bool:
        """Changes not written to Redis yet (a flush in flight counts)."""
        return self.flight is not None or any(c.dirty[:len(c)].any() for c in self.cached.values())

    def due(self) -> bool:
        return time.monotonic() - self.last_flush >= self.every_s

    # ---- pull ------------------------------------------------------------------------------
    def pull(self, dense, tables, create: bool) -> dict:
        """Values from the cache; rows not cached (or stale) are read from Redis first (one
        MGET, rows created there as the write-through store creates them)."""
        if self.store.auto_flush and self.due():
            self.store.flush()         # also marks clean rows stale: a reader sees others' writes
        want = {n: None for n in dense}
        want.update({n: np.asarray(ids, np.uint64) for n, ids in tables.items()})
        rows, miss_dense, miss_tables = {}, [], {}
        for name, ids in want.items():
            c = self.of(name)
            r = c.lookup(ids) if ids is not None else np.array([0 if c.fresh_dense() else -1])
            rows[name] = r
            if ids is None:
                if r[0] < 0:
                    miss_dense.append(name)
            elif (r < 0).any():
                miss_tables[name] = ids[r < 0]
        if miss_dense or miss_tables:
            # rows absent from Redis are not created there now: cached dirty with tag 0, the
            # flush creates them (a row another trainer created meanwhile is merged)
            items = self.store.pull_remote(miss_dense, miss_tables, create=False)
            for it in items:
                c = self.cached[it.name]
                ids = np.zeros(1, np.uint64) if it.ids is None else it.ids
                if it.policy is None or not it.policy.ttl_s:      # (rows of a TTL expire on purpose)
                    self.store.integrity.vanished(it.name, c.recover(it, ids))
                keep = it.present if not create else np.ones(len(ids), bool)
                r = rows[it.name]
                miss = np.flatnonzero(r < 0)
                if keep.all():
                    r[miss] = got = c.take(ids, it.tags, it.w, it.state)
                    c.dirty[got[~it.present]] = True
                else:                        # create=False: absent rows are answered, not cached
                    k = np.flatnonzero(keep)
                    r[miss[k]] = c.take(ids[k], it.tags[k], it.w[k], {s: a[k] for s, a in it.state.items()})
                    absent = np.flatnonzero(~keep)
                    rows[it.name] = (r, miss[absent], it.w[absent])
        out = {}
        for name, ids in want.items():
            c, r = self.cached[name], rows[name]
            extra = None
            if isinstance(r, tuple):
                r, at, values = r
                extra = (at, values)
            w = take_rows(c.w, np.maximum(r, 0))
            if extra is not None:
                w[extra[0]] = extra[1]
            if ids is None:
                out[name] = w.reshape(c.layout.spec.shape)
            else:
                out[name] = w
                self.store.stats.rows_pulled += len(ids)
            c.last = r if extra is None else None
            c.last_ids = ids
        return out

    def pull_states(self, names) -> dict:
        out = {}
        for name in names:
            c = self.cached.get(name)
            if c is None or c.last is None:
                raise KeyError(f"parameter '{name}': no rows pulled to report the state of")
            _, state = c.values(c.last)
            if not c.table:
                slots, shape = c.layout.optimizer.slots, tuple(c.layout.spec.shape)
                state = {k: a.reshape(shape if slots[k] == "full" else (1,)) for k, a in state.items()}
            out[name] = state
        return out

    # ---- push: the memory store's arithmetic on the local copy -----------------------------
    def push(self, grads) -> None:
        stats = self.store.stats
        for name, g in grads.dense.items():
            c, _ = self._ensure(name, None)
            w, state = c.w[0:1], {k: a[0:1] for k, a in c.state.items()}      # views: stepped in place
            sq = grads.squares.get(name)
            c.layout.step(w, np.asarray(g).reshape(1, -1), state, None if sq is None else np.asarray(sq).reshape(1, -1))
            c.dirty[0] = True
        for name, (ids, g) in grads.tables.items():
            ids = np.asarray(ids, np.uint64)
            c, rows = self._ensure(name, ids)
            opt, dtype = c.layout.optimizer, c.layout.dtype
            g = np.ascontiguousarray(g, dtype)
            sq = grads.squares.get(name)
            sq = None if sq is None else sq.astype(dtype, copy=False)
            step_table_rows(opt, c.w, c.state, rows, g, sq)
            c.dirty[rows] = True
            stats.rows_pushed += len(ids)
        if grads.assigned:
            from .scatter import scatter_rows      # numba: imported by the first push, not at start-up
            for name, (ids, value, slots) in grads.assigned.items():
                if ids is None:
                    c, _ = self._ensure(name, None)
                    c.w[0] = np.asarray(value).reshape(-1)
                    for k, a in slots.items():
                        c.state[k][0] = np.asarray(a).reshape(-1)
                    c.dirty[0] = True
                    continue
                ids = np.asarray(ids, np.uint64)
                c, rows = self._ensure(name, ids)
                for dst, src in ((c.w, value), *((c.state[k], a) for k, a in slots.items())):
                    scatter_rows(dst, rows, src)
                c.dirty[rows] = True
                stats.rows_pushed += len(ids)

    def _ensure(self, name, ids) -> tuple[Cached, np.ndarray | None]:
        """The cache of ``name`` holding ``ids`` (a push without its pull reads them first), and
        their rows (None for a dense parameter: row 0). The push of the very id array the last
        pull was asked for (or an equal one) takes that pull's rows: nothing marks rows stale
        between the two."""
        c = self.of(name)
        if ids is None:
            if not c.fresh_dense():
                self.pull([name], {}, True)
                c = self.of(name)
            return c, None
        last = c.last_ids
        if c.last is not None and last is not None and (ids is last or np.array_equal(ids, last)):
            return c, c.last
        r = c.lookup(ids)
        if (r < 0).any():
            self.pull([], {name: ids}, True)
            c = self.of(name)
            r = c.index.lookup(ids)
        return c, r

    # ---- flush in the background ---------------------------------------------------------------
    def begin(self) -> bool:
        """Start a flush of the dirty rows on a thread (see the module's docstring); False if
        one is in flight already. The rows are clean from now on unless pushed again."""
        if self.flight is not None:
            return False
        t0 = time.perf_counter()
        store, parts, work = self.store, [], []
        for name, c in self.cached.items():
            rows = np.flatnonzero(c.dirty[:len(c)])
            if not len(rows):
                continue
            it = Rows(store, name, c.index.ids[rows] if c.table else None)
            w, state = c.values(rows)                    # copies: training goes on meanwhile
            tags, expected = store.new_tags(len(rows)), c.tags[rows].copy()
            parts.append((it, np.arange(len(rows)), expected, it.layout.encode(tags, w, state)))
            work.append((c, it, rows, w, state, tags, expected))
            c.dirty[rows] = False
        self.last_flush = time.monotonic()
        self.flight = _Flight(work, t0)
        if parts:
            self.flight.start(lambda: store.cas_rows(parts, "flush rows"))
        return True

    def poll(self, wait: bool = False) -> int | None:
        """Finish the flush in flight if its answer is in (or ``wait``): rows written, or None
        while it runs (or when none is in flight). A failed flush leaves its rows dirty and
        raises (a later flush writes them)."""
        flight = self.flight
        if flight is None or not (wait or flight.done()):
            return None
        self.flight = None
        try:
            failed, refused = flight.result()
        except BaseException:
            for c, _, rows, *_ in flight.work:
                c.dirty[rows] = True
            raise
        store, written, conflict, fresh = self.store, 0, False, []
        for (c, it, rows, w, state, tags, expected), bad, ref in zip(flight.work, failed, refused):
            ok = ~bad & ~ref
            done = rows[ok]
            fresh.append((c, done))
            c.drop(rows[ref])
            store._count_created(it, int((ok & (expected == 0)).sum()), 0)
            c.tags[done] = tags[ok]
            put_rows(c.base_w, done, w[ok])              # what Redis now holds (the local copy may
            for k in c.state:                            # have moved on: dirty again, written next)
                put_rows(c.base_state[k], done, state[k][ok])
            written += len(done)
            if bad.any():            # another trainer wrote them: dirty again, with their old base
                conflict = True      # and tag, so ``flush`` re-reads, merges and writes them
                c.dirty[rows[bad]] = True
        self.flushes += 1
        self.rows_flushed += written
        self.flush_seconds += time.perf_counter() - flight.t0
        if conflict or sum(len(c) for c in self.cached.values()) > self.max_rows:
            return written + self.flush()     # now, before their offsets are committed
        for c in self.cached.values():        # clean rows not written now: read again when pulled
            n = len(c)
            c.stale[:n] = ~c.dirty[:n]
        for c, done in fresh:                      # written now: fresh
            c.stale[done] = False
        store.counters.flush()
        self._stats()
        return written

    def _stats(self) -> None:
        stats = self.store.stats
        stats.flushes, stats.rows_flushed = self.flushes, self.rows_flushed
        stats.flush_conflicts, stats.flush_seconds = self.conflicts, self.flush_seconds

    # ---- flush -------------------------------------------------------------------------------
    def flush(self) -> int:
        """Write every dirty row by compare-and-set, merging rows another trainer changed;
        then mark the clean rows stale (and drop the cache beyond ``max_rows``). Rows flushed.
        On an error the dirty rows stay dirty (a later flush writes them). A flush in flight
        is finished first."""
        if self.flight is not None:
            return self.poll(wait=True) + self.flush()
        t0 = time.perf_counter()
        store, work = self.store, self._dirty()
        written, dropped = [0], []

        def values(i, sel):
            c, it, rows = work[i]
            r = rows[sel]
            w, state = c.values(r)
            tags = store.new_tags(len(sel))
            return c.tags[r], tags, it.layout.encode(tags, w, state)

        def done(i, sel, expected, tags, bad, ref):
            c, it, rows = work[i]
            r, ok = rows[sel], ~bad & ~ref
            c.drop(r[ref])
            dropped.append((c, r[ref]))
            store._count_created(it, int((ok & (expected == 0)).sum()), 0)
            r = r[ok]
            c.tags[r], c.dirty[r] = tags[ok], False
            put_rows(c.base_w, r, take_rows(c.w, r))
            for k in c.state:
                put_rows(c.base_state[k], r, take_rows(c.state[k], r))
            written[0] += len(r)

        def reread(i, sel):                 # merged with what another trainer wrote
            c, it, rows = work[i]
            self.conflicts += len(sel)
            r, here = rows[sel], it.present[sel]
            gone = r[~here]                 # lost from Redis: the local copy is written as a new row
            store.integrity.vanished(it.name, len(gone))
            c.tags[gone] = 0
            self._merge(c, r[here], it, sel[here])
            return sel
        redis_cas.write_rows(store, [it for _, it, _ in work], [np.arange(len(rows)) for _, _, rows in work],
                             values, done, reread, "flush rows", "flush")
        written = written[0]
        for c in self.cached.values():
            n = len(c)
            c.stale[:n] = True
        for c, _, rows in work:
            c.stale[rows] = False
        for c, rows in dropped:                    # not written: read again from Redis
            c.stale[rows] = True
        store.counters.flush()
        if sum(len(c) for c in self.cached.values()) > self.max_rows:
            self.reset()
        self.last_flush = time.monotonic()
        self.flushes += 1
        self.rows_flushed += written
        self.flush_seconds += time.perf_counter() - t0
        self._stats()
        return written

    def _dirty(self) -> list:
        """``(cache, Rows, dirty row numbers)`` of each parameter with dirty rows; the Rows'
        arrays are filled by the re-read of rows that conflict."""
        work = []
        for name, c in self.cached.items():
            rows = np.flatnonzero(c.dirty[:len(c)])
            if len(rows):
                it = Rows(self.store, name, c.index.ids[rows] if c.table else None)
                n = len(rows)
                it.present, it.tags = np.ones(n, bool), np.zeros(n, np.uint64)
                it.w = np.zeros((n, c.layout.dim), c.layout.dtype)
                it.state = {k: np.zeros((n, width), c.layout.dtype) for k, width in c.layout.slots}
                work.append((c, it, rows))
        return work

    @staticmethod
    def _merge(c: Cached, rows: np.ndarray, it: Rows, sel: np.ndarray) -> None:
        """Rows ``rows`` of ``c`` become ``current + (local - base)``; current is the new base.
        A slot the optimizer keeps non-negative (Adam's second moment decays in both copies: the
        sum of two decays can go below zero) is kept at ``min(current, local)`` or above."""
        keep = c.layout.optimizer.nonnegative
        for k, (local, base, cur) in (("", (c.w, c.base_w, it.w)),
                                      *((k, (c.state[k], c.base_state[k], it.state[k])) for k in c.state)):
            now, mine = cur[sel], take_rows(local, rows)
            merged = now + (mine - take_rows(base, rows))
            if k in keep and (low := merged < 0).any():
                merged[low] = np.minimum(now, mine)[low].clip(0)
            put_rows(local, rows, merged)
            put_rows(base, rows, now)
        c.tags[rows] = it.tags[sel]


class _Flight:
    """One background flush: what it sends (``work``) and its thread's answer."""

    def __init__(self, work: list, t0: float):
        self.work, self.t0 = work, t0
        self._answer: tuple = ([], [])     # (failed, refused) per part: ``cas_rows``' answer
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self, cas) -> None:
        def run():
            try:
                self._answer = cas()
            except BaseException as err:  # noqa: BLE001 - raised again by ``poll``
                self._error = err
        self._thread = threading.Thread(target=run, name="streamtrain-redis-flush", daemon=True)
        self._thread.start()

    def done(self) -> bool:
        return self._thread is None or not self._thread.is_alive()

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def result(self) -> tuple:
        self.join()
        if self._error is not None:
            raise self._error
        return self._answer
