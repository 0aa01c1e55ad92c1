"""The ``redis`` parameter store: parameters sharded over Redis servers or a Redis Cluster.

* **Keys** (redis_keys): a row is ``st:{<ns>/<bucket>}:<table>:r:<id hex>``, a dense parameter
  ``st:{<ns>/dense}:<name>``; one value holds weights and optimizer state (redis_rows).
* **Pull**: one MGET per server (per slot group in a Cluster), all sent before any answer is
  read; missing rows are created with the deterministic initializer by a create-if-absent
  compare-and-set, so concurrent trainers create each row once.
* **Push**: the update rule is the memory store's numpy rule, run on the value just read, and
  written back by a per-row compare-and-set script (redis_scripts): atomic per row, no lost
  update, retried on conflicts; the values read by the pull are reused when nobody wrote since.
* **Overlap** (redis_prefetch): the next batch's rows are read on a thread while this batch
  computes; this store's own writes are patched in, the compare-and-set catches the others'.
* **Write-back** (redis_writeback, ``write_back_s`` > 0, the default): pulled rows are kept
  and stepped locally; dirty rows are written by the compare-and-set at most every
  ``write_back_s`` (a flush), rows another trainer wrote meanwhile merged additively.
* **Sync mode** (redis_sync): pushes are staged; ``store.barrier`` is the trainer's barrier.
* **Checkpoints** (redis_snapshot): every row of a table by SCAN, restored by compare-and-set.
* **Change feed** (``feed_s``): the compare-and-set script also appends the rows it wrote
  to a capped stream per shard (per slot group in a Cluster), from which prediction servers
  keep a complete replica of the tables (serve/replica.py).
* **Lifecycle** (redis_lifecycle): TTL, admission, cap, counters. **Failures** (redis_shards):
  retries with backoff, then ``StoreError`` — a push either lands or raises.
"""
from __future__ import annotations

import logging
import os

import numpy as np

from streamtrain.context import Gradients
from streamtrain.errors import StoreError

from . import redis_cas, redis_keys, redis_lifecycle, redis_snapshot
from .base import ParamStore, Snapshot, initial_rows, register
from .redis_config import OPTIONS, RedisConfig, redact, validate
from .redis_integrity import Integrity
from .redis_io import RowIO
from .redis_prefetch import Prefetch
from .redis_rows import RowLayout, Rows
from .redis_server import RedisServer
from .redis_shards import Retry, Shards
from .redis_sync import SyncBarrier
from .redis_writeback import WriteBack

log = logging.getLogger("streamtrain.store.redis")


