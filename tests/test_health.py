"""The metrics port: prometheus-client's WSGI app for /metrics beside /healthz and /readyz."""
from __future__ import annotations

import gzip
import urllib.request

from prometheus_client import CollectorRegistry, Counter

from streamtrain.health import Health
from streamtrain.metrics_http import MetricsServer
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


def _read_until_closed(conn, limit_s: float = 6.0) -> tuple[bytes, float]:
    import socket
    import time
    t0, got = time.monotonic(), b""
    conn.settimeout(limit_s)
    try:
        while chunk := conn.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        raise AssertionError(f"the metrics port kept the connection open over {limit_s} s (got {got[:200]!r})") from None
    return got, time.monotonic() - t0


def test_slow_and_surplus_connections_do_not_hold_the_metrics_port():
    """Issue 24 item 3: a request that never completes (slowloris) is cut off after timeout_s,
    even one sent a byte at a time; connections over max_connections are answered 503 at once;
    a probe answers again as soon as the slow ones are gone. Each bound is a share or a multiple
    of timeout_s, with room for a loaded machine: 'at once' is under half of it, 'cut off' well
    before the request would have ended by itself."""
    import socket
    import time
    timeout_s = 2.0
    server = MetricsServer(CollectorRegistry(), Health(), port=0, max_connections=4, timeout_s=timeout_s).start()
    addr = ("127.0.0.1", server.port)
    try:
        held = [socket.create_connection(addr) for _ in range(4)]
        for conn in held:
            conn.sendall(b"GET /healthz HTTP/1.1\r\n")                    # never finished
        deadline = time.monotonic() + 30
        while server._httpd._open < 4:                                   # the server holds all four
            assert time.monotonic() < deadline, f"{server._httpd._open} of 4 connections taken"
            time.sleep(0.01)
        with socket.create_connection(addr) as extra:
            got, took = _read_until_closed(extra)
        assert got.startswith(b"HTTP/1.0 503 ") and b"max_connections" in got and took < timeout_s / 2
        for conn in held:
            got, _ = _read_until_closed(conn, limit_s=10 * timeout_s)
            assert got.startswith(b"HTTP/1.0 408 ")
            conn.close()
        with socket.create_connection(addr) as dribble:
            t0 = time.monotonic()
            dribble.sendall(b"GET /healthz HTTP/1.1\r\n")
            try:
                for _ in range(300):                                     # 30 s, were it not cut off
                    dribble.sendall(b"X")
                    time.sleep(0.1)
            except (BrokenPipeError, ConnectionResetError):
                pass
            _read_until_closed(dribble, limit_s=10 * timeout_s)
            assert time.monotonic() - t0 < 5 * timeout_s, "a byte at a time kept the request open"
        assert http_get(f"http://127.0.0.1:{server.port}/healthz")[0] == 200
    finally:
        server.stop()


def test_stop_ends_the_servers_loop_and_closes_its_port():
    """The loop sleeps without polling; ``stop()`` wakes it, joins its thread and closes the
    socket, so nothing answers on the port afterwards (a second stop does nothing)."""
    import socket
    server = MetricsServer(CollectorRegistry(), Health(), port=0).start()
    port, thread = server.port, server._thread
    assert http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200
    server.stop()
    assert not thread.is_alive()
    with socket.socket() as sock:
        assert sock.connect_ex(("127.0.0.1", port)) != 0
    server.stop()
