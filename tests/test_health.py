"""The metrics port: prometheus-client's WSGI app for /metrics beside /healthz and /readyz."""
from __future__ import annotations

import gzip
import urllib.request

from prometheus_client import CollectorRegistry, Counter

from streamtrain.health import Health, MetricsServer
from tests.fixtures_prometheus import http_get


def test_probes_metrics_and_not_found():
    registry = CollectorRegistry()
    Counter("streamtrain_batches_total", "batches", registry=registry).inc(3)
    Counter("other_total", "other", registry=registry)
    state = {"ready": (False, "store not connected"), "waiting": None}
    health = Health(stall_seconds=0.001, ready=lambda: state["ready"], waiting=lambda: state["waiting"])
    server = MetricsServer(registry, health, port=0).start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        assert http_get(base + "/readyz") == (503, "store not connected\n")
        code, text = http_get(base + "/healthz")
        assert code == 503 and text.startswith("stalled")               # no step within 1 ms
        state.update(ready=(True, "ok"), waiting="the store to answer (step)")
        assert http_get(base + "/readyz") == (200, "ok\n")
        code, text = http_get(base + "/healthz")
        assert code == 200 and "waiting for the store" in text           # an outage is not a stall
        code, text = http_get(base + "/metrics")
        assert code == 200 and "streamtrain_batches_total 3.0" in text
        code, text = http_get(base + "/metrics?name[]=streamtrain_batches_total")   # the library's filter
        assert "streamtrain_batches_total 3.0" in text and "other_total" not in text
        req = urllib.request.Request(base + "/metrics", headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert b"streamtrain_batches_total 3.0" in gzip.decompress(resp.read())
        assert http_get(base + "/nope") == (404, "not found: try /metrics, /healthz, /readyz\n")
    finally:
        server.stop()
