"""The Redis graph store: adjacency shared by every trainer of a model, on one Redis server or a
Redis Cluster.

Keys start ``st:graph:`` and carry a Cluster hash tag, ``{<namespace>/g<bucket>}``, so the keys
of one bucket of nodes (a stable hash of the node id, ``buckets`` of them) share a slot::

    st:graph:{<ns>/g<b>}:a:<id hex>   list: the node's K most recent distinct neighbours, oldest first
    st:graph:{<ns>/g<b>}:f:<id hex>   string: the node's latest features (float32s)
    st:graph:{<ns>/g<b>}:n            hash: ``nodes`` and ``edges`` held in the bucket

A batch's inserts are one script call per bucket (``MAX_NODES`` nodes at most): per edge, in
stream order, ``LREM`` then ``RPUSH`` (a neighbour already held moves to the newest end), then
``LTRIM`` to K, ``PEXPIRE`` with ``ttl_s``, and the bucket's counters, atomically. Inserting the
same edges again changes nothing, so a retried call (a dropped connection, a slot that moved
mid-batch) does no harm, and ``streamtrain graph load`` run twice loads once. A frontier's
lists are one pipeline of ``LRANGE`` per server: one round trip per hop. Routing, retries
(MOVED, ASK, TRYAGAIN, a restarting server), TLS and ACL users are the parameter store's
(``store.redis_shards.Shards``), so a graph on a Cluster survives resharding as the
parameters do. The lists are in the memory store's order, so both sample the same blocks.
"""
from __future__ import annotations

from urllib.parse import urlsplit

import numpy as np
from redis.exceptions import NoScriptError

from streamtrain.schema import Option, check_options, non_negative, positive
from streamtrain.store import redis_keys
from streamtrain.store.redis_config import RETRY_OPTIONS
from streamtrain.store.redis_connection import (CONNECTION_OPTIONS, connection_kwargs, connection_problems,
                                                redact, section, url_problem)
from streamtrain.store.redis_shards import Retry, Shards, refusal_hint

from .base import COMMON_OPTIONS, GraphStore, empty_snapshot, register

OPTION_NAME = section("graph.store.")
NEEDS = ("keys ~st:graph:*, commands +@read +@write +@scripting, +cluster for a Cluster, "
         "+select for a database other than 0")
DEFAULT_URL = "redis://127.0.0.1:6379"
MAX_NODES = 500                 # nodes per script call: the server is never blocked for long
INSERT = r"""
local k, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
local nodes, edges = 0, 0
for i = 1, #KEYS - 1 do
  local key, blob = KEYS[i], ARGV[i + 2]
  local before = redis.call('LLEN', key)
  for p = 1, #blob, 8 do
    local id = string.sub(blob, p, p + 7)
    redis.call('LREM', key, 0, id)
    redis.call('RPUSH', key, id)
  end
  redis.call('LTRIM', key, -k, -1)
  if ttl > 0 then redis.call('PEXPIRE', key, ttl) end
  edges = edges + redis.call('LLEN', key) - before
  if before == 0 then nodes = nodes + 1 end
end
if nodes > 0 then redis.call('HINCRBY', KEYS[#KEYS], 'nodes', nodes) end
if edges ~= 0 then redis.call('HINCRBY', KEYS[#KEYS], 'edges', edges) end
return edges
"""


