"""The HTTP side of the daemon, on the metrics port: ``/metrics``, ``/healthz``, ``/readyz``.

* ``/healthz`` — 200 while the process is up and the training loop has made progress within
  ``stall_seconds`` (a heartbeat the loop beats after every step), or has nothing to do (caught
  up with its stream, or waiting for an unreachable store: restarting would not help); 503 once
  it stalls.
* ``/readyz`` — 200 when the parameter store and the reader say they are connected; 503 else.
* ``/metrics`` — the Prometheus text exposition of the registry it was given.

Bound to ``metrics.host`` (127.0.0.1 by default; ``0.0.0.0`` in containers) and
``metrics.port`` (0 = any free port, logged and available as ``server.port``). A thread per
connection, at most ``metrics.max_connections`` of them (one more is answered 503 at once); a
request must arrive whole within ``metrics.timeout_s`` (else 408), so slow or silent clients
hold neither threads nor file descriptors for long.
"""
from __future__ import annotations

import contextlib
import errno
import io
import logging
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from .errors import ConfigError

# how often the server's loop looks whether ``stop()`` asked it to end (socketserver's default,
# 0.5 s, made every job's exit wait 0.25 s on average, a tenth of a 1M-row LR run)
STOP_POLL_S = 0.02
log = logging.getLogger("streamtrain.http")


class Health:
    """Liveness from a heartbeat; readiness from a callable returning (ok, reason)."""

    def __init__(self, stall_seconds: float = 300.0, ready=None, idle=None, waiting=None):
        self.stall_seconds = float(stall_seconds)
        self.last_beat = time.monotonic()
        self.ready_check = ready
        self.idle = idle              # callable: True when the source has nothing left to train
        self.waiting = waiting        # callable: what waits for an unreachable store or broker, or None

    def beat(self, *_args) -> None:
        self.last_beat = time.monotonic()

    def alive(self) -> tuple[bool, str]:
        idle = time.monotonic() - self.last_beat
        waiting = self.waiting() if self.waiting is not None else None
        if waiting:
            return True, f"ok: waiting for {waiting}; last step {idle:.0f}s ago"
        if 0 < self.stall_seconds < idle and not self._caught_up():   # 0: never called stalled
            return False, f"stalled: no step for {idle:.0f}s (limit {self.stall_seconds:.0f}s)"
        return True, f"ok: last step {idle:.1f}s ago"

    def _caught_up(self) -> bool:
        try:
            return bool(self.idle and self.idle())
        except Exception:
            return False

    def ready(self) -> tuple[bool, str]:
        if self.ready_check is None:
            return True, "ok"
        try:
            return self.ready_check()
        except Exception as err:      # a probe answers, it does not crash
            return False, f"readiness check failed: {err}"


def caught_up(source) -> bool:
    """A source that reports lag and has none is waiting for data, not stalled."""
    from .metrics_scrape import source_lag
    lag = source_lag(source)
    return lag is not None and all(v == 0 for v in lag.values())


def job_readiness(job):
    """Readiness of a job: its store and its source (each asked only if it can tell)."""
    def check() -> tuple[bool, str]:
        for name, part in (("store", job.store), ("reader", job.source)):
            probe = getattr(part, "ready", None)
            if callable(probe) and not probe():
                return False, f"{name} not connected"
        return True, "ok"
    return check


class MetricsServer:
    """prometheus-client's WSGI app for ``/metrics`` beside the two probes, on a threaded WSGI
    server; ``start()`` binds (and picks the port when it is 0)."""

    def __init__(self, registry, health: Health, host: str = "127.0.0.1", port: int = 9464, lock=None,
                 max_connections: int = 32, timeout_s: float = 10.0):
        self.registry, self.health = registry, health
        self.max_connections, self.timeout_s = max_connections, timeout_s
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.host, self.port = host, int(port)
        self._metrics_app = make_wsgi_app(registry)
        self._httpd = None
        self._thread = None

    def start(self) -> "MetricsServer":
        try:
            self._httpd = make_server(self.host, self.port, self.app, _BoundedServer, handler_class=_QuietHandler)
        except OSError as err:
            raise address_error("metrics", self.host, self.port, err) from None
        self._httpd.max_connections, self._httpd.timeout_s = self.max_connections, self.timeout_s
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(STOP_POLL_S,), name="metrics-http",
                                        daemon=True)
        self._thread.start()
        log.info("metrics, /healthz and /readyz on http://%s:%d/", self.host, self.port)
        return self

    def app(self, environ, start_response):
        """The WSGI app: ``/metrics`` (one step's updates seen whole), ``/healthz``, ``/readyz``."""
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            with self.lock:
                return self._metrics_app(environ, start_response)
        probe = {"/healthz": self.health.alive, "/readyz": self.health.ready}.get(path)
        ok, text = probe() if probe is not None else (None, "not found: try /metrics, /healthz, /readyz")
        status = "404 Not Found" if ok is None else "200 OK" if ok else "503 Service Unavailable"
        body = (text + "\n").encode()
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                ("Content-Length", str(len(body)))])
        return [body]

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


def address_error(section: str, host: str, port: int, err: OSError) -> ConfigError:
    """The config error of a listening address that cannot be bound (in use, not local, ...)."""
    why = ("is already in use by another process (pick another port, or 0 for any free one)"
           if err.errno == errno.EADDRINUSE else f"cannot be listened on: {err.strerror or err}")
    return ConfigError([(f"{section}.port", f"{host}:{port} {why}")])


def _status_line(status: str, text: str) -> bytes:
    body = (text + "\n").encode()
    return (f"HTTP/1.0 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


class _BoundedServer(ThreadingWSGIServer):
    """A thread per connection, ``max_connections`` at most: one more is answered 503 and closed."""
    max_connections, timeout_s = 32, 10.0
    _open = 0
    _count_lock = threading.Lock()

    def process_request(self, request, client_address):
        with self._count_lock:
            full = self._open >= self.max_connections
            self._open += not full
        if full:
            request.settimeout(1.0)
            refused = f"too many connections (metrics.max_connections = {self.max_connections})"
            with contextlib.suppress(OSError):
                request.sendall(_status_line("503 Service Unavailable", refused))
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._count_lock:
                self._open -= 1

    def handle_error(self, request, client_address):      # a client's broken connection: not a traceback
        log.debug("metrics port: connection from %s failed", client_address, exc_info=True)

    _count_lock = threading.Lock()


class _Deadline(io.RawIOBase):
    """A socket's reads, all due by one deadline: a request sent a byte at a time gets no more
    time than one sent at once (a per-read timeout alone would let it last for ever)."""

    def __init__(self, sock, seconds: float):
        self.sock, self.seconds, self.deadline = sock, seconds, time.monotonic() + seconds

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not received in time")
        self.sock.settimeout(left)
        try:
            return self.sock.recv_into(buf)
        finally:
            self.sock.settimeout(self.seconds)              # writes: as long again per send


class _QuietHandler(WSGIRequestHandler):
    def setup(self):
        super().setup()
        self.rfile = io.BufferedReader(_Deadline(self.connection, self.server.timeout_s))

    def handle(self):
        try:
            super().handle()
        except TimeoutError:
            late = f"request not received within metrics.timeout_s = {self.server.timeout_s:g} s"
            with contextlib.suppress(OSError):
                self.wfile.write(_status_line("408 Request Timeout", late))
        except ConnectionError:
            pass

    def log_message(self, fmt, *args):
        log.debug("%s %s", self.address_string(), fmt % args)
