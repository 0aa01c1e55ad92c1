"""Batched reads and compare-and-set writes of many keys over the shards, with retries.

Keys travel with their *group*: a bucket ``0..buckets-1``, or ``DENSE``/``META``. Over
standalone servers one MGET (or one script call per ``MAX_ROWS``) per server carries every
group that server holds; in a Cluster one command per group, since a multi-key command must
stay in one slot. Either way every server's commands go out before any answer is read.
"""
from __future__ import annotations

import os

import numpy as np
from redis.exceptions import NoScriptError

from . import redis_keys, redis_resp, redis_scripts
from .redis_shards import Shards

MGET_CHUNK = 10_000
RECEIPT_MS = 60_000     # default; the store sets it to outlive its whole retry window


class RowIO:
    def __init__(self, shards: Shards, namespace: str, buckets: int):
        self.shards, self.ns, self.buckets = shards, namespace, buckets
        self.DENSE, self.META = buckets, buckets + 1
        self.client_id = os.urandom(6).hex()
        self.receipt_ms = RECEIPT_MS
        self.feed_ms = 0                # > 0: the CAS script appends its writes to the change feed
        self._seq = 0
        self._answered: list[tuple[int, bytes]] = []     # (group, receipt) of the last finished push
        self._sha = None
        self._map = None
        self._map_of = None

    # ---- routing -----------------------------------------------------------------------
    def group_shard(self) -> np.ndarray:
        """Shard of every group; recomputed when the cluster map changed."""
        key = (self.shards.epoch, len(self.shards.clients))      # (not id() of the map: ids are reused)
        if self._map_of != key:
            tags = [redis_keys.bucket_tag(self.ns, b, self.buckets) for b in range(self.buckets)]
            tags += [redis_keys.tag(self.ns, "dense"), redis_keys.tag(self.ns, "meta")]
            self._map = np.array([self.shards.shard_of_tag(t) for t in tags], np.int64)
            self._map_of = key
        return self._map

    def feed_groups(self) -> dict[int, int]:
        """The group whose feed stream each command unit appends to, by unit: a Cluster's
        commands are per group (each group its own stream, in its slot); standalone ones per
        shard (one stream per shard, under the shard's first group's tag), so the writes to any
        row land in one stream, in the order they happened."""
        where = self.group_shard()
        if self.shards.cluster:
            return {g: g for g in range(self.buckets + 1)}           # buckets and dense
        out: dict[int, int] = {}
        for g, shard in enumerate(where[:self.buckets + 1].tolist()):
            out.setdefault(shard, g)
        return out

    def feed_key(self, group: int) -> bytes:
        tag = redis_keys.tag(self.ns, "dense") if group == self.DENSE else \
            redis_keys.bucket_tag(self.ns, group, self.buckets)
        return redis_keys.feed_key(tag)

    def feed_reset(self) -> None:
        """Tell the servers replicating from the feed that rows were deleted (a checkpoint
        restored): a ``reset`` entry in every stream makes them copy the tables again."""
        if self.feed_ms <= 0:
            return
        where = self.group_shard()
        plan = [(int(where[g]), None, ("XADD", self.feed_key(g), "*", "reset", "1"))
                for g in sorted(set(self.feed_groups().values()))]
        self.shards.retrying("reset the change feed", lambda: self._run(plan))

    def units(self, groups: np.ndarray, limit: int):
        """(shard, positions) per command: per shard, or per group in a Cluster; ``limit`` keys each."""
        groups = np.asarray(groups, np.int64)
        shard = self.group_shard()[groups]
        unit = groups if self.shards.cluster else shard
        order = np.argsort(unit, kind="stable")
        bounds = np.flatnonzero(np.diff(unit[order])) + 1
        for pos in np.split(order, bounds):
            if len(pos):
                for start in range(0, len(pos), limit):
                    yield int(shard[pos[0]]), pos[start:start + limit]

    def _run(self, plan: list[tuple[int, np.ndarray, tuple]]) -> list:
        """Run ``(shard, positions, command)`` items; answers in plan order."""
        cmds: dict[int, list] = {}
        for shard, _, cmd in plan:
            cmds.setdefault(shard, []).append(cmd)
        answers = self.shards.run(cmds)
        seen = {s: 0 for s in cmds}
        out = []
        for shard, _, _ in plan:
            out.append(answers[shard][seen[shard]])
            seen[shard] += 1
        return out

    # ---- reads ---------------------------------------------------------------------------
    def mget(self, keys: np.ndarray, groups: np.ndarray, what: str = "read rows") -> np.ndarray:
        """Values (bytes or None) of ``keys``, in their order; one round trip to every shard."""
        out = np.empty(len(keys), object)
        if not len(keys):
            return out

        width = np.char.str_len(keys) if keys.dtype.kind == "S" else None

        def attempt():
            plan = []
            for s, pos in self.units(groups, MGET_CHUNK):
                if width is None:
                    plan.append((s, pos, ("MGET", *keys[pos].tolist())))
                    continue
                pos = pos[np.argsort(width[pos], kind="stable")]      # one run of keys per length
                cuts = np.flatnonzero(np.diff(width[pos])) + 1
                plan.append((s, pos, ("MGET", *(redis_resp.run_of(keys[p].astype(f"S{width[p[0]]}"))
                                                for p in np.split(pos, cuts)))))
            for (_, pos, _), vals in zip(plan, self._run(plan)):
                out[pos] = vals
            return out

        return self.shards.retrying(what, attempt)

    def per_key(self, keys: np.ndarray, groups: np.ndarray, commands, what: str) -> list:
        """Run ``commands(key) -> [command, ...]`` for every key, pipelined per shard; the
        answers of each key's commands, in key order."""
        def attempt():
            shards = self.group_shard()[np.asarray(groups, np.int64)]
            plan, owner = [], []
            for i, (key, shard) in enumerate(zip(keys.tolist(), shards.tolist())):
                for cmd in commands(key):
                    plan.append((shard, None, cmd))
                    owner.append(i)
            out = [[] for _ in range(len(keys))]
            for i, answer in zip(owner, self._run(plan)):
                out[i].append(answer)
            return out
        return self.shards.retrying(what, attempt)

    # ---- compare-and-set -------------------------------------------------------------------
    def cas(self, parts: list[tuple], what: str = "write rows") -> list[np.ndarray]:
        """Compare-and-set rows of several parameters. A part is ``(keys, groups, expected
        uint64[n] (0 = must be absent), values uint8[n, length], ttl_ms, name, ids uint64[n]
        or None)``; name and ids go to the change feed (``feed_ms``). Returns, per part,
        a bool mask of the rows NOT written (changed by someone else since read).
        Idempotent under retries: every script call carries a receipt id. The receipts of the
        previous call, answered in full and so never retried, are deleted in this call's
        pipeline (no extra round trip; they would otherwise crowd the keyspace until they expire)."""
        failed = [np.zeros(len(p[0]), bool) for p in parts]
        if not sum(len(p[0]) for p in parts):
            return failed
        self._seq += 1
        groups = np.concatenate([p[1] for p in parts])
        part_of = np.concatenate([np.full(len(p[0]), i, np.int64) for i, p in enumerate(parts)])
        local = np.concatenate([np.arange(len(p[0])) for p in parts])
        plan = self._cas_plan(parts, groups, part_of, local)
        answered = self._answered
        old_groups = np.array([g for g, _ in answered], np.int64)
        old_keys = np.array([k for _, k in answered] or [b""], object)

        def attempt():
            where = self.group_shard()     # re-read: a Cluster slot may have moved since the last try
            for retry_script in (False, True):
                sha = self._load_script()
                items = [(int(where[groups[pos[0]]]), pos, ("EVALSHA", sha, 2 + len(pos), *ks, *argv))
                         for _, pos, ks, argv in plan]
                cleanup = [(s, None, ("UNLINK", *old_keys[pos].tolist())) for s, pos in self.units(old_groups, 1000)]
                try:
                    answers = self._run(items + cleanup)[:len(items)]
                    break
                except NoScriptError:
                    self._sha = None              # a restarted server forgot the script
                    if retry_script:
                        raise
            for (_, pos, _), answer in zip(items, answers):
                bad = pos[redis_scripts.parse_answer(answer)]
                for i in bad.tolist():
                    failed[part_of[i]][local[i]] = True
            return failed

        out = self.shards.retrying(what, attempt)
        self._answered = [(int(groups[pos[0]]), ks[0]) for _, pos, ks, _ in plan]
        return out

    def _cas_plan(self, parts, groups, part_of, local) -> list[tuple]:
        """``cas``'s script calls: per unit (a shard's rows, at most ``MAX_ROWS``) its
        ``(shard, positions, keys, argv)``, one segment of arguments per part it holds."""
        plan = []
        feed, feeds = self.feed_ms > 0, self.feed_groups()
        for c, (shard, pos) in enumerate(self.units(groups, redis_scripts.MAX_ROWS)):
            keys, argv, segments = [], [], 0
            for run in np.split(pos, np.flatnonzero(np.diff(part_of[pos])) + 1):
                p_keys, _, expected, values, ttl_ms, name, ids = parts[part_of[run[0]]]
                rows = local[run]
                keys.append(redis_resp.run_of(p_keys[rows]) if p_keys.dtype.kind == "S"
                            else redis_resp.Run(b"".join(map(redis_resp.pack_arg, p_keys[rows].tolist())), len(rows)))
                feed_ids = b"" if not feed else bytes(8 * len(rows)) if ids is None else \
                    np.asarray(ids[rows], "<u8").tobytes()                  # a dense parameter: id 0
                argv += [len(rows), values.shape[1], int(ttl_ms),
                         np.asarray(expected[rows], "<u8").tobytes(), values[rows].tobytes(),
                         name if feed else b"", feed_ids]
                segments += 1
            first = parts[part_of[pos[0]]][0][local[pos[0]]]
            receipt = redis_keys.receipt_key(bytes(first), f"{self.client_id}:{self._seq}:{c}")
            feed_key = self.feed_key(feeds[int(groups[pos[0]]) if self.shards.cluster else shard])
            plan.append((shard, pos, [receipt, feed_key, *keys], [self.receipt_ms, segments, self.feed_ms, *argv]))
        return plan

    def _load_script(self) -> str:
        if self._sha is None:
            plan = [(s, None, ("SCRIPT", "LOAD", redis_scripts.CAS)) for s in range(len(self.shards.clients))]
            shas = self._run(plan)
            self._sha = shas[0].decode() if isinstance(shas[0], bytes) else shas[0]
        return self._sha

    # ---- whole-namespace walks -------------------------------------------------------------
    def scan(self, pattern: str, what: str = "scan") -> list[bytes]:
        """Every key matching ``pattern`` on every shard."""
        def attempt():
            found = []
            for client in self.shards.clients:
                found.extend(client.scan_iter(match=pattern, count=2000))
            return found
        return sorted(set(self.shards.retrying(what, attempt)))

    def delete(self, keys: list[bytes], what: str = "delete keys") -> None:
        if not keys:
            return
        arr = np.array(keys, object)
        groups = np.array([self.group_of_key(k) for k in keys], np.int64)

        def attempt():
            plan = [(s, pos, ("UNLINK", *arr[pos].tolist())) for s, pos in self.units(groups, 1000)]
            self._run(plan)
        self.shards.retrying(what, attempt)

    def group_of_key(self, key: bytes) -> int:
        tail = redis_keys.tag_of_key(key).rsplit("/", 1)[-1]
        return int(tail) if tail.isdigit() else (self.DENSE if tail == "dense" else self.META)

    def meta(self, *command, what: str = "meta"):
        """One command on the shard of the namespace's meta keys."""
        return self.shards.retrying(what, lambda: self.shards.call(int(self.group_shard()[self.META]), *command))

    def meta_hash(self, key, what: str = "meta") -> dict:
        """HGETALL of a meta key as a dict (redis-py before 8 hands a flat list back here)."""
        raw = self.meta("HGETALL", key, what=what) or {}
        return raw if isinstance(raw, dict) else dict(zip(raw[::2], raw[1::2]))

    def meta_many(self, commands: list[tuple], what: str = "meta"):
        def attempt():
            s = int(self.group_shard()[self.META])
            return self.shards.run({s: commands})[s]
        return self.shards.retrying(what, attempt)