def _pad(lists: list, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Lists of 8-byte values → ``uint64 [n, k]`` (zeros past each list's length), lengths."""
    counts = np.fromiter((len(x) for x in lists), np.int64, len(lists))
    flat = np.frombuffer(b"".join(b"".join(x) for x in lists), np.uint64)
    out = np.zeros((len(lists), k), np.uint64)
    starts = np.cumsum(counts) - counts
    cols = np.arange(len(flat)) - np.repeat(starts, counts)
    out[np.repeat(np.arange(len(lists)), counts), cols] = flat
    return out, counts


def _key_ids(keys: list) -> np.ndarray:
    return np.array([redis_keys.key_id(k) for k in keys], np.uint64)


def _cluster_problem(v) -> str | None:
    if v is None:
        return None
    return url_problem(v) or (None if urlsplit(v).path.strip("/") in ("", "0")
                              else "a Redis Cluster has database 0 only")


@register
class RedisGraphStore(GraphStore):
    kind = "redis"
    options = {
        **COMMON_OPTIONS,
        "url": Option(None, (str, type(None)), check=lambda v: v is not None and url_problem(v) or None,
                      doc=f"one Redis server: redis://[user:password@]host:port[/db] or rediss:// "
                          f"(default {DEFAULT_URL} when no cluster is given)"),
        "cluster": Option(None, (str, type(None)), check=_cluster_problem,
                          doc="any node of a Redis Cluster (same URL forms; database 0)"),
        "namespace": Option("default", (str,), check=lambda v: redis_keys.check_name(v, "namespace"),
                            doc="key prefix: models sharing it share the graph"),
        "buckets": Option(64, (int,), check=positive, doc="node groups (hash tags): keys of one share a slot"),
        "ttl_s": Option(0, (int, float), check=non_negative, doc="a node's list expires this long after "
                                                                  "its last insert (0: never)"),
        "timeout_s": Option(5.0, (int, float), check=positive, doc="socket timeout"),
        "retry": Option(fields=RETRY_OPTIONS, doc="backoff of failed graph store operations"),
        **CONNECTION_OPTIONS,                  # the parameter store's: user, password, TLS
    }

    @classmethod
    def check_config(cls, cfg: dict) -> list[tuple[str, str]]:
        out = check_options(cls.options, cfg, what="graph store backend 'redis'")
        if cfg.get("url") and cfg.get("cluster"):
            out.append(("cluster", "give either url (one server) or cluster, not both"))
        out += connection_problems(cfg, [cfg.get("url") or cfg.get("cluster") or DEFAULT_URL])
        return [(path, redact(msg)) for path, msg in out]

    @classmethod
    def test_params(cls):
        return {"neighbours": 3, "buckets": 4}

    def __init__(self, neighbours: int = 32, url: str | None = None, cluster: str | None = None,
                 namespace: str = "default", buckets: int = 64, ttl_s: float = 0, timeout_s: float = 5.0,
                 retry: dict | None = None, **options):
        super().__init__(neighbours)
        self.url = cluster or url or DEFAULT_URL
        self.namespace, self.buckets, self.ttl_ms = namespace, int(buckets), int(round(ttl_s * 1000))
        self.shards = Shards(urls=None if cluster else [self.url], cluster=cluster, timeout_s=timeout_s,
                             retry=Retry(**(retry or {})), label="redis graph store",
                             connect=lambda u: connection_kwargs(u, options, OPTION_NAME),
                             hint=lambda refused: refusal_hint(refused, OPTION_NAME, NEEDS))
        width = len(str(self.buckets - 1))
        self.tags = [f"{namespace}/g{b:0{width}d}" for b in range(self.buckets)]
        self._bucket_of_tag = {t: b for b, t in enumerate(self.tags)}
        self._heads = {kind: np.array([f"{redis_keys.PREFIX}:graph:{{{t}}}:{kind}:".encode() for t in self.tags])
                       for kind in "af"}
        self._counts = [f"{redis_keys.PREFIX}:graph:{{{t}}}:n".encode() for t in self.tags]
        self._where, self._where_of, self._sha = None, None, None

    # ---- routing ---------------------------------------------------------------------------
    def _shard_of_bucket(self) -> np.ndarray:
        key = (self.shards.epoch, len(self.shards.clients))     # a Cluster's slot map was re-read
        if self._where_of != key:
            self._where = np.array([self.shards.shard_of_tag(t) for t in self.tags], np.int64)
            self._where_of = (self.shards.epoch, len(self.shards.clients))
        return self._where

    def _keys(self, kind: str, ids: np.ndarray) -> tuple[list, np.ndarray]:
        """(keys of ``ids``, each one's bucket)."""
        ids = np.asarray(ids, np.uint64)
        bucket = redis_keys.bucket_of("graph", ids, self.buckets)
        heads = self._heads[kind][bucket]
        hexes = redis_keys.hex_ids(ids).view("S16").reshape(-1)
        return [h + x for h, x in zip(heads.tolist(), hexes.tolist())], bucket

    def _run(self, what: str, plan) -> list:
        """``plan() -> [(bucket, command), ...]``, built again at every attempt (a slot may have
        moved); the answers in plan order."""
        return self.shards.retrying(what, lambda: self._once(plan()))

    def _once(self, items: list) -> list:
        """Send every server its commands, then read every answer: one round trip."""
        where = self._shard_of_bucket()
        cmds: dict[int, list] = {}
        for b, cmd in items:
            cmds.setdefault(int(where[b]), []).append(cmd)
        answers = self.shards.run(cmds)
        seen = dict.fromkeys(cmds, 0)
        out = []
        for b, _ in items:
            s = int(where[b])
            out.append(answers[s][seen[s]])
            seen[s] += 1
        return out

    # ---- the graph -------------------------------------------------------------------------
    def insert(self, src, dst) -> None:
        src, dst = np.asarray(src, np.uint64), np.asarray(dst, np.uint64)
        if not len(src):
            return
        order = np.argsort(src, kind="stable")              # per node, in stream order
        s, raw = src[order], dst[order].tobytes()
        uniq, first = np.unique(s, return_index=True)
        bounds = [*first.tolist(), len(s)]
        blobs = [raw[8 * a:8 * b] for a, b in zip(bounds[:-1], bounds[1:])]
        keys, bucket = self._keys("a", uniq)
        by_bucket = np.argsort(bucket, kind="stable")
        cuts = np.flatnonzero(np.diff(bucket[by_bucket])) + 1
        calls = [(int(bucket[part[0]]), part[i:i + MAX_NODES]) for part in np.split(by_bucket, cuts)
                 for i in range(0, len(part), MAX_NODES)]

        def attempt():
            for retry_script in (False, True):
                try:
                    sha = self._script()
                    return self._once([(b, ("EVALSHA", sha, len(pos) + 1, *[keys[i] for i in pos], self._counts[b],
                                            self.k, self.ttl_ms, *[blobs[i] for i in pos])) for b, pos in calls])
                except NoScriptError:          # a restarted (or new) server forgot the script
                    self._sha = None
                    if retry_script:
                        raise
        self.shards.retrying("insert edges into the graph", attempt)

    def _script(self) -> str:
        if self._sha is None:
            self._shard_of_bucket()            # a Cluster's nodes are known once the map was read
            sha = [self.shards.call(s, "SCRIPT", "LOAD", INSERT) for s in range(len(self.shards.clients))][0]
            self._sha = sha.decode() if isinstance(sha, bytes) else sha
        return self._sha

    def neighbours(self, ids):
        ids = np.asarray(ids, np.uint64)
        if not len(ids):
            return np.zeros((0, self.k), np.uint64), np.zeros(0, np.int64)
        keys, bucket = self._keys("a", ids)
        lists = self._run("read the graph's neighbour lists",
                          lambda: [(b, ("LRANGE", key, 0, -1)) for key, b in zip(keys, bucket.tolist())])
        return _pad(lists, self.k)

    def set_features(self, ids, features) -> None:
        features = np.ascontiguousarray(features, np.float32)
        keys, bucket = self._keys("f", ids)
        px = ("PX", self.ttl_ms) if self.ttl_ms else ()
        self._run("write node features", lambda: [(b, ("SET", key, row.tobytes(), *px))
                                                  for key, b, row in zip(keys, bucket.tolist(), features)])

    def features(self, ids, width):
        out = np.zeros((len(ids), width), np.float32)
        if not width or not len(ids):
            return out
        keys, bucket = self._keys("f", ids)
        values = self._run("read node features", lambda: [(b, ("GET", key)) for key, b in zip(keys, bucket.tolist())])
        for i, raw in enumerate(values):
            if raw is not None and len(raw) == 4 * width:
                out[i] = np.frombuffer(raw, np.float32)
        return out

    def stats(self):
        """Nodes with a list and the neighbour entries they hold (lists expired by ``ttl_s`` are
        still counted)."""
        got = self._run("read the graph's counters",
                        lambda: [(b, ("HMGET", key, "nodes", "edges")) for b, key in enumerate(self._counts)])
        totals = np.array([[int(v or 0) for v in pair] for pair in got], np.int64).reshape(-1, 2).sum(axis=0)
        return {"nodes": int(totals[0]), "edges": int(totals[1])}

    # ---- whole graph -----------------------------------------------------------------------
    def _scan(self, kind: str) -> list:
        """Every key of one kind (``a``, ``f``, or ``*``) of this namespace, on every server."""
        pattern = f"{redis_keys.PREFIX}:graph:{{{self.namespace}/g*}}:{kind}*".encode()

        def attempt():
            self._shard_of_bucket()
            return sorted({k for c in self.shards.clients for k in c.scan_iter(match=pattern, count=2000)})
        return self.shards.retrying("list the graph's keys", attempt)

    def _bucket_of_key(self, key: bytes) -> int:
        return self._bucket_of_tag[redis_keys.tag_of_key(key)]

    def snapshot(self):
        snap = empty_snapshot(self.k)
        keys = self._scan("a:")
        if keys:
            snap["ids"] = _key_ids(keys)
            lists = self._run("read the graph", lambda: [(self._bucket_of_key(k), ("LRANGE", k, 0, -1))
                                                          for k in keys])
            snap["neighbours"], snap["counts"] = _pad(lists, self.k)
        fkeys = self._scan("f:")
        if fkeys:
            values = self._run("read node features", lambda: [(self._bucket_of_key(k), ("GET", k)) for k in fkeys])
            snap["feature_ids"] = _key_ids(fkeys)
            snap["features"] = np.stack([np.frombuffer(v, np.float32) for v in values])
        return snap

    def restore(self, arrays) -> None:
        by_bucket: dict[int, list] = {}
        for key in self._scan(""):
            by_bucket.setdefault(self._bucket_of_key(key), []).append(key)
        if by_bucket:            # one command per bucket: a Cluster's multi-key command stays in one slot
            self._run("empty the graph", lambda: [(b, ("UNLINK", *keys)) for b, keys in by_bucket.items()])
        self.fill(arrays)

    def close(self) -> None:
        self.shards.close()

    def describe(self) -> str:
        where = f"cluster {redact(self.url)}" if self.shards.cluster else redact(self.url)
        return f"redis {where} namespace={self.namespace} (recent {self.k} distinct neighbours per node)"
