"""The Redis graph store: adjacency shared by every trainer of a model.

Per node one list ``st:graph:<namespace>:adj:<8-byte id>`` of 8-byte neighbour ids, newest
first, capped at ``neighbours`` entries by ``LTRIM`` (and expiring ``ttl_s`` after its last
insert when set); per node with features one string of float32s. A batch's inserts are one pipeline, and a
frontier's lists one pipeline of ``LRANGE``: one round trip per hop per batch.
"""
from __future__ import annotations

import functools

import numpy as np
import redis

from streamtrain.errors import StoreAccessError, StoreError
from streamtrain.schema import Option, check_options, non_negative, positive
from streamtrain.store.redis_connection import (CONNECTION_OPTIONS, connection_kwargs, connection_problems,
                                                redact, section, url_problem)
from streamtrain.store.redis_keys import PREFIX
from streamtrain.store.redis_shards import new_client, refusal, refusal_hint

from .base import COMMON_OPTIONS, GraphStore, empty_snapshot, register


def _keys(prefix: bytes, ids: np.ndarray) -> list[bytes]:
    raw = np.ascontiguousarray(ids, np.uint64).tobytes()
    return [prefix + raw[i:i + 8] for i in range(0, len(raw), 8)]


def _ids(keys, prefix_len: int) -> np.ndarray:
    return np.frombuffer(b"".join(k[prefix_len:] for k in keys), np.uint64)


