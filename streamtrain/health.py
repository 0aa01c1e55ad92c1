"""The HTTP side of the daemon, on the metrics port: ``/metrics``, ``/healthz``, ``/readyz``.

* ``/healthz`` — 200 while the process is up and the training loop has made progress within
  ``stall_seconds`` (a heartbeat the loop beats after every step); 503 once it stalls.
* ``/readyz`` — 200 when the parameter store and the reader say they are connected; 503 else.
* ``/metrics`` — the Prometheus text exposition of the registry it was given.

Bound to ``metrics.host`` (127.0.0.1 by default; ``0.0.0.0`` in containers) and
``metrics.port`` (0 = any free port, logged and available as ``server.port``).
"""
from __future__ import annotations

import contextlib

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

log = logging.getLogger("streamtrain.http")


class Health:
    """Liveness from a heartbeat; readiness from a callable returning (ok, reason)."""

    def __init__(self, stall_seconds: float = 300.0, ready=None, idle=None):
        self.stall_seconds = float(stall_seconds)
        self.last_beat = time.monotonic()
        self.ready_check = ready
        self.idle = idle              # callable: True when the source has nothing left to train

    def beat(self, *_args) -> None:
        self.last_beat = time.monotonic()

    def alive(self) -> tuple[bool, str]:
        idle = time.monotonic() - self.last_beat
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
    from .metrics import source_lag
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
    """A small threaded HTTP server; ``start()`` binds (and picks the port when it is 0)."""

    def __init__(self, registry, health: Health, host: str = "127.0.0.1", port: int = 9464, lock=None):
        self.registry, self.health = registry, health
        self.lock = lock if lock is not None else contextlib.nullcontext()
        self.host, self.port = host, int(port)
        self._httpd = None
        self._thread = None

    def start(self) -> "MetricsServer":
        handler = type("Handler", (_Handler,), {"server_ref": self})
        self._httpd = ThreadingHTTPServer((self.host, self.port), handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        log.info("metrics, /healthz and /readyz on http://%s:%d/", self.host, self.port)
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


class _Handler(BaseHTTPRequestHandler):
    server_ref: MetricsServer

    def do_GET(self):  # noqa: N802 (http.server's naming)
        path = self.path.split("?", 1)[0]
        srv = self.server_ref
        if path == "/metrics":
            with srv.lock:
                body = generate_latest(srv.registry)
            self._send(200, body, CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._probe(*srv.health.alive())
        elif path == "/readyz":
            self._probe(*srv.health.ready())
        else:
            self._send(404, b"not found: try /metrics, /healthz, /readyz\n")

    def _probe(self, ok: bool, reason: str) -> None:
        self._send(200 if ok else 503, (reason + "\n").encode())

    def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):
        log.debug("%s %s", self.address_string(), fmt % args)
