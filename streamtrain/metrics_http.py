"""The metrics port's server: prometheus-client's ``/metrics`` app beside ``/healthz`` and
``/readyz`` (``health.py`` says what each answers), a thread per connection, bounded.

Imported only by a job with metrics on (``daemon.serve``), so one without imports neither
prometheus-client nor wsgiref's server.
"""
from __future__ import annotations

import contextlib
import io
import logging
import os
import selectors
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from .health import Health, address_error

log = logging.getLogger("streamtrain.http")


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
        self._wake = None           # a pipe whose write end wakes the server's loop to stop

    def start(self) -> "MetricsServer":
        try:
            self._httpd = make_server(self.host, self.port, self.app, _BoundedServer, handler_class=_QuietHandler)
        except OSError as err:
            raise address_error("metrics", self.host, self.port, err) from None
        self._httpd.max_connections, self._httpd.timeout_s = self.max_connections, self.timeout_s
        self.port = self._httpd.server_address[1]
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._httpd.serve_until_stopped, args=(self._wake[0],),
                                        name="metrics-http", daemon=True)
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
        """The loop is woken and ends at once (no poll to wait for), then the socket closes."""
        if self._httpd is not None:
            self._httpd.stopping = True
            os.write(self._wake[1], b"\0")
            self._thread.join()
            self._httpd.server_close()
            for fd in self._wake:
                os.close(fd)
            self._httpd = None


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

    stopping = False

    def serve_until_stopped(self, wake_fd: int) -> None:
        """socketserver's ``serve_forever`` without its poll: the loop sleeps until a connection
        arrives or ``wake_fd`` is written after ``stopping`` is set (a job's exit then waits for
        no poll: with ``serve_forever(0.02)`` it waited 3-11 ms, with socketserver's default
        0.5 s a quarter of a second on average); no wake-ups meanwhile."""
        with selectors.DefaultSelector() as selector:
            selector.register(self, selectors.EVENT_READ)
            selector.register(wake_fd, selectors.EVENT_READ)
            while not self.stopping:
                ready = selector.select()
                if not self.stopping and any(key.fileobj is self for key, _ in ready):
                    self._handle_request_noblock()       # accepts, a thread handles it

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