def _pad(lists: list, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Lists of 8-byte values → ``uint64 [n, k]`` (zeros past each list's length), lengths."""
    counts = np.fromiter((len(x) for x in lists), np.int64, len(lists))
    flat = np.frombuffer(b"".join(b"".join(x) for x in lists), np.uint64)
    out = np.zeros((len(lists), k), np.uint64)
    starts = np.cumsum(counts) - counts
    cols = np.arange(len(flat)) - np.repeat(starts, counts)
    out[np.repeat(np.arange(len(lists)), counts), cols] = flat
    return out, counts


def _store_errors(method):
    """Redis failures surface as ``StoreError`` (the job keeps the batch and steps it again)."""
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except redis.RedisError as err:
            refused = refusal(err)            # a wrong password is not an outage: stop at once
            where = f"graph store {redact(self.url)}" + (f" as user '{self.user}'" if self.user else "")
            if refused is not None:
                raise StoreAccessError(f"{where} refused {method.__name__}: {redact(refused)} "
                                       f"({refusal_hint(refused, OPTION_NAME, NEEDS)})") from None
            raise StoreError(f"{where}: {method.__name__} failed: {redact(err)}") from None
    return wrapper


OPTION_NAME = section("graph.store.")
NEEDS = "keys ~st:graph:*, commands +@read +@write, +select for a database other than 0"


@register
class RedisGraphStore(GraphStore):
    kind = "redis"
    options = {
        **COMMON_OPTIONS,
        "url": Option("redis://127.0.0.1:6379", (str,), check=url_problem,
                      doc="the Redis server holding the graph: redis://[user:password@]host:port[/db] "
                          "or rediss://"),
        "namespace": Option("default", (str,), doc="key prefix: models sharing it share the graph"),
        "ttl_s": Option(0, (int, float), check=non_negative, doc="a node's list expires this long after "
                                                                  "its last insert (0: never)"),
        "timeout_s": Option(5.0, (int, float), check=positive, doc="socket timeout"),
        **CONNECTION_OPTIONS,                  # the parameter store's: user, password, TLS
    }

    @classmethod
    def check_config(cls, cfg: dict) -> list[tuple[str, str]]:
        out = check_options(cls.options, cfg, what="graph store backend 'redis'")
        out += connection_problems(cfg, [cfg.get("url", cls.options["url"].default)])
        return [(path, redact(msg)) for path, msg in out]

    @classmethod
    def test_params(cls):
        return {"neighbours": 3}

    def __init__(self, neighbours: int = 32, url: str = "redis://127.0.0.1:6379", namespace: str = "default",
                 ttl_s: float = 0, timeout_s: float = 5.0, **options):
        super().__init__(neighbours)
        self.url, self.namespace, self.ttl_ms = url, namespace, int(round(ttl_s * 1000))
        conn = connection_kwargs(url, options, OPTION_NAME)
        self.user = conn["username"]
        self.client = new_client(conn, timeout_s)     # no silent retries: a refusal stops at once
        base = f"{PREFIX}:graph:{namespace}:".encode()
        self.adj, self.feat = base + b"adj:", base + b"feat:"
        self.nodes_key, self.edges_key = base + b"nodes", base + b"edges"

    @_store_errors
    def insert(self, src, dst) -> None:
        src, dst = np.asarray(src, np.uint64), np.asarray(dst, np.uint64)
        if not len(src):
            return
        order = np.argsort(src, kind="stable")
        s, d = src[order], dst[order]
        uniq, first = np.unique(s, return_index=True)
        bounds = [*first.tolist(), len(s)]
        raw = d.tobytes()
        pipe = self.client.pipeline(transaction=False)
        for key, a, b in zip(_keys(self.adj, uniq), bounds[:-1], bounds[1:]):
            pipe.lpush(key, *[raw[i:i + 8] for i in range(8 * a, 8 * b, 8)])
            pipe.ltrim(key, 0, self.k - 1)
            if self.ttl_ms:
                pipe.pexpire(key, self.ttl_ms)
        pipe.pfadd(self.nodes_key, *_keys(b"", uniq))
        pipe.incrby(self.edges_key, len(s))
        pipe.execute()

    @_store_errors
    def neighbours(self, ids):
        ids = np.asarray(ids, np.uint64)
        if not len(ids):
            return np.zeros((0, self.k), np.uint64), np.zeros(0, np.int64)
        pipe = self.client.pipeline(transaction=False)
        for key in _keys(self.adj, ids):
            pipe.lrange(key, 0, self.k - 1)
        return _pad(pipe.execute(), self.k)

    @_store_errors
    def set_features(self, ids, features) -> None:
        features = np.ascontiguousarray(features, np.float32)
        pipe = self.client.pipeline(transaction=False)
        for key, row in zip(_keys(self.feat, np.asarray(ids, np.uint64)), features):
            pipe.set(key, row.tobytes(), px=self.ttl_ms or None)
        pipe.execute()

    @_store_errors
    def features(self, ids, width):
        out = np.zeros((len(ids), width), np.float32)
        if not width or not len(ids):
            return out
        for i, raw in enumerate(self.client.mget(_keys(self.feat, np.asarray(ids, np.uint64)))):
            if raw is not None and len(raw) == 4 * width:
                out[i] = np.frombuffer(raw, np.float32)
        return out

    @_store_errors
    def stats(self):
        """Nodes: a HyperLogLog estimate (±1 %); edges: every neighbour entry ever inserted."""
        pipe = self.client.pipeline(transaction=False)
        pipe.pfcount(self.nodes_key)
        pipe.get(self.edges_key)
        nodes, edges = pipe.execute()
        return {"nodes": int(nodes), "edges": int(edges or 0)}

    def _scan(self, prefix: bytes) -> list:
        return list(self.client.scan_iter(match=prefix + b"*", count=1000))

    @_store_errors
    def snapshot(self):
        snap = empty_snapshot(self.k)
        keys = self._scan(self.adj)
        if keys:
            pipe = self.client.pipeline(transaction=False)
            for key in keys:
                pipe.lrange(key, 0, self.k - 1)
            lists = [x[::-1] for x in pipe.execute()]           # oldest first, as they were inserted
            snap["ids"] = _ids(keys, len(self.adj))
            snap["neighbours"], snap["counts"] = _pad(lists, self.k)
        fkeys = self._scan(self.feat)
        if fkeys:
            values = self.client.mget(fkeys)
            snap["feature_ids"] = _ids(fkeys, len(self.feat))
            snap["features"] = np.stack([np.frombuffer(v, np.float32) for v in values])
        return snap

    @_store_errors
    def restore(self, arrays) -> None:
        stale = self._scan(self.adj) + self._scan(self.feat) + [self.nodes_key, self.edges_key]
        for i in range(0, len(stale), 1000):
            self.client.delete(*stale[i:i + 1000])
        self.fill(arrays)

    def close(self) -> None:
        self.client.close()

    def describe(self) -> str:
        return f"redis {redact(self.url)} namespace={self.namespace} (recent {self.k} neighbours per node)"