@register
class RedisStore(ParamStore):
    kind, options, server = "redis", OPTIONS, "redis"   # redis_config: options, and checks across keys
    check_config = classmethod(lambda cls, cfg: validate(cfg))
    from_config = classmethod(lambda cls, cfg: cls(cfg))
    test_params = classmethod(lambda cls: {"buckets": 4})

    def __init__(self, cfg: dict | RedisConfig | None = None):
        super().__init__()
        self.cfg = cfg if isinstance(cfg, RedisConfig) else RedisConfig.from_dict(cfg or {})
        self.ns = self.cfg.namespace
        self.server = None
        self.embedded = False
        urls, cluster = self.cfg.urls, self.cfg.cluster
        if not urls and not cluster:
            self.server = RedisServer().start()
            self.embedded = True
            urls = [self.server.url]
        try:
            self.shards = Shards(urls=urls, cluster=cluster, timeout_s=self.cfg.timeout_s, stats=self.stats,
                                 retry=Retry(**self.cfg.retry), placement=self.cfg.placement,
                                 connect=self.cfg.connection)
        except BaseException:
            if self.server:
                self.server.stop()
            raise
        self.io = RowIO(self.shards, self.ns, self.cfg.buckets)
        retry = self.shards.retry           # receipts must outlive every retry of their push
        self.io.receipt_ms = int((retry.give_up_s + retry.max_s + 2 * self.cfg.timeout_s) * 1000) + 1000
        self.io.feed_ms = int(round(self.cfg.feed_s * 1000))
        self.counters = redis_lifecycle.Counters(self.io)
        self.integrity = Integrity(self.stats)      # no NaN/inf is written; vanished rows are counted
        self.layouts: dict[str, RowLayout] = {}
        self._cache: dict[str, Rows] = {}
        self._rng = np.random.default_rng(int.from_bytes(os.urandom(8), "little"))
        self.ahead = Prefetch(self)
        self.wb = None          # the write-back cache (redis_writeback), unless writing through
        if self.cfg.write_back_s > 0 and self.cfg.mode != "sync" and not self.gated_tables():
            self.wb = WriteBack(self, self.cfg.write_back_s, self.cfg.write_back_rows)
        self.assigns = self.wb is not None     # one writer of the local copy: final rows are written
        self.writes_back = self.flushes_in_background = self.wb is not None
        # sync mode stages pushes, the cache serves reads: no read ahead
        self.prefetches = self.cfg.mode != "sync" and self.wb is None
        self.barrier = None
        if self.cfg.mode == "sync":
            self.barrier = SyncBarrier(self, self.cfg.trainers, self.cfg.worker,
                                       self.cfg.barrier_timeout_s, self.cfg.sync_combine)

    # ---- declare ---------------------------------------------------------------------------
    def _declare(self) -> None:
        problems = [m for n in self.specs if (m := redis_keys.check_name(n, "parameter name"))]
        if problems:
            raise StoreError("redis store: " + "; ".join(problems))
        self.layouts = {n: RowLayout(s, self.optimizers[n]) for n, s in self.specs.items()}
        dense = [n for n, s in self.specs.items() if not s.table]
        if dense:
            self.pull(dense, {})
            self._cache.clear()

    # ---- pull ------------------------------------------------------------------------------
    def prefetch(self, dense, tables) -> None:
        """Start reading the next batch's rows now (redis_prefetch); its ``pull`` takes them."""
        if self.prefetches:
            self.ahead.start(dense, tables)

    def pull(self, dense, tables, *, create=True):
        if self.wb is not None:
            return self.wb.pull(dense, tables, create)
        items = self.pull_remote(dense, tables, create, self.ahead.take(dense, tables))
        out = {}
        for it in items:
            w = it.out()
            if it.ids is not None:
                w[it.blocked] = 0.0
            out[it.name] = w
            if it.ids is not None:
                self.stats.rows_pulled += len(it.ids)
            self._cache[it.name] = it
        return out

    def pull_remote(self, dense, tables, create=True, items=None) -> list[Rows]:
        """Read (and with ``create``, create) the rows from Redis: a ``Rows`` per parameter,
        ``blocked`` marking rows a gated table does not hold (read as zeros)."""
        if items is None:
            items = [Rows(self, n, None) for n in dense]
            items += [Rows(self, n, np.asarray(ids, np.uint64)) for n, ids in tables.items()]
            self.read_rows(items, "pull")
        creating = []
        for it in items:
            missing = np.flatnonzero(~it.present)
            it.blocked = np.zeros(len(it.present), bool)
            if not len(missing):
                continue
            gated = it.policy is not None and it.policy.gated
            if create and gated:
                ok = redis_lifecycle.gate(self.io, self.counters, it.name, it.ids[missing], it.policy)
                it.blocked[missing[~ok]] = True
                missing = missing[ok]
            elif not create and gated:
                it.blocked[missing] = True
                continue
            it.fill_initial(missing)
            if create:
                creating.append((it, missing))
        if creating:
            self._create(creating)
        self.counters.flush()
        self.stats.table_rows = self.counters.live()
        return items

    def absent_rows(self, name: str, ids: np.ndarray) -> np.ndarray:
        """What ``pull(create=False)`` answers for rows of ``name`` that do not exist: their
        initial weights, zeros in a gated table (admission or a cap)."""
        layout = self.layouts[name]
        if self.cfg.policy(name).gated:
            return np.zeros((len(ids), layout.dim), layout.dtype)
        return initial_rows(layout.spec, layout.optimizer, np.asarray(ids, np.uint64), layout.dtype)

    def pull_states(self, names):
        if self.wb is not None:
            return self.wb.pull_states(names)
        out = {}
        for name in names:
            it = self._cache.get(name)
            if it is None:
                raise KeyError(f"parameter '{name}': no rows pulled to report the state of")
            slots = it.layout.optimizer.slots
            if it.ids is None:
                shape = tuple(it.layout.spec.shape)
                out[name] = {k: a.reshape(shape if slots[k] == "full" else (1,)).copy()
                             for k, a in it.state.items()}
            else:
                out[name] = {k: a.copy() for k, a in it.state.items()}
        return out

    def read_rows(self, items: list[Rows], what: str, rows: list | None = None) -> None:
        """Read the current values of ``items`` (or of ``rows[i]`` of each) in one round trip."""
        sel = rows or [slice(None)] * len(items)
        keys = [it.keys[s] for it, s in zip(items, sel)]
        if not sum(len(k) for k in keys):
            return
        values = self.io.mget(np.concatenate(keys), np.concatenate([it.groups[s] for it, s in zip(items, sel)]),
                              what=what)
        start = 0
        for it, s, k in zip(items, sel, keys):
            it.set_values(values[start:start + len(k)], f"{what} '{it.name}'", None if rows is None else s)
            start += len(k)

    def _create(self, creating: list) -> None:
        """Create-if-absent; rows someone else created first are re-read."""
        tags = [self.new_tags(len(rows)) for _, rows in creating]
        parts = [(it, rows, np.zeros(len(rows), np.uint64),
                  it.layout.encode(t, it.w[rows], {k: a[rows] for k, a in it.state.items()}))
                 for (it, rows), t in zip(creating, tags)]
        failed, refused = self.cas_rows(parts, "create rows")
        lost = []
        for (it, rows, _, _), t, bad, ref in zip(parts, tags, failed, refused):
            won = rows[~bad & ~ref]             # (a refused row reads as its value, not stored)
            it.present[won] = True
            it.tags[won] = t[~bad]             # the version written: a push expects it
            self._count_created(it, len(won), int(bad.sum()))
            if bad.any():
                lost.append((it, rows[bad]))
        if lost:
            self.read_rows([it for it, _ in lost], "re-read rows created concurrently", [r for _, r in lost])

    def _count_created(self, it: Rows, won: int, lost: int) -> None:
        if it.ids is None:
            return
        self.stats.rows_created += won
        self.counters.add(it.name, "created", won)
        if it.policy.max_rows > 0:
            if lost:
                self.counters.incr_now(it.name, "live", -lost)
        else:
            self.counters.add(it.name, "live", won)
        if it.policy.admit_after > 1:
            self.counters.add(it.name, "admitted", won)

    # ---- push ------------------------------------------------------------------------------
    def push(self, grads: Gradients) -> None:
        if self.barrier is not None:
            self.barrier.stage(grads)
        elif self.wb is not None:
            self.wb.push(grads)
            if self.auto_flush and self.wb.due():
                self.flush()
        else:
            self.apply_now(grads)

    # ---- write-back (redis_writeback) ------------------------------------------------------------
    def gated_tables(self) -> bool:
        """A table with admission or a cap: rows are gated on creation, the store writes through."""
        return any(self.cfg.policy(key).gated for key in self.cfg.tables)     # a key is its own best match

    @property
    def unflushed(self) -> bool:
        """Changes pushed but not written to Redis yet (write-back)."""
        return self.wb is not None and self.wb.unflushed

    def flush_due(self) -> bool:
        return self.wb is not None and self.wb.due()

    def flush(self) -> int:
        """Write the write-back cache's dirty rows to Redis now (rows written; 0 writing through):
        every batch applied so far is durable."""
        written = self.wb.flush() if self.wb is not None else 0
        self.durability.flushed()
        return written

    def flush_begin(self) -> bool:
        return self.wb.begin() if self.wb is not None else False

    def flush_poll(self, wait: bool = False) -> int | None:
        return self.wb.poll(wait) if self.wb is not None else None

    def apply_now(self, grads: Gradients) -> None:
        """Apply the rules to ``grads`` now: read (or reuse the pull's values), compute with
        numpy, compare-and-set; rows that changed meanwhile are re-read and recomputed."""
        work, squares = [], []
        for name, g in grads.dense.items():
            work.append((self._reuse(name, None) or Rows(self, name, None), np.asarray(g).reshape(1, -1)))
            sq = grads.squares.get(name)
            squares.append(None if sq is None else np.asarray(sq).reshape(1, -1))
        for name, (ids, g) in grads.tables.items():
            ids = np.asarray(ids, np.uint64)
            work.append((self._reuse(name, ids) or Rows(self, name, ids), np.asarray(g)))
            sq = grads.squares.get(name)
            squares.append(None if sq is None else np.asarray(sq))
        stale = [it for it, _ in work if it.present is None]
        self.read_rows(stale, "read rows to update")
        pending = []
        for it, _ in work:
            absent = np.flatnonzero(~it.present)
            drop = np.zeros(len(it.present), bool)
            if it.policy is not None and it.policy.gated:
                drop[absent] = True
                self.counters.add(it.name, "dropped", len(absent))
            it.fill_initial(absent[~drop[absent]])
            pending.append(np.flatnonzero(~drop))
            if it.ids is not None:
                self.stats.rows_pushed += len(it.ids)
        items = [it for it, _ in work]

        def values(i, rows):                # the rule, on the rows' current values
            (it, g), sq = work[i], squares[i]
            w, state = it.w[rows].copy(), {k: a[rows].copy() for k, a in it.state.items()}
            it.layout.step(w, g[rows], state, None if sq is None else sq[rows])
            expected = np.where(it.present[rows], it.tags[rows], np.uint64(0))
            tags = self.new_tags(len(rows))
            return expected, tags, it.layout.encode(tags, w, state)

        def done(i, rows, expected, tags, bad, ref):
            self._count_created(items[i], int(((expected == 0) & ~bad & ~ref).sum()), 0)

        def reread(i, rows):                # rows expired (or lost) meanwhile start again
            it = items[i]
            gone = rows[~it.present[rows]]
            if it.policy is None or not it.policy.ttl_s:
                self.integrity.vanished(it.name, len(gone))
            if it.policy is not None and it.policy.gated:
                self.counters.add(it.name, "dropped", len(gone))
                return rows[it.present[rows]]
            it.fill_initial(gone)
            return rows
        redis_cas.write_rows(self, items, pending, values, done, reread, "update rows", "push")
        for it, _ in work:
            self._cache.pop(it.name, None)
        self.counters.flush()
        self.stats.table_rows = self.counters.live()

    def _reuse(self, name, ids):
        """The rows the last pull read, when the push is for exactly those ids."""
        it = self._cache.pop(name, None)
        if it is None or (ids is None) != (it.ids is None):
            return None
        if ids is not None and not np.array_equal(ids, it.ids):
            return None
        return it

    def new_tags(self, n: int) -> np.ndarray:
        """Fresh row versions: random, never 0 (0 means "absent" to the CAS script)."""
        return self._rng.integers(1, np.iinfo(np.uint64).max, n, dtype=np.uint64, endpoint=True)

    def cas_rows(self, parts: list, what: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """One chunked compare-and-set over ``(rows item, row numbers, expected tags, values)``
        (redis_cas.cas_rows): per part, the rows another writer changed and those refused."""
        return redis_cas.cas_rows(self, parts, what)

    # ---- lifecycle and stats ----------------------------------------------------------------
    def lifecycle(self) -> dict:
        """Per table: live, created, admitted, rejected, dropped, expired (counted now)."""
        return redis_lifecycle.count(self)

    # ---- checkpoints (redis_snapshot) ---------------------------------------------------------
    def snapshot(self) -> Snapshot:
        self.flush()                     # the snapshot sees every update
        return redis_snapshot.snapshot(self)

    def restore(self, snapshot: Snapshot) -> None:
        """Replace this namespace's parameters by the snapshot's (declared parameters only)."""
        self._cache.clear()
        self.ahead.cancel()
        if self.wb is not None:
            self.wb.reset()
        redis_snapshot.restore(self, snapshot)

    def snapshot_of(self, names) -> Snapshot:
        self.flush()
        return redis_snapshot.snapshot(self, names)

    def _put(self, snapshot: Snapshot) -> None:
        redis_snapshot.put(self, snapshot)

    def _drop(self, names) -> None:
        redis_snapshot.drop(self, names)

    # ---- the rest ------------------------------------------------------------------------------
    def watch(self, stopped, waiting) -> None:
        self.shards.stopped, self.shards.on_wait = stopped, waiting

    def ready(self) -> bool:
        return self.shards.ready()

    def close(self) -> None:
        try:
            self.ahead.cancel()
            if self.auto_flush and self.unflushed:     # drain (a job drains itself, or knows it could not)
                self.flush()
            self.counters.flush(force=True)
        except StoreError as err:
            if self.unflushed:
                log.error("redis store: closing with unflushed changes, lost (their offsets were "
                          "not committed: they are trained again): %s", err)
        finally:
            self.shards.close()
            if self.server is not None:
                self.server.stop()
                self.server = None

    def describe(self) -> str:
        where = (f"cluster {redact(self.cfg.cluster)}" if self.cfg.cluster else
                 f"embedded {self.shards.names[0]}" if self.embedded else
                 f"{len(self.shards.names)} shard(s) {','.join(self.shards.names)}")
        wb = f"; write-back {self.cfg.write_back_s:g} s" if self.wb is not None else ""
        return f"redis ({where}; namespace {self.ns}; {self.cfg.mode}{wb})"

