"""Key names and key → shard routing for the Redis store: pure functions, no I/O.

Every row of every table lands in one of ``buckets`` groups, chosen by a stable hash of
(table, id). The bucket is the key's Redis Cluster hash tag, so a batch's rows group into at
most ``buckets`` slots and each group can be read or written with one multi-key command or one
script. Over standalone servers the bucket picks the server by the store's ``placement``:

* ``modulo`` (the default, and how every existing deployment placed its rows):
  ``shard = bucket % n_shards``; a change of ``n_shards`` moves most groups.
* ``rendezvous`` (highest random weight): the shard ``i`` with the largest
  ``splitmix64(group, i)``. Appending a server to ``urls`` moves only the groups the new server
  wins (``1/(n+1)`` of them) and never moves a group between the old servers.

The shard is a position in ``urls``: keep the order, append new servers at the end.
``streamtrain-redis-migrate`` moves the groups that change servers between two
placements (a new server, or ``modulo`` -> ``rendezvous``) while the trainers are stopped.

>>> row_keys("default", "emb.a", np.array([255], np.uint64), 64).tolist()[0]
b'st:{default/38}:emb.a:r:00000000000000ff'
>>> shard_of_bucket(np.array([0, 1, 2, 3]), 3).tolist()
[0, 1, 2, 0]
>>> g = np.arange(4096)
>>> old, new = shard_of_bucket(g, 3, "rendezvous"), shard_of_bucket(g, 4, "rendezvous")
>>> bool(((old == new) | (new == 3)).all())
True
"""
from __future__ import annotations

import functools
import re

import numpy as np
from redis.crc import key_slot

from streamtrain.hashing import hash_str, splitmix64

PREFIX = "st"
PLACEMENTS = ("modulo", "rendezvous")
NAMED_GROUPS = 1 << 32          # rendezvous: a named tag's group number is this + its Cluster slot
NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]+$")
_HEX = np.frombuffer(b"0123456789abcdef", np.uint8)


def check_name(name: str, what: str) -> str | None:
    """A problem with a namespace or parameter name used inside keys, or None."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        return f"{what} {name!r} may only use letters, digits, '_', '.', '-'"
    return None


def bucket_of(table: str, ids: np.ndarray, buckets: int) -> np.ndarray:
    """Bucket of each id of ``table``: a stable hash of (table, id), in ``[0, buckets)``."""
    ids = np.asarray(ids, np.uint64)
    return (splitmix64(ids ^ np.uint64(hash_str(table))) % np.uint64(buckets)).astype(np.int64)


def shard_of_bucket(bucket, n_shards: int, placement: str = "modulo"):
    """Standalone servers: the server that holds a bucket (see the module's doc)."""
    if placement == "modulo":
        return np.asarray(bucket) % n_shards
    groups = np.asarray(bucket, np.uint64).reshape(-1, 1)
    weights = splitmix64(splitmix64(groups) ^ np.arange(1, n_shards + 1, dtype=np.uint64))
    return weights.argmax(axis=1).reshape(np.shape(bucket))


def shard_of_tag(tag_: str, n_shards: int, placement: str = "modulo") -> int:
    """Standalone servers: the server of a hash tag. A bucket tag ``<ns>/<b>`` is bucket ``b``;
    a named group (``<ns>/dense``, ``<ns>/meta``) goes by its Cluster slot."""
    tail = tag_.rsplit("/", 1)[-1]
    group = int(tail) if tail.isdigit() else key_slot(f"{{{tag_}}}".encode())
    if placement == "rendezvous" and not tail.isdigit():
        group += NAMED_GROUPS
    return int(shard_of_bucket(group, n_shards, placement))


def tag(namespace: str, bucket) -> str:
    """The Cluster hash tag of a bucket (or of a named group such as ``sync`` or ``dense``)."""
    return f"{namespace}/{bucket}"


def tag_of_key(key: bytes | str) -> str:
    """The hash tag inside a key (what Redis Cluster hashes), or the whole key."""
    if isinstance(key, bytes):
        key = key.decode()
    start = key.find("{")
    end = key.find("}", start + 1)
    return key[start + 1:end] if start >= 0 and end > start + 1 else key


def bucket_tag(namespace: str, bucket: int, buckets: int) -> str:
    """The hash tag of a bucket as it appears in row keys (zero-padded)."""
    return f"{namespace}/{bucket:0{len(str(buckets - 1))}d}"


def hex_ids(ids: np.ndarray) -> np.ndarray:
    """uint64 ids as 16 lowercase hex digits each, ``uint8[n, 16]`` (vectorised)."""
    be = np.asarray(ids, np.uint64).astype(">u8").view(np.uint8).reshape(-1, 8)
    out = np.empty((len(be), 16), np.uint8)
    out[:, 0::2] = _HEX[be >> 4]
    out[:, 1::2] = _HEX[be & 15]
    return out


def row_keys(namespace: str, table: str, ids: np.ndarray, buckets: int, kind: str = "r") -> np.ndarray:
    """``st:{<ns>/<bucket>}:<table>:<kind>:<id hex>`` for every id (``r`` rows, ``s`` sightings),
    as a numpy bytes array (``.tolist()`` gives the keys)."""
    ids = np.asarray(ids, np.uint64)
    b = bucket_of(table, ids, buckets)
    heads = _heads(namespace, table, buckets, kind)
    head_len = heads.dtype.itemsize
    mat = np.empty((len(ids), head_len + 16), np.uint8)
    mat[:, :head_len] = heads.view(np.uint8).reshape(buckets, head_len)[b]
    mat[:, head_len:] = hex_ids(ids)
    return mat.view(f"S{head_len + 16}").reshape(-1)


@functools.lru_cache(maxsize=1024)
def _heads(namespace: str, table: str, buckets: int, kind: str) -> np.ndarray:
    """Every bucket's key prefix (built once: a small pull paid for ``buckets`` f-strings)."""
    heads = np.array([f"{PREFIX}:{{{bucket_tag(namespace, i, buckets)}}}:{table}:{kind}:".encode()
                      for i in range(buckets)])
    heads.flags.writeable = False
    return heads


def key_id(key: bytes) -> int:
    """The id at the end of a row key."""
    return int(key[-16:], 16)


def dense_key(namespace: str, name: str) -> bytes:
    return f"{PREFIX}:{{{tag(namespace, 'dense')}}}:{name}".encode()


def table_pattern(namespace: str, table: str, kind: str = "r") -> str:
    """SCAN pattern of every row key of a table (names are checked free of glob characters)."""
    return f"{PREFIX}:{{{namespace}/*}}:{table}:{kind}:*"


def namespace_pattern(namespace: str) -> str:
    return f"{PREFIX}:{{{namespace}/*"


def meta_key(namespace: str, what: str) -> bytes:
    """Counters, sync staging, barrier: all in one slot per namespace (tag ``<ns>/meta``)."""
    return f"{PREFIX}:{{{tag(namespace, 'meta')}}}:{what}".encode()


def feed_key(tag_: str) -> bytes:
    """The change feed stream of the rows written by scripts on this tag's slot (redis_io)."""
    return f"{PREFIX}:{{{tag_}}}:feed".encode()


def receipt_key(row_key: bytes, push_id: str) -> bytes:
    """A push's receipt in the slot of ``row_key`` (same tag), so one script can write both."""
    return f"{PREFIX}:{{{tag_of_key(row_key)}}}:receipt:{push_id}".encode()
