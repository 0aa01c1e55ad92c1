"""A complete local copy of the served tables, kept current from the trainers' change feed.

A request whose ids the row cache (cache.py) has not seen must otherwise read them from a
redis-server that the trainers keep busy with their compare-and-set scripts: on a loaded
machine that wait was the whole tail of the latency (BENCHMARKS.md, Serving). With the store's
change feed on (``store.feed_s``, every trainer), the script that writes rows also appends them
to a capped stream, per shard (per slot group in a Cluster) and in the order of the writes, so
a server can hold every row:

* **bootstrap**: note every feed stream's last entry, read every row of the tables (SCAN and
  MGET), then replay the feed from the noted entries (rows written meanwhile end at their
  latest value: within a stream, entries are in write order);
* **poll**, every ``interval_s``: read the new entries of every stream (one XREAD per shard)
  and apply them. A poll that starts at ``t`` and succeeds makes the copy hold every write
  committed before ``t``: its age is ``now - t``, for every row, the rows nobody wrote too.
  An id the copy lacks was never written, and reads as its initial row (zeros in a gated
  table), as the store itself answers for an absent row, with no round trip;
* **start again** (a new bootstrap) when the copy could have missed entries: no poll succeeded
  for half the feed's retention (its entries may be trimmed), a redis-server restarted (its
  ``run_id`` changed), or a trainer restored a checkpoint (a ``reset`` entry).

Requests use the copy only while it is fresh (age within ``max_staleness_s``) and complete:
not for a table with a TTL (rows expire without a feed entry), one larger than ``max_rows``,
while bootstrapping, or when a live trainer publishes no feed; then the row cache answers.
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

from streamtrain.errors import StoreError
from streamtrain.growth import capacity_for, grow_rows
from streamtrain.store import redis_keys, redis_rows, redis_scripts
from streamtrain.store.idindex import IdIndex
from streamtrain.store.memory import put_rows, take_rows

log = logging.getLogger("streamtrain.serve")
READ_COUNT = 1000           # feed entries per stream per XREAD
SCAN_CHUNK = 10_000         # rows per MGET while bootstrapping
INITIAL_ROWS = 100_000      # absent ids' initial rows kept per table (then started again)


class _Table:
    """Weights of every row of one table."""

    def __init__(self, dim: int):
        self.dim = dim
        self.index = IdIndex()
        self.values = np.zeros((1024, dim), np.float32)

    def put(self, ids: np.ndarray, w: np.ndarray) -> None:
        rows = self.index.find_or_add(ids)
        if len(self.index) > len(self.values):
            self.values = grow_rows(self.values, capacity_for(len(self.values), len(self.index)))
        put_rows(self.values, rows, w)

    def __len__(self) -> int:
        return len(self.index)


class _Dense:
    """A dense parameter: replaced whole by each write (a request keeps the array it took)."""

    def __init__(self, shape):
        self.shape, self.value = tuple(shape), None

    def put(self, ids: np.ndarray, w: np.ndarray) -> None:
        self.value = w[-1].reshape(self.shape).copy()


class Replica:
    """``sync()`` (a ``Refresher``'s work) keeps it current; ``rows(...)`` answers requests.

    ``store`` is a RedisStore client of its own (the poll never queues behind a request's
    read), its parameters declared."""

    def __init__(self, store, max_rows: int = 4_000_000):
        self.store, self.io, self.max_rows = store, store.io, int(max_rows)
        self.names = [n for n, spec in store.specs.items()
                      if spec.table and store.cfg.policy(n).ttl_s <= 0]        # TTL: expiries are not in the feed
        self.dense_names = [n for n, spec in store.specs.items() if not spec.table]   # one row each, id 0
        self.lock = threading.Lock()
        self.tables: dict[str, _Table] | None = None      # None: no complete copy
        self.synced_at = -np.inf                           # every write before this is in the copy
        self.feed_s = 0.0                                  # the trainers' feed retention (0: no feed)
        self._positions: dict[bytes, bytes] = {}
        self._run_ids: list | None = None
        self._last_ok = -np.inf
        self.polls = self.entries = self.bootstraps = 0
        self.copied: list = []                              # called after each complete copy (run.py: gc.freeze)
        self._initial: dict[str, _Table] = {}              # absent rows' values, by table
        self._initial_lock = threading.Lock()

    # ---- requests ---------------------------------------------------------------------------
    def rows(self, name: str, ids: np.ndarray, now: float, max_age: float):
        """(weights of ``ids``, the time they are current as of), or None when the copy cannot
        answer (not complete, not fresh, or not kept for this table)."""
        with self.lock:
            tables = self.tables
            if tables is None or now - self.synced_at > max_age:
                return None
            table = tables.get(name)
            if table is None:
                return None
            rows = table.index.lookup(ids)
            if (rows >= 0).all():
                return take_rows(table.values, rows), self.synced_at
            out = take_rows(table.values, np.maximum(rows, 0))
            at = self.synced_at
        absent = rows < 0
        out[absent] = self._absent(name, ids[absent])
        return out, at

    def fresh(self, now: float, max_age: float) -> bool:
        """The copy is complete and holds every write older than ``max_age``."""
        return self.tables is not None and now - self.synced_at <= max_age

    def age(self) -> float:
        """Seconds since the copy was current (NaN: no complete copy)."""
        return time.monotonic() - self.synced_at if self.tables is not None else float("nan")

    def held(self) -> set:
        """Names of the parameters the copy answers for."""
        tables = self.tables
        return {n for n, t in (tables or {}).items() if not isinstance(t, _Dense) or t.value is not None}

    def dense(self, name: str, now: float, max_age: float):
        """(a dense parameter's value, the time it is current as of), or None (as ``rows``)."""
        tables, at = self.tables, self.synced_at
        if tables is None or now - at > max_age or (d := tables.get(name)) is None or d.value is None:
            return None
        return d.value, at

    def _absent(self, name: str, ids: np.ndarray) -> np.ndarray:
        """Rows nobody wrote: the store's answer for them (a pure function of the id), kept."""
        with self._initial_lock:
            known = self._initial.get(name)
            if known is None or len(known) > INITIAL_ROWS:
                known = self._initial[name] = _Table(self.store.layouts[name].dim)
            rows = known.index.lookup(ids)
            new = rows < 0
            if new.any():
                known.put(ids[new], self.store.absent_rows(name, ids[new]))
                rows = known.index.lookup(ids)
            return take_rows(known.values, rows)

    # ---- the background work -------------------------------------------------------------------
    def set_feed(self, feed_s: float) -> None:
        """The shortest feed retention of the live trainers (0: one keeps none: no copy)."""
        if feed_s <= 0 and self.tables is not None:
            log.warning("a trainer writes no change feed (store.feed_s = 0): the served rows are read on demand")
            with self.lock:
                self.tables = None
        self.feed_s = float(feed_s)

    def sync(self) -> None:
        if self.feed_s <= 0:
            return
        try:
            if self.tables is None:
                self._bootstrap()
            else:
                self._poll(self.tables)
        except _Restart as why:
            log.warning("%s: copying the served tables again", why)
            with self.lock:
                self.tables = None
            self._bootstrap()

    def _bootstrap(self) -> None:
        """Note the feed's positions, copy every row, replay the feed from the positions. The
        copy polls the feed as it goes (every quarter of its retention), so a long copy never
        outlives the entries it must replay."""
        t0 = time.monotonic()
        by_shard = self._feed_keys()
        plan = {s: [("INFO", "server")] + [("XREVRANGE", k, "+", "-", "COUNT", 1) for k in ks]
                for s, ks in by_shard.items()}
        answers = self.io.shards.retrying("read the change feed's positions", lambda: self.io.shards.run(plan))
        self._positions, self._run_ids, self._last_ok = {}, [], t0
        for s, ks in by_shard.items():
            info, *last = answers[s]
            self._run_ids.append(_run_id(info))
            for k, entries in zip(ks, last):
                self._positions[k] = entries[0][0] if entries else b"0-0"
        tables = {}
        for name in self.dense_names:
            rows = redis_rows.Rows(self.store, name, None)
            value = self.io.mget(rows.keys, rows.groups, what=f"copy the dense parameter '{name}'")[0]
            table = tables[name] = _Dense(self.store.specs[name].shape)
            if value is not None:
                table.put(_ZERO, self._weights(name, [value]))
        for name in self.names:
            table = tables[name] = _Table(self.store.layouts[name].dim)
            for ids in self._scan(name):
                rows = redis_rows.Rows(self.store, name, ids)
                values = self.io.mget(rows.keys, rows.groups, what=f"copy the rows of '{name}'")
                present = np.fromiter((v is not None for v in values), bool, len(values))
                if present.any():
                    table.put(ids[present], self._weights(name, [v for v in values if v is not None]))
                if len(table) > self.max_rows:
                    log.warning("table '%s' has over %d rows (serve.replica_max_rows): its rows are read on demand",
                                name, self.max_rows)
                    del tables[name]
                    break
                if time.monotonic() - self._last_ok > self.feed_s / 4:
                    self._poll(tables)
        self.bootstraps += 1
        self._poll(tables)
        with self.lock:
            self.tables = tables
        for hook in self.copied:
            hook()
        log.info("replica of %s: %s rows copied in %.2f s, then kept from the change feed",
                 ", ".join(self.names) or "no table", "+".join(str(len(tables[n])) for n in self.names if n in tables) or "0",
                 time.monotonic() - t0)

    def _scan(self, name: str):
        """The ids of a table's rows, ``SCAN_CHUNK`` at a time (every shard, SCAN cursors)."""
        pattern = redis_keys.table_pattern(self.store.ns, name)
        found = []
        for client in self.io.shards.clients:
            cursor = 0
            while True:
                cursor, keys = self.io.shards.retrying(
                    f"list the rows of '{name}'", lambda client=client, cursor=cursor: client.scan(cursor, match=pattern, count=2000))
                found += keys
                if len(found) >= SCAN_CHUNK or (cursor == 0 and found):
                    yield np.array([redis_keys.key_id(k) for k in found], np.uint64)
                    found = []
                if cursor == 0:
                    break

    def _poll(self, tables: dict) -> None:
        """Apply every feed entry written so far; the copy is then current as of the start.
        An entry is trimmed ``feed_s`` after it was written at the earliest: a poll that starts
        more than half that after the last one (an outage, a stall) may have lost some."""
        t0 = time.monotonic()
        if t0 - self._last_ok > self.feed_s / 2:
            raise _Restart(f"the change feed was not read for {t0 - self._last_ok:.1f} s (its entries may be trimmed)")
        by_shard = self._feed_keys()
        first = True
        while True:
            plan = {}
            for s, ks in by_shard.items():
                cmds = [("INFO", "server")] if first else []
                # a Cluster's multi-key commands stay in one slot: one XREAD per stream there
                for part in ([[k] for k in ks] if self.io.shards.cluster else [ks]):
                    cmds.append(("XREAD", "COUNT", READ_COUNT, "STREAMS", *part,
                                 *(self._positions.get(k, b"0-0") for k in part)))
                plan[s] = cmds
            answers = self.io.shards.retrying("read the change feed", lambda plan=plan: self.io.shards.run(plan))
            more = False
            if first:
                run_ids = [_run_id(answers[s][0]) for s in by_shard]
                if self._run_ids is not None and run_ids != self._run_ids:
                    raise _Restart("a redis-server restarted")
            for s in by_shard:
                for got in answers[s][1 if first else 0:]:
                    got = got or []
                    for key, entries in got.items() if isinstance(got, dict) else got:      # RESP3: a map
                        for entry_id, fields in entries:
                            self._apply(tables, fields)
                            self._positions[key] = entry_id
                            self.entries += 1
                        more |= len(entries) >= READ_COUNT
            first = False
            if not more:
                break
        self.polls += 1
        self._last_ok = t0
        with self.lock:
            self.synced_at = t0

    def _apply(self, tables: dict, fields: list) -> None:
        if fields[0] == b"reset":
            raise _Restart("a checkpoint was restored")
        failed = redis_scripts.parse_answer(fields[1])
        start = 0
        for k in range(2, len(fields), 6):
            name, ids, blob = fields[k + 1].decode(), fields[k + 3], fields[k + 5]
            n = len(ids) // 8
            table = tables.get(name)
            if table is not None and n:
                ids = np.frombuffer(ids, "<u8").astype(np.uint64)      # a dense parameter's: one 0
                values = np.frombuffer(blob, np.uint8).reshape(n, -1)
                bad = [i - start for i in failed if start <= i < start + n]
                if bad:
                    keep = np.ones(n, bool)
                    keep[bad] = False
                    ids, values = ids[keep], values[keep]
                if len(ids):        # every row of the segment failed (another trainer wrote it): nothing
                    w = self._weights(name, values)
                    with self.lock:
                        table.put(ids, w)
            start += n

    def _weights(self, name: str, values) -> np.ndarray:
        """The weights in stored values (a list of bytes, or uint8[n, nbytes])."""
        dim = self.store.layouts[name].dim
        mat = values if isinstance(values, np.ndarray) else np.frombuffer(b"".join(values), np.uint8).reshape(len(values), -1)
        return np.ascontiguousarray(mat[:, redis_rows.TAG:redis_rows.TAG + 4 * dim]).view("<f4")

    def _feed_keys(self) -> dict[int, list[bytes]]:
        """Every feed stream, by shard."""
        where = self.io.group_shard()
        by_shard: dict[int, list[bytes]] = {}
        for group in sorted(set(self.io.feed_groups().values())):
            by_shard.setdefault(int(where[group]), []).append(self.io.feed_key(group))
        return by_shard

    def stats(self) -> dict:
        tables = self.tables
        return {"rows": {n: len(t) for n, t in (tables or {}).items() if n in self.names}, "polls": self.polls,
                "entries": self.entries, "bootstraps": self.bootstraps,
                "age_s": time.monotonic() - self.synced_at}


_ZERO = np.zeros(1, np.uint64)


class _Restart(StoreError):
    """The copy may have missed writes: copy the tables again."""


def _run_id(info) -> bytes:
    text = info if isinstance(info, (bytes, str)) else b""
    text = text.encode() if isinstance(text, str) else text
    for line in text.splitlines():
        if line.startswith(b"run_id:"):
            return line[7:].strip()
    return b""
