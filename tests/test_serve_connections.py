"""Issue 24 item 3, the prediction port: connections that never finish a request are closed,
and open connections are capped (``serve/limits.py``). Real uvicorn on a loopback port, with
both of its HTTP parsers (h11, and httptools when installed), short limits so each deadline
is seen within a few seconds; the clients are raw sockets that misbehave on purpose. Every time
bound is a share or a multiple of the one limit LIMIT_S, with room for a loaded machine: "at
once" is under half of it, "closed by the deadline" between half of it and five times it."""
from __future__ import annotations

import socket
import time

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.metrics import ServeMetrics
from streamtrain.serve import http as serve_http
from streamtrain.serve.http import Server, make_app
from streamtrain.serve.service import JobModel, Service
from streamtrain.serve.settings import serve_settings

LIMIT_S = 1.5
LIMITS = [f"serve.header_timeout_s={LIMIT_S}", f"serve.body_timeout_s={LIMIT_S}", f"serve.keep_alive_s={LIMIT_S}",
          "serve.max_connections=6", "serve.max_header_bytes=2048"]
AT_ONCE_S, CLOSED_S = LIMIT_S / 2, (LIMIT_S / 2, 5 * LIMIT_S)      # refused at once; closed by a deadline
RECORD = b'{"records": [{"f0": "1", "d0": 0.5}]}'


def protocols():
    from uvicorn.protocols.http.h11_impl import H11Protocol
    found = [pytest.param(H11Protocol, id="h11")]
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
        found.append(pytest.param(HttpToolsProtocol, id="httptools"))
    except ImportError:
        pass
    return found


@pytest.fixture(scope="module")
def job_cfg():
    cfg = configmod.validate(configmod.load("examples/deepfm.json", [
        "metrics.enabled=false", "reader.type=synthetic", "reader.examples=1024", "reader.fields=2",
        "reader.dense=1", *LIMITS]))
    job = Job(cfg)
    job.run()
    return job, cfg


@pytest.fixture(params=protocols())
def served(request, job_cfg, monkeypatch):
    """The prediction app behind a guarded server; yields (server, metrics)."""
    monkeypatch.setattr(serve_http, "AutoHTTPProtocol", request.param)
    job, cfg = job_cfg
    metrics = ServeMetrics()
    settings = serve_settings(cfg)
    srv = Server(make_app(Service(JobModel(job), settings, cfg["reader"]), metrics), "127.0.0.1", 0, settings,
                 count=lambda kind: metrics.errors.labels(kind).inc()).start()
    yield srv, metrics
    srv.stop()


def connect(srv) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    return conn


