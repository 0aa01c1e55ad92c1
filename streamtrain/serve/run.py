"""The two ways to serve: ``streamtrain serve`` (its own process, parameters from Redis) and
beside a training job (``streamtrain run`` with ``serve.enabled``: its own parameters)."""
from __future__ import annotations

import gc
import logging
import sys

from streamtrain.reader_format import job_reader
from streamtrain.health import address_error
from streamtrain.logs import log_start

from .settings import require_extra, serve_settings

log = logging.getLogger("streamtrain.serve")


def serve_forever(config: dict, restore: str | None = None) -> int:
    """``streamtrain serve``: build the server and run it until SIGTERM/SIGINT; with ``restore``
    (a checkpoint directory, or a ``checkpoint.dir`` for its latest) from that saved model."""
    require_extra("streamtrain serve")
    from streamtrain.metrics import ServeMetrics
    from .http import Server, make_app
    from .service import Service, StoreModel

    settings = serve_settings(config)
    log_start(log, f"serving job {config.get('name', '')!r}")
    # the background refresher holds the GIL in short bursts: hand it back to the event loop
    # after 0.5 ms instead of Python's default 5 ms, or a request arriving meanwhile waits that long
    sys.setswitchinterval(0.0005)
    if restore:
        from .saved import CheckpointModel
        source = CheckpointModel(config, settings, restore)
        log.info("serving the saved model %s", source.store_name())
    else:
        source = StoreModel(config, settings)
        source.built.append(_freeze)
    _freeze()
    try:
        service = Service(source, settings, job_reader(config))
        ok, reason = service.ready()
        if not ok:
            log.warning("not ready yet (%s): /readyz answers 503 until it is", reason)
        metrics = ServeMetrics()
        server = _bound(lambda: Server(make_app(service, metrics), settings["host"], settings["port"], settings,
                                       count=_refusals(metrics)), settings)
        server.run()
    finally:
        source.close()
    return 0


def _bound(make, settings):
    """``make()`` (a server that binds its port); a port in use is a config error (exit 2)."""
    try:
        return make()
    except OSError as err:
        raise address_error("serve", settings["host"], settings["port"], err) from None


def _refusals(metrics):
    """What counts the connections and requests the server's limits refused (``limits.py``)."""
    return lambda kind: metrics.errors.labels(kind).inc()


def _freeze() -> None:
    """Move every object alive now (modules, the graph, numba's compiled functions: ~10^5)
    out of the cyclic garbage collector's sight (``gc.freeze``): a full collection scanned
    them all, holding the GIL for 65-200 ms, several times a minute, and every request
    arriving meanwhile waited for it (BENCHMARKS.md, Serving). Garbage first, so none is kept."""
    gc.collect()
    gc.freeze()


def attach(job, config: dict, registry=None):
    """Hooks a training job needs for serving; returns a callable that stops what it started.

    A Redis store: the job publishes its fields and step for servers (always). With
    ``serve.enabled``: a server in a thread answers from the job's own parameters."""
    if config.get("store", {}).get("backend") == "redis":
        from .publish import Publisher          # redis-py is imported only by jobs that use it
        job.hooks.append(Publisher())
    settings = serve_settings(config)
    if not settings["enabled"]:
        return lambda: None
    from streamtrain.metrics import ServeMetrics      # prometheus-client: only when serving
    from .http import Server, make_app
    from .service import JobModel, Service

    service = Service(JobModel(job, settings["store_give_up_s"]), settings,
                      job_reader(config))
    metrics = ServeMetrics(registry)
    server = _bound(lambda: Server(make_app(service, metrics, expose_metrics=registry is None),
                                   settings["host"], settings["port"], settings, count=_refusals(metrics)),
                    settings).start()
    job.serve_port = server.port
    return server.stop
