"""The HTTP side: uvicorn serving a lean ASGI app for ``POST /v1/predict`` in front of a
Starlette app for the rest.

``POST /v1/predict`` (JSON records or ``text/plain`` lines), ``GET /v1/model``, ``GET /healthz``
(the process answers), ``GET /readyz`` (the model can answer: fields known, store reachable),
``GET /metrics`` (the server's own registry; under ``streamtrain run`` they are on the job's
metrics port instead). Errors are JSON ``{"error", "where", "message"}``: 400 for what a client
sent wrong, 413 for too much, 503 with ``Retry-After`` while the store is unreachable or the
model not ready.

A prediction is a fraction of a millisecond of CPU, less than the hop to a thread and back, so
a small request whose parameters are all in the cache is answered on the event loop itself
(``Service.predict(may_read=False)``); one that must wait for the store (rows not cached, or
older than the staleness bound) or a trainer's step, and every large one (over
``INLINE_BYTES``), runs in a worker thread, so those still overlap.
"""
from __future__ import annotations

import asyncio
import functools
import logging
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from streamtrain.errors import StoreError

from .cache import MustWait
from .inputs import BadRequest, TooLarge, encode_json
from .limits import Limits, accept_burst, connection_cap, guarded
from .service import NotReady, Service

log = logging.getLogger("streamtrain.serve")
WORKERS = 8               # request threads (numpy releases the GIL in the larger operations)
INLINE_BYTES = 16 << 10   # bodies up to this size are tried on the event loop (a record is ~0.5 kB)
JSON_TYPE = [(b"content-type", b"application/json")]
loop = asyncio.get_running_loop


class _Disconnected(Exception):
    """The client went away before its body arrived."""


def make_app(service: Service, metrics, *, expose_metrics: bool = True):
    """The ASGI app: ``POST /v1/predict`` answered by ``_Predictions``, the rest by Starlette."""
    handler = _Predictions(service, metrics)
    rest = Starlette(routes=handler.routes(expose_metrics))

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/predict":
            await handler.predict(scope, receive, send)
        else:
            await rest(scope, receive, send)

    return app


async def read_body(scope, receive, limit: int) -> tuple[bytes, str]:
    """The request's body and content type; ``TooLarge`` past ``limit`` bytes (announced or read)."""
    content_type = b""
    for name, value in scope["headers"]:
        if name == b"content-length":
            if value.isdigit() and int(value) > limit:
                raise TooLarge(f"body of {value.decode()} bytes (serve.max_body_bytes = {limit})")
        elif name == b"content-type":
            content_type = value
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise _Disconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"body over {limit} bytes (serve.max_body_bytes)")
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), content_type.decode("latin-1")