def read_until_closed(conn, limit_s: float = 10 * LIMIT_S) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and how long that took."""
    t0, got = time.monotonic(), b""
    conn.settimeout(limit_s)
    try:
        while chunk := conn.recv(65536):
            got += chunk
    except ConnectionResetError:
        pass
    except socket.timeout as err:
        raise AssertionError(f"the server kept the connection open over {limit_s} s (got {got[:200]!r})") from err
    return got, time.monotonic() - t0


def open_connections(srv) -> int:
    return len(srv.uvicorn.server_state.connections)


def wait_for(predicate, limit_s: float = 30.0):         # an event that comes: a generous bound
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_a_connection_that_sends_nothing_is_closed(served):
    srv, metrics = served
    with connect(srv) as conn:
        got, took = read_until_closed(conn)
    assert got.startswith(b"HTTP/1.1 408 ") and b'"where":""' in got and b"header_timeout_s" in got
    assert CLOSED_S[0] < took < CLOSED_S[1]
    assert metrics.registry.get_sample_value("streamtrain_serve_errors_total", {"kind": "timeout"}) == 1


def test_headers_sent_a_byte_at_a_time_are_cut_off(served):
    """Slowloris: every byte keeps the connection alive for ever without a deadline on the whole."""
    srv, _ = served
    with connect(srv) as conn:
        t0 = time.monotonic()
        conn.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: t\r\n")
        try:
            for _ in range(int(100 * LIMIT_S)):   # 10 limits of dribble at most
                conn.sendall(b"X")
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass
        got, _ = read_until_closed(conn)
        assert time.monotonic() - t0 < CLOSED_S[1], "the dribble was not cut off"
    assert got.startswith(b"HTTP/1.1 408 ")


def test_a_half_sent_body_is_cut_off_and_the_server_goes_on(served):
    srv, metrics = served
    with connect(srv) as conn:
        conn.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n" + RECORD[:10])
        got, took = read_until_closed(conn)
    assert got.startswith(b"HTTP/1.1 408 ") and b"body_timeout_s" in got and CLOSED_S[0] < took < CLOSED_S[1]
    assert metrics.registry.get_sample_value("streamtrain_serve_errors_total", {"kind": "internal"}) == 0
    r = httpx.post(f"http://127.0.0.1:{srv.port}/v1/predict", content=RECORD,
                   headers={"content-type": "application/json"})
    assert r.status_code == 200 and 0 < r.json()["predictions"][0] < 1
    wait_for(lambda: open_connections(srv) == 0)


def test_keep_alive_requests_each_get_their_own_header_deadline(served):
    """Three requests on one connection, LIMIT_S / 2 apart (1.5 limits in all: longer than any
    one deadline): all answered; then the idle connection is closed after keep_alive_s."""
    srv, _ = served
    request = (b"POST /v1/predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(RECORD)) + RECORD
    with connect(srv) as conn:
        for _ in range(3):
            conn.sendall(request)
            got = b""
            while b"predictions" not in got:
                got += conn.recv(65536)
            assert got.startswith(b"HTTP/1.1 200 ")
            time.sleep(LIMIT_S / 2)
        rest, took = read_until_closed(conn)
    assert rest == b"" and took < CLOSED_S[1]


def test_oversized_headers_are_431(served):
    srv, _ = served
    with connect(srv) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n" + b"X-Pad: " + b"a" * 4000 + b"\r\n")
        got, took = read_until_closed(conn)
    assert got.startswith(b"HTTP/1.1 431 ") and took < AT_ONCE_S


def test_connections_over_the_cap_are_refused_at_once(served):
    srv, metrics = served
    held = [connect(srv) for _ in range(6)]
    try:
        wait_for(lambda: open_connections(srv) == 6)
        with connect(srv) as extra:
            got, took = read_until_closed(extra)
        assert got.startswith(b"HTTP/1.1 503 ") and b"too_many_connections" in got and took < AT_ONCE_S
        assert metrics.registry.get_sample_value("streamtrain_serve_errors_total",
                                                 {"kind": "too_many_connections"}) == 1
    finally:
        for conn in held:
            conn.close()
    wait_for(lambda: open_connections(srv) == 0)
    assert httpx.get(f"http://127.0.0.1:{srv.port}/healthz").status_code == 200


@pytest.mark.parametrize("protocol", protocols())
def test_a_client_that_does_not_read_its_answer_is_dropped(protocol, monkeypatch):
    """A 32 MB answer nobody reads: the writes pause; after body_timeout_s the connection is
    aborted (a graceful close would wait for the unsent bytes for ever)."""
    monkeypatch.setattr(serve_http, "AutoHTTPProtocol", protocol)
    app = Starlette(routes=[Route("/big", lambda request: Response(b"x" * (32 << 20)))])
    settings = serve_settings(configmod.load("examples/lr.json", LIMITS))
    srv = Server(app, "127.0.0.1", 0, settings).start()
    try:
        conn = socket.create_connection(("127.0.0.1", srv.port))
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.sendall(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
        wait_for(lambda: open_connections(srv) == 1)
        t0 = time.monotonic()
        wait_for(lambda: open_connections(srv) == 0, limit_s=10 * LIMIT_S)
        assert time.monotonic() - t0 > CLOSED_S[0]
        conn.close()
    finally:
        srv.stop()


def test_the_cap_leaves_file_descriptors_for_the_rest(monkeypatch):
    """A limit lower than what fits under RLIMIT_NOFILE: the cap is lowered, never above it."""
    import os
    import resource
    from streamtrain.serve.limits import connection_cap
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(os.listdir("/proc/self/fd"))
    assert connection_cap(10, 64) == 10
    assert soft - open_now - 64 - 2 <= connection_cap(10**9, 64) <= soft - open_now - 64 + 2
    assert connection_cap(10**9, 10**9) == 1


def test_an_accept_burst_past_the_cap_stays_under_the_limit():
    """asyncio's loop accepts up to its backlog before refusing any: the backlog is a quarter
    of what is left above the cap (8 to 2048), so a flood never reaches RLIMIT_NOFILE."""
    import os
    import resource
    from streamtrain.serve.limits import accept_burst
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    left = soft - len(os.listdir("/proc/self/fd"))
    assert accept_burst(left - 100) in range(24, 27)
    assert accept_burst(left) == 8
    assert accept_burst(0, most=2048) == min(2048, max(8, left // 4))


FD_LIMIT = 192


def _low_fd_limit():
    import resource
    resource.setrlimit(resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))


@pytest.mark.slow
def test_a_flood_under_a_low_fd_limit_starves_neither_checkpoints_nor_probes(tmp_path):
    """Issue 24 item 3, end to end: ``streamtrain run`` training and serving in one process
    under ``ulimit -n 192``; 400 slowloris connections on the prediction port (headers never
    finished, held for the whole test: header_timeout_s=120). The server takes what fits under
    the limit less serve.reserve_fds and answers the rest 503 at once; the trainer still writes
    its checkpoints (no ``.tmp`` left) and the metrics port still answers /healthz and /metrics.
    Before: every descriptor went to the flood, checkpoints failed with EMFILE and the probes
    timed out."""
    import re
    import resource
    import signal
    import subprocess
    import sys
    import threading
    from tests.conftest import ROOT
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1024:                                  # the test's own 400 client sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    ckpt = tmp_path / "ckpt"
    sets = ["serve.enabled=true", "serve.port=0", "metrics.port=0", f"checkpoint.dir={ckpt}",
            "checkpoint.every_seconds=0.3", "serve.header_timeout_s=120", "log.every_seconds=0"]
    proc = subprocess.Popen([sys.executable, "-m", "streamtrain", "run", "examples/synthetic.json",
                             *[a for s in sets for a in ("--set", s)]], cwd=ROOT, preexec_fn=_low_fd_limit,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    flood: list[socket.socket] = []
    try:
        def found(pattern):
            return next((m for line in list(lines) if (m := re.search(pattern, line))), None)
        wait_for(lambda: found(r"serving predictions on http://127\.0\.0\.1:(\d+)/")
                 and found(r"/readyz on http://127\.0\.0\.1:(\d+)/") and found("checkpoint written")
                 or proc.poll() is not None, limit_s=60)
        assert proc.poll() is None, "".join(lines[-30:])
        port = int(found(r"serving predictions on http://127\.0\.0\.1:(\d+)/").group(1))
        metrics_port = int(found(r"/readyz on http://127\.0\.0\.1:(\d+)/").group(1))
        for _ in range(400):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: t\r\n")
            flood.append(conn)
        written = sum("checkpoint written" in line for line in lines)
        wait_for(lambda: sum("checkpoint written" in line for line in lines) >= written + 3, limit_s=30)
        with httpx.Client(timeout=5) as client:
            assert client.get(f"http://127.0.0.1:{metrics_port}/healthz").status_code == 200
            assert "streamtrain_checkpoint" in client.get(f"http://127.0.0.1:{metrics_port}/metrics").text
            r = client.post(f"http://127.0.0.1:{port}/v1/predict", json={"records": [{"f0": "1"}]})
            assert r.status_code == 503 and r.json()["error"] == "too_many_connections"
        refused = 0
        for conn in flood:
            conn.setblocking(False)
            try:
                refused += conn.recv(4096).startswith(b"HTTP/1.1 503 ")
            except BlockingIOError:
                pass
        assert 400 - FD_LIMIT < refused < 400 - 8      # the cap: under the limit, less reserve_fds
        assert not [line for line in lines if "checkpoint failed" in line or "Too many open files" in line]
    finally:
        for conn in flood:
            conn.close()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        reader.join(timeout=5)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert proc.returncode == 0, "".join(lines[-30:])
    assert not list(ckpt.glob(".*.tmp"))        # once it has stopped (one may be in writing before)
    assert any("at most" in line and "serve.reserve_fds=64" in line for line in lines)
