"""The HTTP side: a Starlette app served by uvicorn.

``POST /v1/predict`` (JSON records or ``text/plain`` lines), ``GET /v1/model``, ``GET /healthz``
(the process answers), ``GET /readyz`` (the model can answer: fields known, store reachable),
``GET /metrics`` (the server's own registry; under ``streamtrain run`` they are on the job's
metrics port instead). Errors are JSON ``{"error", "where", "message"}``: 400 for what a client
sent wrong, 413 for too much, 503 with ``Retry-After`` while the store is unreachable or the
model not ready. Parsing and predicting run in worker threads, so requests are concurrent.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from streamtrain.errors import StoreError

from .inputs import BadRequest, TooLarge
from .service import NotReady, Service

log = logging.getLogger("streamtrain.serve")
WORKERS = 8               # request threads (numpy releases the GIL in the larger operations)
loop = asyncio.get_running_loop


def make_app(service: Service, metrics, *, expose_metrics: bool = True) -> Starlette:
    settings = service.settings
    retry_after = str(settings["retry_after_s"])
    pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="serve")   # plain: cheaper than anyio's

    def unavailable(kind: str, message: str) -> Response:
        metrics.errors.labels(kind).inc()
        return JSONResponse({"error": kind, "where": "", "message": message}, 503,
                            headers={"Retry-After": retry_after})

    async def read_body(request) -> bytes:
        limit = settings["max_body_bytes"]
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise TooLarge(f"body of {declared} bytes (serve.max_body_bytes = {limit})")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"body over {limit} bytes (serve.max_body_bytes)")
            chunks.append(chunk)
        return b"".join(chunks)

    async def guarded(endpoint: str, work):
        t0 = time.perf_counter()
        try:
            return await work()
        except BadRequest as err:
            metrics.errors.labels(err.kind).inc()
            return JSONResponse(err.body(), err.status)
        except NotReady as err:
            return unavailable("not_ready", str(err))
        except StoreError as err:
            log.warning("parameter store unavailable: %s", err)
            return unavailable("store_unavailable", f"parameter store unavailable: {err}")
        except ClientDisconnect:
            return Response(status_code=499)
        except Exception as err:        # a bug, never the client's input: logged with its trace
            log.exception("internal error on %s", endpoint)
            metrics.errors.labels("internal").inc()
            return JSONResponse({"error": "internal", "where": "", "message": str(err)}, 500)
        finally:
            metrics.latency.labels(endpoint).observe(time.perf_counter() - t0)

    async def predict(request):
        async def work():
            body = await read_body(request)
            out = await loop().run_in_executor(pool, service.predict, body, request.headers.get("content-type", ""))
            n = len(out["predictions"])
            metrics.records.observe(n)
            metrics.predictions.inc(n)
            metrics.age.observe(out["max_param_age_s"])
            metrics.step.set(out["step"])
            metrics.cache_counts(*service.source.hit_counts())
            return JSONResponse(out)
        return await guarded("predict", work)

    async def model(request):
        async def work():
            return JSONResponse(await loop().run_in_executor(pool, service.describe))
        return await guarded("model", work)

    async def healthz(request):
        return PlainTextResponse("ok\n")

    async def readyz(request):
        ok, reason = await loop().run_in_executor(pool, service.ready)
        return PlainTextResponse(reason + "\n", 200 if ok else 503,
                                 headers=None if ok else {"Retry-After": retry_after})

    async def prometheus(request):
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    routes = [Route("/v1/predict", predict, methods=["POST"]), Route("/v1/model", model),
              Route("/healthz", healthz), Route("/readyz", readyz)]
    if expose_metrics:
        routes.append(Route("/metrics", prometheus))
    return Starlette(routes=routes)


def _stopped(signum, frame) -> None:
    """The signal uvicorn re-raises after its graceful stop: already handled."""


class Server:
    """uvicorn on a socket bound here (port 0 picks a free one: ``server.port``)."""

    def __init__(self, app, host: str, port: int):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP said explicitly: asyncio turns Nagle off (TCP_NODELAY) only on connections
        # whose socket says so, and an accepted one inherits the listener's protocol number; with
        # proto 0 a response's body waited ~40 ms for the client's delayed ACK of its headers
        self.sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.host, self.port = host, self.sock.getsockname()[1]
        self.uvicorn = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, proxy_headers=False,
                                                     timeout_graceful_shutdown=5))
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
