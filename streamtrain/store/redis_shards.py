"""Connections to the shards (standalone servers or Cluster primaries) and pipelined I/O.

``run({shard: [command, ...]})`` writes every shard's pipeline before reading any answer, so
a multi-shard pull costs one round trip, not one per shard. ``retrying(what, fn)`` re-runs an
operation on connection errors, a loading or restarting server, and Cluster redirections, with
exponential backoff and one log line per attempt, and raises ``StoreError`` when it gives up.
"""
from __future__ import annotations

import logging
import random
import time

import redis
import redis.retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import (AskError, BusyLoadingError, ClusterDownError, MovedError, ResponseError,
                              TryAgainError)

from streamtrain.errors import StoreError

from . import redis_keys

try:
    from hiredis import pack_command as _pack_one

    def _pack(conn, commands):
        return [b"".join(_pack_one(tuple(c)) for c in commands)]
except ImportError:                   # redis-py's own packer
    def _pack(conn, commands):
        return conn.pack_commands(commands)

log = logging.getLogger("streamtrain.store.redis")

TRANSIENT = (redis.ConnectionError, redis.TimeoutError, BusyLoadingError, ConnectionResetError,
             BrokenPipeError, OSError)
RETRY_REPLIES = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN")
RETRY_ERRORS = (MovedError, AskError, TryAgainError, ClusterDownError)


class Retry:
    """Backoff settings: first wait, cap, and how long to keep trying before raising."""

    def __init__(self, initial_s=0.05, max_s=2.0, give_up_s=30.0):
        self.initial_s, self.max_s, self.give_up_s = initial_s, max_s, give_up_s


def _client(host, port, timeout_s) -> redis.Redis:
    # redis-py's own silent retries are off: ``Shards.retrying`` retries, logs and counts
    return redis.Redis(host=host, port=int(port), socket_timeout=timeout_s,
                       socket_connect_timeout=timeout_s, retry=redis.retry.Retry(NoBackoff(), 0))


def _host_port(url: str) -> tuple[str, int]:
    kw = redis.connection.parse_url(url)
    return kw.get("host", "127.0.0.1"), int(kw.get("port", 6379))


class Shards:
    """Where each key lives. Standalone: ``shard_of_tag`` from redis_keys; Cluster: the slot map."""

    def __init__(self, *, urls=None, cluster=None, timeout_s=5.0, retry: Retry | None = None, stats=None,
                 placement: str = "modulo"):
        self.cluster = bool(cluster)
        self.placement = placement
        self.timeout_s = timeout_s
        self.retry = retry or Retry()
        self.stats = stats
        self._seeds = [_host_port(cluster)] if cluster else [_host_port(u) for u in urls]
        self.clients: list[redis.Redis] = []
        self.names: list[str] = []
        self._slot_shard: list[int] = []
        self.epoch = 0                  # +1 at each slot map read: routing caches compare it
        if self.cluster:
            self.retrying("read the cluster slot map", self.refresh)
        else:
            self.clients = [_client(h, p, timeout_s) for h, p in self._seeds]
            self.names = [f"{h}:{p}" for h, p in self._seeds]

    # ---- routing -----------------------------------------------------------------------
    def refresh(self) -> None:
        """Cluster: (re)read ``CLUSTER SLOTS`` from any node that answers."""
        if not self.cluster:
            return
        last = None
        for host, port in [*self._seeds, *(_host_port(f"redis://{n}") for n in self.names)]:
            try:
                slots = _client(host, port, self.timeout_s).execute_command("CLUSTER SLOTS")
                break
            except TRANSIENT + (ResponseError,) as err:
                last = err
        else:
            raise redis.ConnectionError(f"no cluster node answered: {last}")
        by_name = {n: i for i, n in enumerate(self.names)}
        table = [-1] * 16384
        for start, end, primary, *_ in slots:
            host = primary[0].decode() if isinstance(primary[0], bytes) else primary[0]
            name = f"{host or self._seeds[0][0]}:{primary[1]}"
            if name not in by_name:
                by_name[name] = len(self.names)
                self.names.append(name)
                self.clients.append(_client(*name.rsplit(":", 1), self.timeout_s))
            for s in range(start, end + 1):
                table[s] = by_name[name]
        if -1 in table:
            raise redis.ConnectionError(f"cluster slot {table.index(-1)} has no node (CLUSTERDOWN)")
        self._slot_shard = table
        self.epoch += 1

    def shard_of_tag(self, tag: str) -> int:
        if self.cluster:
            return self._slot_shard[key_slot(f"{{{tag}}}".encode())]
        return redis_keys.shard_of_tag(tag, len(self.clients), self.placement)

    def shard_of_key(self, key: bytes) -> int:
        return self.shard_of_tag(redis_keys.tag_of_key(key))

    # ---- I/O ---------------------------------------------------------------------------
    def run(self, groups: dict[int, list[tuple]]) -> dict[int, list]:
        """Send every shard's pipeline, then read every answer; raise the first error reply."""
        conns, out, first_error = {}, {}, None
        try:
            for shard, commands in groups.items():
                if not commands:
                    continue
                conn = self.clients[shard].connection_pool.get_connection()
                conns[shard] = conn
                conn.send_packed_command(_pack(conn, commands), check_health=False)
            for shard, conn in conns.items():
                answers = []
                for _ in groups[shard]:
                    try:
                        answers.append(conn.read_response())
                    except ResponseError as err:
                        answers.append(err)
                        first_error = first_error or err
                out[shard] = answers
        except BaseException:
            for conn in conns.values():
                conn.disconnect()
            raise
        finally:
            for shard, conn in conns.items():
                self.clients[shard].connection_pool.release(conn)
        if first_error is not None:
            raise first_error
        return out

    def call(self, shard: int, *command):
        return self.run({shard: [command]})[shard][0]

    def retrying(self, what: str, fn):
        """Run ``fn()``; on a transient failure wait and run it again, until ``give_up_s``."""
        start, attempt = time.monotonic(), 0
        while True:
            try:
                result = fn()
            except TRANSIENT + (ResponseError,) as err:
                if isinstance(err, ResponseError) and not isinstance(err, RETRY_ERRORS) \
                        and not str(err).startswith(RETRY_REPLIES):
                    raise StoreError(f"redis store: {what}: {err}") from err
                attempt += 1
                if self.stats is not None:
                    self.stats.errors += 1
                waited = time.monotonic() - start
                if waited >= self.retry.give_up_s:
                    log.error("redis store: %s failed after %d attempts in %.1f s: %s", what, attempt,
                              waited, err)
                    raise StoreError(f"redis store: {what} failed after {attempt} attempts in "
                                     f"{waited:.1f} s ({', '.join(self.names)}): {err}") from err
                pause = min(self.retry.max_s, self.retry.initial_s * 2 ** (attempt - 1))
                pause *= 0.5 + random.random() / 2
                log.warning("redis store: %s failed (%s: %s); retry %d in %.2f s, giving up after %.0f s",
                            what, type(err).__name__, err, attempt, pause, self.retry.give_up_s)
                time.sleep(pause)
                try:
                    self.refresh()
                except TRANSIENT + (ResponseError,):
                    pass
                continue
            if attempt:
                log.warning("redis store: %s succeeded after %d retries", what, attempt)
            return result

    def close(self) -> None:
        for client in self.clients:
            client.close()
