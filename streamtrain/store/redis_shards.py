"""Connections to the shards (standalone servers or Cluster primaries) and pipelined I/O.

``run({shard: [command, ...]})`` writes every shard's pipeline before reading any answer, so
a multi-shard pull costs one round trip, not one per shard. ``retrying(what, fn)`` re-runs an
operation on connection errors, a loading or restarting server, and Cluster redirections, with
exponential backoff (``streamtrain.backoff``) and one log line per attempt, and raises
``StoreError`` when it gives up. A refusal (wrong password, unknown user, no permission, also
for a command a script runs, a certificate rejected, a database number the server does not
have) raises ``StoreAccessError`` at once: retrying cannot help. So does a URL whose scheme does
not match the port (``redis://`` on a TLS port, ``rediss://`` on a plain one), found by trying
the other protocol when the first attempts fail before any answer. No message carries a
password (``redact``).
"""
from __future__ import annotations

import contextlib
import inspect
import logging
import ssl
import threading
import time

import redis
import redis.retry
from redis.backoff import NoBackoff
from redis.crc import key_slot
from redis.exceptions import (AskError, AuthenticationError, BusyLoadingError, ClusterDownError, MovedError,
                              NoPermissionError, ResponseError, TryAgainError)

from streamtrain.backoff import STOPPED, Backoff
from streamtrain.errors import StoreAccessError, StoreError, StoreInterrupted

from . import redis_keys, redis_resp
from .redis_connection import ACL_NEEDS, protocol_mismatch, redact, section

try:
    from hiredis import pack_command as _pack_one

    def _pack(conn, commands):
        return [b"".join(redis_resp.pack(c) if redis_resp.has_runs(c) else _pack_one(tuple(c)) for c in commands)]
except ImportError:                   # redis-py's own packer
    def _pack(conn, commands):
        if any(redis_resp.has_runs(c) for c in commands):
            return [b"".join(redis_resp.pack(c) for c in commands)]
        return conn.pack_commands(commands)

log = logging.getLogger("streamtrain.store.redis")

TRANSIENT = (redis.ConnectionError, redis.TimeoutError, BusyLoadingError, ConnectionResetError,
             BrokenPipeError, OSError)
RETRY_REPLIES = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "LOADING", "MASTERDOWN")
# a script whose keys' slot is being moved to another node as it runs (Redis 7: "Script attempted to
# access a non local key in a cluster node script: ..."): routed again once the slots are read again
RETRY_WORDS = ("non local key in a cluster node",)
RETRY_ERRORS = (MovedError, AskError, TryAgainError, ClusterDownError)
REFUSED = (AuthenticationError, NoPermissionError, ssl.SSLCertVerificationError)
# error replies that say the same, also from a command a script runs (Redis 7.0 words those "ERR
# ... can't run this command"), and a database number the server does not have
REFUSED_REPLIES = ("NOPERM", "can't run this command", "no permissions to", "DB index is out of range",
                   "invalid DB index")
STOP_AFTER_S = 2.0      # a stop asked ends the retries once they have run this long (a blip is retried)


def get_connection_args(get_connection) -> tuple:
    """What to pass to ``ConnectionPool.get_connection``: redis-py < 5.3 needs a command name,
    later versions deprecate passing one (and may drop the parameter)."""
    param = inspect.signature(get_connection).parameters.get("command_name")
    return ("MGET",) if param is not None and param.default is inspect.Parameter.empty else ()


_GET_CONNECTION_ARGS = get_connection_args(redis.ConnectionPool.get_connection)


class Retry(Backoff):
    """Backoff settings of the store: first wait, cap, and how long to keep trying before raising."""

    def __init__(self, initial_s=0.05, max_s=2.0, give_up_s=30.0):
        super().__init__(initial_s, max_s, give_up_s)


def new_client(conn: dict, timeout_s) -> redis.Redis:
    """A client for redis-py arguments ``conn`` (``redis_connection``) without redis-py's retries."""
    # redis-py's own silent retries are off: ``Shards.retrying`` retries, logs and counts
    return redis.Redis(**conn, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                       retry=redis.retry.Retry(NoBackoff(), 0))


def refusal(err: BaseException) -> BaseException | None:
    """The error (or its cause) that says the server refuses us, if it is one."""
    while err is not None:
        if isinstance(err, REFUSED) or "CERTIFICATE_VERIFY_FAILED" in str(err) or (
                isinstance(err, ResponseError) and any(r in str(err) for r in REFUSED_REPLIES)):
            return err
        err = err.__cause__ or err.__context__
    return None


def _connection_refused(err: BaseException) -> bool:
    while err is not None:
        if isinstance(err, ConnectionRefusedError) or "Connection refused" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


def _default_connection(url: str) -> dict:
    kw = redis.connection.parse_url(url)
    return {"host": kw.get("host", "127.0.0.1"), "port": int(kw.get("port", 6379))}


