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

The server itself (``MetricsServer``, with prometheus-client and wsgiref) is in
``metrics_http.py``, imported only by a job with metrics on.
"""
from __future__ import annotations

import errno
import time

from .errors import ConfigError


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
    from .lag import source_lag
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


def address_error(section: str, host: str, port: int, err: OSError) -> ConfigError:
    """The config error of a listening address that cannot be bound (in use, not local, ...)."""
    why = ("is already in use by another process (pick another port, or 0 for any free one)"
           if err.errno == errno.EADDRINUSE else f"cannot be listened on: {err.strerror or err}")
    return ConfigError([(f"{section}.port", f"{host}:{port} {why}")])

