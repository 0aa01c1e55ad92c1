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

from . import redis_keys, redis_scripts
from .redis_shards import Shards

MGET_CHUNK = 10_000
RECEIPT_MS = 600_000


class RowIO:
    def __init__(self, shards: Shards, namespace: str, buckets: int):
        self.shards, self.ns, self.buckets = shards, namespace, buckets
        self.DENSE, self.META = buckets, buckets + 1
        self.client_id = os.urandom(6).hex()
        self._seq = 0
        self._sha = None
        self._map = None
        self._map_of = None

    # ---- routing -----------------------------------------------------------------------
    def group_shard(self) -> np.ndarray:
        """Shard of every group; recomputed when the cluster map changed."""
        key = id(self.shards._slot_shard) if self.shards.cluster else len(self.shards.clients)
        if self._map_of != key:
            tags = [redis_keys.tag(self.ns, b) for b in range(self.buckets)]
            tags += [redis_keys.tag(self.ns, "dense"), redis_keys.tag(self.ns, "meta")]
            self._map = np.array([self.shards.shard_of_tag(t) for t in tags], np.int64)
            self._map_of = key
        return self._map

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

        def attempt():
            plan = [(s, pos, ("MGET", *keys[pos].tolist())) for s, pos in self.units(groups, MGET_CHUNK)]
            for (_, pos, _), vals in zip(plan, self._run(plan)):
                out[pos] = vals
            return out

        return self.shards.retrying(what, attempt)

    # ---- compare-and-set -------------------------------------------------------------------
    def cas(self, keys: np.ndarray, groups: np.ndarray, expected: list, values: list,
            ttl_ms: np.ndarray | None, what: str = "write rows") -> np.ndarray:
        """Write ``values[i]`` where the row's tag is still ``expected[i]`` (b"" = absent).
        Returns a bool mask of the rows NOT written (changed by someone else meanwhile).
        Idempotent under retries: every script call carries a receipt id."""
        failed = np.zeros(len(keys), bool)
        if not len(keys):
            return failed
        self._seq += 1
        stride = 2 if ttl_ms is None else 3
        plan = []
        for i, (shard, pos) in enumerate(self.units(groups, redis_scripts.MAX_ROWS)):
            ks = keys[pos].tolist()
            args = [None] * (stride * len(pos))
            args[0::stride] = [expected[j] for j in pos]
            args[1::stride] = [values[j] for j in pos]
            if stride == 3:
                args[2::stride] = ttl_ms[pos].tolist()
            receipt = redis_keys.receipt_key(ks[0], f"{self.client_id}:{self._seq}:{i}")
            plan.append((shard, pos, [receipt, *ks], [stride, RECEIPT_MS, *args]))

        def attempt():
            sha = self._load_script()
            items = [(s, pos, ("EVALSHA", sha, len(ks), *ks, *argv)) for s, pos, ks, argv in plan]
            try:
                answers = self._run(items)
            except NoScriptError:
                self._sha = None                  # a restarted server forgot the script
                sha = self._load_script()
                items = [(s, pos, ("EVALSHA", sha, len(ks), *ks, *argv)) for s, pos, ks, argv in plan]
                answers = self._run(items)
            for (_, pos, _), answer in zip(items, answers):
                bad = redis_scripts.parse_answer(answer)
                if bad:
                    failed[pos[bad]] = True
            return failed

        return self.shards.retrying(what, attempt)

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

    def meta_many(self, commands: list[tuple], what: str = "meta"):
        shard = int
        def attempt():
            s = int(self.group_shard()[self.META])
            return self.shards.run({s: commands})[s]
        return self.shards.retrying(what, attempt)
