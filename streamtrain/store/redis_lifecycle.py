"""Embedding lifecycle in Redis: admission after k sightings, a cap on rows, TTL expiry, counters.

* ``admit_after: k`` — each pull that meets a missing id increments its sighting counter
  (``st:{<ns>/<b>}:<table>:s:<id>``, expiring with the table's ``ttl_s`` or after 7 days); the
  row is created (with the deterministic initializer) at the k-th sighting. Until then it reads
  as zeros and its gradients are dropped (counted as ``dropped``).
* ``max_rows: N`` — creating a row first reserves it on the ``<table>:live`` counter; rows
  over the cap are not created (read as zeros, counted ``rejected``).
* ``ttl_s: T`` — every write of a row sets a Redis TTL of T, so a row not updated for T
  expires. ``live`` of such a table is counted by a SCAN when ``lifecycle()`` is asked, and
  ``expired = created - live`` (rows leave a table only by expiry).

Counters live in one hash per namespace, ``st:{<ns>/meta}:counters``, fields ``<table>:<name>``.
"""
from __future__ import annotations

import time
from collections import Counter

import numpy as np

from . import redis_keys

WEEK_MS = 7 * 24 * 3600 * 1000
NAMES = ("created", "admitted", "rejected", "dropped", "expired", "live")


class Counters:
    """Counter deltas batched locally and flushed at most once a second (or when asked)."""

    def __init__(self, io, every_s: float = 1.0):
        self.io, self.every_s = io, every_s
        self.key = redis_keys.meta_key(io.ns, "counters")
        self.pending: Counter = Counter()
        self.totals: dict = {}          # field -> value at the last flush or read
        self.last = time.monotonic()

    def add(self, table: str, name: str, n: int) -> None:
        if n:
            self.pending[f"{table}:{name}"] += int(n)

    def flush(self, force: bool = False) -> None:
        if not self.pending or (not force and time.monotonic() - self.last < self.every_s):
            return
        items, self.pending = list(self.pending.items()), Counter()
        answers = self.io.meta_many([("HINCRBY", self.key, field, n) for field, n in items],
                                    what="update counters")
        self.totals.update((field, int(v)) for (field, _), v in zip(items, answers))
        self.last = time.monotonic()

    def live(self) -> dict:
        """Live rows per table as last seen, plus what is not flushed yet."""
        out = {}
        for field in {*self.totals, *self.pending}:
            table, name = field.rsplit(":", 1)
            if name == "live":
                out[table] = self.totals.get(field, 0) + self.pending.get(field, 0)
        return out

    def incr_now(self, table: str, name: str, n: int) -> int:
        return int(self.io.meta("HINCRBY", self.key, f"{table}:{name}", int(n), what="reserve rows"))

    def set(self, table: str, **values) -> None:
        mapping = [x for k, v in values.items() for x in (f"{table}:{k}", int(v))]
        self.io.meta("HSET", self.key, *mapping, what="set counters")

    def read(self) -> dict:
        self.flush(force=True)
        raw = self.io.meta_hash(self.key, what="read counters")
        out: dict = {}
        for field, value in raw.items():
            self.totals[field.decode()] = int(value)
            table, name = field.decode().rsplit(":", 1)
            out.setdefault(table, {})[name] = int(value)
        return out


def sightings(io, table: str, ids: np.ndarray, policy) -> np.ndarray:
    """Count one more sighting of each id; return the counts after it."""
    keys = redis_keys.row_keys(io.ns, table, ids, io.buckets, kind="s")
    groups = redis_keys.bucket_of(table, ids, io.buckets)
    window = policy.ttl_ms or WEEK_MS
    answers = io.per_key(keys, groups, lambda k: [("INCR", k), ("PEXPIRE", k, window)],
                         what=f"count sightings of '{table}'")
    return np.array([a[0] for a in answers], np.int64)


def gate(io, counters: Counters, table: str, ids: np.ndarray, policy) -> np.ndarray:
    """Which of these missing ids may be created now (admission, then the cap)."""
    ok = np.ones(len(ids), bool)
    if policy.admit_after > 1 and len(ids):
        ok &= sightings(io, table, ids, policy) >= policy.admit_after
    if policy.max_rows > 0 and ok.any():
        want = int(ok.sum())
        total = counters.incr_now(table, "live", want)
        counters.totals[f"{table}:live"] = total
        over = min(want, max(0, total - policy.max_rows))
        if over:
            counters.incr_now(table, "live", -over)
            counters.add(table, "rejected", over)
            keep = np.flatnonzero(ok)[:want - over]
            ok[:] = False
            ok[keep] = True
    return ok


def count(store) -> dict:
    """Per table of the store: live, created, admitted, rejected, dropped, expired (counted now:
    a table with a TTL has its live rows counted by SCAN); kept in ``store.stats`` too."""
    counts = store.counters.read()
    for name, spec in store.specs.items():
        if not spec.table:
            continue
        c = counts.setdefault(name, {})
        if store.cfg.policy(name).ttl_s > 0:
            live = len(store.io.scan(redis_keys.table_pattern(store.ns, name), what="count live rows"))
            c["expired"] = max(0, c.get("created", 0) - live)
            c["live"] = live
            store.counters.set(name, live=live, expired=c["expired"])
        for k in NAMES:
            c.setdefault(k, 0)
    store.stats.table_rows = {n: c["live"] for n, c in counts.items() if n in store.specs}
    store.stats.lifecycle = {n: c for n, c in counts.items() if n in store.specs}
    return store.stats.lifecycle
