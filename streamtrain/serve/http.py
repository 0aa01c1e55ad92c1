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
    settings = service.settings
    retry_after = str(settings["retry_after_s"]).encode()
    limit = settings["max_body_bytes"]
    pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="serve")   # plain: cheaper than anyio's
    metrics.watch_replica(lambda: getattr(service.source, "replica", None))

    def error(status: int, kind: str, where: str, message: str):
        metrics.errors.labels(kind).inc()
        headers = JSON_TYPE + [(b"retry-after", retry_after)] if status == 503 else JSON_TYPE
        return status, headers, encode_json({"error": kind, "where": where, "message": message})

    async def answer(endpoint: str, work):
        """``work()`` -> (status, headers, body); errors mapped to their status, latency observed."""
        t0 = time.perf_counter()
        try:
            return await work()
        except BadRequest as err:
            return error(err.status, err.kind, err.where, err.message)
        except NotReady as err:         # (NonFinite: the model's output is NaN or infinite)
            return error(503, err.kind, "", str(err))
        except StoreError as err:
            log.warning("parameter store unavailable: %s", err)
            return error(503, "store_unavailable", "", f"parameter store unavailable: {err}")
        except _Disconnected:
            raise
        except Exception as err:        # a bug, never the client's input: logged with its trace
            log.exception("internal error on %s", endpoint)
            return error(500, "internal", "", str(err))
        finally:
            metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)

    async def read_body(scope, receive) -> tuple[bytes, str]:
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

    async def predict_work(scope, receive):
        body, content_type = await read_body(scope, receive)
        out, finish = None, functools.partial(service.predict, body, content_type)
        if len(body) <= INLINE_BYTES:
            try:
                out = service.predict(body, content_type, may_read=False)
            except MustWait as wait:
                finish = wait.resume or finish
        if out is None:
            out = await loop().run_in_executor(pool, finish)
        n = len(out["predictions"])
        metrics.records.observe(n)
        metrics.predictions.inc(n)
        metrics.age.observe(out["max_param_age_s"])
        metrics.step.set(out["step"])
        metrics.cache_counts(*service.source.hit_counts())
        return 200, JSON_TYPE, encode_json(out)

    async def predict(scope, receive, send):
        try:
            status, headers, body = await answer("predict", lambda: predict_work(scope, receive))
        except _Disconnected:
            return
        await send({"type": "http.response.start", "status": status,
                    "headers": headers + [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def model(request):
        async def work():
            return 200, JSON_TYPE, encode_json(await loop().run_in_executor(pool, service.describe))
        status, headers, body = await answer("model", work)
        return Response(body, status, headers={k.decode(): v.decode() for k, v in headers})

    async def healthz(request):
        return PlainTextResponse("ok\n")

    async def readyz(request):
        ok, reason = await loop().run_in_executor(pool, service.ready)
        return PlainTextResponse(reason + "\n", 200 if ok else 503,
                                 headers=None if ok else {"Retry-After": retry_after.decode()})

    async def prometheus(request):
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    async def predict_other(request):       # GET etc. on /v1/predict
        return Response(status_code=405, headers={"Allow": "POST"})

    routes = [Route("/v1/predict", predict_other, methods=["GET", "HEAD", "PUT", "DELETE", "PATCH"]),
              Route("/v1/model", model), Route("/healthz", healthz), Route("/readyz", readyz)]
    if expose_metrics:
        routes.append(Route("/metrics", prometheus))
    rest = Starlette(routes=routes)

    async def app(scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "POST" and scope["path"] == "/v1/predict":
            await predict(scope, receive, send)
        else:
            await rest(scope, receive, send)

    return app


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