class _Predictions:
    """The endpoints of one service: each answers through ``answer`` (errors mapped to their
    status, latency observed); the store and ``describe`` are reached from a worker thread."""

    def __init__(self, service: Service, metrics):
        self.service, self.metrics = service, metrics
        self.retry_after = str(service.settings["retry_after_s"]).encode()
        self.limit = service.settings["max_body_bytes"]
        self.pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="serve")   # plain: cheaper than anyio's
        metrics.watch_replica(lambda: getattr(service.source, "replica", None))

    def error(self, status: int, kind: str, where: str, message: str):
        self.metrics.errors.labels(kind).inc()
        headers = JSON_TYPE + [(b"retry-after", self.retry_after)] if status == 503 else JSON_TYPE
        return status, headers, encode_json({"error": kind, "where": where, "message": message})

    async def answer(self, endpoint: str, work):
        """``work()`` -> (status, headers, body); errors mapped to their status, latency observed."""
        t0 = time.perf_counter()
        try:
            return await work()
        except BadRequest as err:
            return self.error(err.status, err.kind, err.where, err.message)
        except NotReady as err:         # (NonFinite: the model's output is NaN or infinite)
            return self.error(503, err.kind, "", str(err))
        except StoreError as err:
            log.warning("parameter store unavailable: %s", err)
            return self.error(503, "store_unavailable", "", f"parameter store unavailable: {err}")
        except _Disconnected:
            raise
        except Exception as err:        # a bug, never the client's input: logged with its trace
            log.exception("internal error on %s", endpoint)
            return self.error(500, "internal", "", str(err))
        finally:
            self.metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)

    async def predict_work(self, scope, receive):
        body, content_type = await read_body(scope, receive, self.limit)
        service = self.service
        out, finish = None, functools.partial(service.predict, body, content_type)
        if len(body) <= INLINE_BYTES:
            try:
                out = service.predict(body, content_type, may_read=False)
            except MustWait as wait:
                finish = wait.resume or finish
        if out is None:
            out = await loop().run_in_executor(self.pool, finish)
        n, metrics = len(out["predictions"]), self.metrics
        metrics.records.observe(n)
        metrics.predictions.inc(n)
        metrics.age.observe(out["max_param_age_s"])
        metrics.step.set(out["step"])
        metrics.cache_counts(*service.source.hit_counts())
        return 200, JSON_TYPE, encode_json(out)

    async def predict(self, scope, receive, send):
        try:
            status, headers, body = await self.answer("predict", lambda: self.predict_work(scope, receive))
        except _Disconnected:
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": headers + [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def model(self, request):
        async def work():
            return 200, JSON_TYPE, encode_json(await loop().run_in_executor(self.pool, self.service.describe))
        status, headers, body = await self.answer("model", work)
        return Response(body, status, headers={k.decode(): v.decode() for k, v in headers})

    async def healthz(self, request):
        return PlainTextResponse("ok\n")

    async def readyz(self, request):
        ok, reason = await loop().run_in_executor(self.pool, self.service.ready)
        return PlainTextResponse(reason + "\n", 200 if ok else 503,
                                 headers=None if ok else {"Retry-After": self.retry_after.decode()})

    async def prometheus(self, request):
        return Response(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def predict_other(self, request):       # GET etc. on /v1/predict
        return Response(status_code=405, headers={"Allow": "POST"})

    def routes(self, expose_metrics: bool) -> list:
        routes = [Route("/v1/predict", self.predict_other, methods=["GET", "HEAD", "PUT", "DELETE", "PATCH"]),
                  Route("/v1/model", self.model), Route("/healthz", self.healthz), Route("/readyz", self.readyz)]
        if expose_metrics:
            routes.append(Route("/metrics", self.prometheus))
        return routes


def _stopped(signum, frame) -> None:
    """The signal uvicorn re-raises after its graceful stop: already handled."""


class Server:
    """uvicorn on a socket bound here (port 0 picks a free one: ``server.port``), its HTTP
    protocol guarded by the ``serve`` settings' connection limits (``limits.py``; the defaults
    without ``settings``); ``count(kind)`` is called for each connection or request refused."""

    def __init__(self, app, host: str, port: int, settings: dict | None = None, count=lambda kind: None):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP said explicitly: asyncio turns Nagle off (TCP_NODELAY) only on connections
        # whose socket says so, and an accepted one inherits the listener's protocol number; with
        # proto 0 a response's body waited ~40 ms for the client's delayed ACK of its headers
        self.sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = host, self.sock.getsockname()[1]
        wanted = Limits.of(settings) if settings is not None else Limits()
        reserve = settings["reserve_fds"] if settings is not None else 64
        self.limits = wanted._replace(max_connections=connection_cap(wanted.max_connections, reserve))
        self.uvicorn = uvicorn.Server(uvicorn.Config(
            app, log_level="warning", access_log=False, proxy_headers=False, timeout_graceful_shutdown=5,
            http=guarded(AutoHTTPProtocol, self.limits, count), timeout_keep_alive=self.limits.keep_alive_s,
            h11_max_incomplete_event_size=2 * self.limits.max_header_bytes,   # the guard's 431 comes first
            backlog=accept_burst(self.limits.max_connections)))
        self._thread = None

    def run(self) -> None:
        """In the foreground (``streamtrain serve``): SIGTERM/SIGINT stop it gracefully (no new
        connections, requests in flight finished) and it returns. uvicorn re-raises the signal
        it caught once it has stopped; the handlers in place then ignore it, so the process
        exits 0 instead of dying of the signal."""
        previous = {sig: signal.signal(sig, _stopped) for sig in (signal.SIGTERM, signal.SIGINT)}
        log.info("serving predictions on http://%s:%d/v1/predict", self.host, self.port)
        try:
            self.uvicorn.run(sockets=[self.sock])
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            log.info("prediction server stopped")

    def start(self) -> "Server":
        """In a thread beside a training job."""
        self._thread = threading.Thread(target=self.uvicorn.run, kwargs={"sockets": [self.sock]},
                                        name="serve-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.uvicorn.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        log.info("serving predictions on http://%s:%d/v1/predict", self.host, self.port)
        return self

    def stop(self) -> None:
        self.uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.sock.close()