class Shards:
    """Where each key lives. Standalone: ``shard_of_tag`` from redis_keys; Cluster: the slot map.

    ``connect(url)`` gives redis-py's connection arguments of a URL (user, password, TLS); a
    Cluster's other nodes are reached with its seed's arguments. Nothing connects until the
    first operation, so a store can be built while its servers are still starting.
    """

    def __init__(self, *, urls=None, cluster=None, timeout_s=5.0, retry: Retry | None = None, stats=None,
                 placement: str = "modulo", connect=_default_connection, label: str = "redis store",
                 hint=None):
        self.label = label                      # how messages name the client ("redis graph store")
        self.hint = hint or refusal_hint        # hint(refused): what to check after a refusal
        self.cluster = bool(cluster)
        self.urls = [redact(u) for u in ([cluster] if cluster else urls)]      # for messages
        self.placement = placement
        self.timeout_s = timeout_s
        self.retry = retry or Retry()
        self.stats = stats
        self._seeds = [connect(cluster)] if cluster else [connect(u) for u in urls]
        self.clients: list[redis.Redis] = []
        self.names: list[str] = []
        self._slot_shard: list[int] = []
        self._stale = False
        # the write-back store's flush thread shares these shards with the training thread: a
        # slot map read and the error count are made one thread at a time
        self._lock = threading.Lock()
        self.epoch = 0                  # +1 at each slot map read: routing caches compare it
        self.answered = False           # an operation succeeded (a protocol mismatch is ruled out)
        self._local = threading.local()     # ``give_up_within``: this thread's bound on retries
        self.stopped = None             # the job's "a stop was asked" (``watch``): ends a retry
        self.on_wait = None             # told what waits for the servers while a retry runs
        if not self.cluster:
            self.clients = [new_client(kw, timeout_s) for kw in self._seeds]
            self.names = [f"{kw['host']}:{kw['port']}" for kw in self._seeds]

    # ---- routing -----------------------------------------------------------------------
    def refresh(self) -> None:
        """Cluster: (re)read ``CLUSTER SLOTS`` from any node that answers (one thread at a time:
        the node list only grows, and a thread that waited reads the map again)."""
        if not self.cluster:
            return
        with self._lock:
            self._refresh()

    def _refresh(self) -> None:
        last = None
        for conn in [*self._seeds, *(self._node(n) for n in self.names)]:
            client = new_client(conn, self.timeout_s)
            try:
                slots = client.execute_command("CLUSTER SLOTS")
                break
            except TRANSIENT + (ResponseError,) as err:
                if refusal(err):
                    raise
                last = err
            finally:
                client.close()
        else:
            raise redis.ConnectionError(f"no cluster node answered: {last}")
        by_name = {n: i for i, n in enumerate(self.names)}
        table = [-1] * 16384
        for start, end, primary, *_ in slots:
            host = primary[0].decode() if isinstance(primary[0], bytes) else primary[0]
            name = f"{host or self._seeds[0]['host']}:{primary[1]}"
            if name not in by_name:
                by_name[name] = len(self.names)
                self.names.append(name)
                self.clients.append(new_client(self._node(name), self.timeout_s))
            for s in range(start, end + 1):
                table[s] = by_name[name]
        if -1 in table:
            raise redis.ConnectionError(f"cluster slot {table.index(-1)} has no node (CLUSTERDOWN)")
        self._slot_shard = table
        self.epoch += 1

    def _node(self, name: str) -> dict:
        host, port = name.rsplit(":", 1)
        return {**self._seeds[0], "host": host, "port": int(port)}

    def shard_of_tag(self, tag: str) -> int:
        if self.cluster:
            if not self._slot_shard:
                self.refresh()
            return self._slot_shard[key_slot(f"{{{tag}}}".encode())]
        return redis_keys.shard_of_tag(tag, len(self.clients), self.placement)

    def ready(self) -> bool:
        """Every shard answers PING (a Cluster whose slot map was never read is not ready)."""
        try:
            if self.cluster and not self._slot_shard:
                self.refresh()
            return bool(self.clients) and all(c.ping() for c in self.clients)
        except Exception:
            return False

    # ---- I/O ---------------------------------------------------------------------------
    def run(self, groups: dict[int, list[tuple]]) -> dict[int, list]:
        """Send every shard's pipeline, then read every answer; raise the first error reply."""
        conns, out, first_error = {}, {}, None
        try:
            for shard, commands in groups.items():
                if not commands:
                    continue
                conn = self.clients[shard].connection_pool.get_connection(*_GET_CONNECTION_ARGS)
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

    @contextlib.contextmanager
    def give_up_within(self, seconds: float):
        """Operations this thread runs inside retry for at most ``seconds`` (a request waits)."""
        before = getattr(self._local, "give_up_s", None)
        self._local.give_up_s = seconds
        try:
            yield
        finally:
            self._local.give_up_s = before

    def _retry(self) -> Retry:
        limit = getattr(self._local, "give_up_s", None)
        if limit is None or limit >= self.retry.give_up_s:
            return self.retry
        return Retry(self.retry.initial_s, max(self.retry.initial_s, min(self.retry.max_s, limit / 4)), limit)

    def retrying(self, what: str, fn):
        """Run ``fn()``; on a transient failure wait and run it again, until ``give_up_s``."""
        retry = self._retry()

        def attempt():
            if self._stale:                     # a Cluster may have moved slots meanwhile
                self._stale = False
                self.refresh()
            out = fn()
            self.answered = True
            return out

        started, waits = time.monotonic(), []

        def failed(err, attempt, pause):
            self._count_error()
            self._stale = self.cluster
            self._check_protocol(err)
            log.warning("%s: %s failed (%s: %s); retry %d in %.2f s, giving up after %.0f s",
                        self.label, what, type(err).__name__, redact(err), attempt, pause, retry.give_up_s)
            if self.on_wait is not None:
                waits.append(attempt)
                self.on_wait(f"{self.label}: {what}")

        def stopped():                          # a stop ends the retries (not a one-off blip's)
            return (self.stopped is not None and self.stopped()
                    and time.monotonic() - started >= STOP_AFTER_S)

        def give_up(err, attempt, waited):
            self._count_error()
            self._check_protocol(err)
            log.error("%s: %s failed after %d attempts in %.1f s: %s", self.label, what, attempt, waited,
                      redact(err))
            raise StoreError(f"{self.label}: {what} failed after {attempt} attempts in {waited:.1f} s "
                             f"({', '.join(self.names) or self._where()}): {redact(err)}") from err

        try:
            done = retry.retry(attempt, transient=_transient, on_retry=failed, on_give_up=give_up,
                               on_recovered=lambda n: log.warning("%s: %s succeeded after %d retries",
                                                                  self.label, what, n), stopped=stopped)
        except (redis.RedisError, OSError) as err:
            refused = refusal(err)
            if refused is not None:
                self._count_error()
                raise StoreAccessError(f"{self.label}: {self._where()} refused {what}: {redact(refused)} "
                                       f"({self.hint(refused)})") from None
            if isinstance(err, ResponseError):       # (out of memory, a read-only replica...)
                self._count_error()
                raise StoreError(f"{self.label}: {what}: {redact(err)}") from err
            raise
        finally:
            if waits and self.on_wait is not None:
                self.on_wait(None)
        if done is STOPPED:
            raise StoreInterrupted(f"{self.label}: {what}: stopped while {', '.join(self.names) or self._where()} "
                                   "did not answer")
        return done

    def _check_protocol(self, err: BaseException) -> None:
        """Before any answer, a failure that is not a refused connection may be a URL whose
        scheme does not match its port: try the other protocol; ``StoreAccessError`` if it answers."""
        if self.answered or isinstance(err, ResponseError) or _connection_refused(err):
            return
        for url, kw in zip(self.urls, self._seeds):
            found = protocol_mismatch(kw, min(1.0, self.timeout_s))
            if found:
                raise StoreAccessError(f"{self.label}: {url} {found}") from None

    def _count_error(self) -> None:
        if self.stats is not None:
            with self._lock:
                self.stats.errors += 1

    def _where(self) -> str:
        return ", ".join(url + (f" as user '{kw['username']}'" if kw.get("username") else "")
                         for url, kw in zip(self.urls, self._seeds))

    def close(self) -> None:
        for client in self.clients:
            client.close()


STORE_OPTION = section("store.")     # how refusal_hint names the options by default: store.<key>


def refusal_hint(refused: BaseException, name=STORE_OPTION, needs: str = ACL_NEEDS) -> str:
    """What to check after ``refused``, naming the options as ``name`` words them."""
    if isinstance(refused, AuthenticationError):
        return (f"check the user and password: {name('username')}, {name('password_env')}, "
                f"{name('password_file')} or the URL's user:password")
    if "DB index" in str(refused):
        return "the URL's database number is not one this server has: see its `databases` setting"
    if isinstance(refused, (NoPermissionError, ResponseError)):
        return f"the ACL user lacks a permission it needs ({needs})"
    return ("check the certificate options: " + ", ".join(map(name, ("ssl_ca_certs", "ssl_certfile",
                                                                      "ssl_keyfile", "ssl_cert_reqs"))))


def _transient(err: BaseException) -> bool:
    if refusal(err) is not None:
        return False
    if isinstance(err, ResponseError):
        return isinstance(err, RETRY_ERRORS) or str(err).startswith(RETRY_REPLIES) or any(
            w in str(err) for w in RETRY_WORDS)
    return isinstance(err, TRANSIENT)
