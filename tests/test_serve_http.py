"""The prediction server over real HTTP (uvicorn on a loopback port), serving a trained job's
own memory store: answers, errors that name the record and field, limits, probes, concurrency."""
from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.evaluator import Evaluator
from streamtrain.job import Job
from streamtrain.metrics import ServeMetrics
from streamtrain.readers import make_parser
from streamtrain.serve.http import Server, make_app
from streamtrain.serve.inputs import records_batch
from streamtrain.serve.run import attach
from streamtrain.serve.service import JobModel, Service
from streamtrain.serve.settings import serve_settings


def trained_job(sets, max_examples=None):
    cfg = configmod.validate(configmod.load("examples/deepfm.json", ["metrics.enabled=false", *sets]))
    job = Job(cfg, max_examples=max_examples)
    job.run()
    return job, cfg


@pytest.fixture(scope="module")
def synthetic_job():
    return trained_job(["batch_size=256", "reader.type=synthetic", "reader.examples=4096", "reader.fields=4",
                        "reader.dense=2", "reader.cardinality=100", "serve.max_records=64",
                        "serve.max_body_bytes=20000"])


@pytest.fixture(scope="module")
def server(synthetic_job):
    job, cfg = synthetic_job
    metrics = ServeMetrics()
    srv = Server(make_app(Service(JobModel(job), serve_settings(cfg), cfg["reader"]), metrics), "127.0.0.1", 0).start()
    with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=10) as client:
        client.metrics = metrics
        yield client
    srv.stop()


RECORDS = [{"f0": "3", "f1": 7, "f2": ["1", "2"], "d0": 0.5, "d1": -1.0},
           {"f0": "0", "f3": True},
           {"f0": "never-seen-value", "d1": 2}]


def test_predictions_are_the_models_own(server, synthetic_job):
    job, _ = synthetic_job
    rows_before = {n: len(t) for n, t in job.store.tables.items()}
    r = server.post("/v1/predict", json={"records": RECORDS})
    assert r.status_code == 200
    out = r.json()
    assert out["step"] == job.trainer.batches == 16 and out["max_param_age_s"] >= 0
    want = Evaluator(job.graph, job.store).forward(records_batch({"records": RECORDS}, job.graph.schema, 10))
    np.testing.assert_allclose(out["predictions"], want, rtol=1e-5)
    assert all(0 < p < 1 for p in out["predictions"])
    # unknown ids read as initial rows, never written
    assert {n: len(t) for n, t in job.store.tables.items()} == rows_before


def test_lines_in_the_stream_format(criteo_path):
    job, cfg = trained_job(["reader.type=file", f"reader.path={criteo_path}", "reader.format=criteo"], 2048)
    svc = Service(JobModel(job), serve_settings(cfg), cfg["reader"])
    srv = Server(make_app(svc, ServeMetrics()), "127.0.0.1", 0).start()
    try:
        import gzip
        lines = gzip.open(criteo_path).read().split(b"\n")[:5]
        with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}") as c:
            r = c.post("/v1/predict", content=b"\n".join(lines), headers={"content-type": "text/plain"})
            assert r.status_code == 200, r.text
            want = Evaluator(job.graph, job.store).forward(make_parser("criteo").parse(lines))
            np.testing.assert_allclose(r.json()["predictions"], want, rtol=1e-5)
            bad = lines[:1] + [b"1\t2\tonly three fields"] + lines[1:2]
            r = c.post("/v1/predict", content=b"\n".join(bad), headers={"content-type": "text/plain"})
            assert r.status_code == 400 and r.json()["where"] == "line 2"
            assert "field_count" in r.json()["message"]
    finally:
        srv.stop()


@pytest.mark.parametrize("transform", ["log1p", "none"])
def test_a_record_reads_as_the_same_row_written_as_a_line_of_the_stream(transform, tmp_path):
    """A model trained on a CSV's numbers as sign(x)·log1p(|x|) (the csv reader's default) was
    served JSON records' numbers as they are: predictions saturated (1.0 for a price of 90
    where the same row as a CSV line read 0.91); a multi-valued column's "x|y" was one id.
    A record, in either form, and the same row as a line agree."""
    rng = np.random.default_rng(0)
    price, site = rng.uniform(0, 100, 3000), rng.choice(["a", "b"], 3000)
    tags = rng.choice(["x|y", "y", "z|x", ""], 3000)
    y = (np.log1p(price) - 3 + (site == "a") > rng.normal(0, 1, 3000)).astype(int)
    path = tmp_path / "clicks.csv"
    path.write_text("clicked,site,price,tags\n" + "".join(f"{a},{b},{c:.2f},{t}\n" for a, b, c, t in zip(y, site, price, tags)))
    job, cfg = trained_job([f"reader.path={path}", "reader.type=file", "reader.format=csv", "reader.label=clicked",
                            'reader.numeric=["price"]', f"reader.numeric_transform={transform}",
                            'reader.multivalue={"tags": "|"}'])
    svc = Service(JobModel(job), serve_settings(cfg), cfg["reader"])
    assert svc.numeric_transform == transform and svc.separators == {"tags": "|"}
    srv = Server(make_app(svc, ServeMetrics()), "127.0.0.1", 0).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}") as c:
            answers = [c.post("/v1/predict", json={"records": [{"site": "a", "price": 90.0, "tags": tags},
                                                               {"site": "b", "price": 1, "tags": ""}]})
                       for tags in ("x|y", ["x", "y"], "|x||y")]
            answers.append(c.post("/v1/predict", content=b"clicked,site,price,tags\n0,a,90.0,x|y\n0,b,1,\n",
                                  headers={"content-type": "text/plain"}))
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        for a in answers[1:]:
            np.testing.assert_allclose(a.json()["predictions"], answers[0].json()["predictions"], rtol=1e-6)
        assert len(set(answers[0].json()["predictions"])) == 2
    finally:
        srv.stop()


def test_a_jsonl_jobs_record_takes_numbers_as_its_lines_write_them(tmp_path):
    """The jsonl reader reads "3.5", true and "NA" in a numeric key; a record so written was a
    400 ("expected a finite number"): it now reads as the same line of the stream does."""
    rng = np.random.default_rng(1)
    price = rng.uniform(0, 9, 2000)
    lines = "".join(json.dumps({"label": int(p > 4.5), "site": "ab"[i % 2], "price": round(p, 2)}) + "\n"
                    for i, p in enumerate(price))
    path = tmp_path / "clicks.jsonl"
    path.write_text(lines)
    job, cfg = trained_job([f"reader.path={path}", "reader.type=file", "reader.format=jsonl", 'reader.numeric=["price"]'])
    srv = Server(make_app(Service(JobModel(job), serve_settings(cfg), cfg["reader"]), ServeMetrics()), "127.0.0.1", 0).start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}") as c:
            text = c.post("/v1/predict", json={"records": [{"site": "a", "price": "3.5"}, {"site": "b", "price": True},
                                                           {"site": "a", "price": "NA"}]})
            plain = c.post("/v1/predict", json={"records": [{"site": "a", "price": 3.5}, {"site": "b", "price": 1},
                                                            {"site": "a"}]})
            bad = c.post("/v1/predict", json={"records": [{"site": "a", "price": "cheap"}]})
        assert text.status_code == plain.status_code == 200, text.text
        np.testing.assert_allclose(text.json()["predictions"], plain.json()["predictions"], rtol=1e-6)
        assert bad.status_code == 400 and bad.json()["where"] == "records[0].price"
    finally:
        srv.stop()


@pytest.mark.parametrize("payload, where, words", [
    ({"records": [{"f0": "1"}, {"f9": "x"}]}, "records[1].f9", "unknown field"),
    ({"records": [{"d0": "high"}]}, "records[0].d0", "finite number"),
    ({"records": [{"d0": True}]}, "records[0].d0", "finite number"),
    ({"records": [{"f1": {"a": 1}}]}, "records[0].f1", "categorical"),
    ({"records": [{"f1": [1, [2]]}]}, "records[0].f1", "categorical"),
    ({"records": [{"f1": 1.5}]}, "records[0].f1", "categorical"),
    ({"records": [3]}, "records[0]", "object of fields"),
    ({"records": []}, "records", "empty"),
    ({"rows": []}, "", '{"records"'),
    ([1, 2], "", '{"records"'),
])
def test_bad_records_get_400_naming_record_and_field(server, payload, where, words):
    r = server.post("/v1/predict", json=payload)
    assert r.status_code == 400
    body = r.json()
    assert body["error"] == "bad_request" and body["where"] == where and words in body["message"]


def test_bad_bodies_and_limits(server):
    r = server.post("/v1/predict", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["where"] == "body"
    r = server.post("/v1/predict", content=b"\xff\xfe", headers={"content-type": "application/json"})
    assert r.status_code == 400
    r = server.post("/v1/predict", content=b"1 2:3", headers={"content-type": "text/plain"})
    assert r.status_code == 400 and r.json()["where"] == "Content-Type"
    r = server.post("/v1/predict", json={"records": [{"f0": "1"}] * 65})
    assert r.status_code == 413 and "max_records" in r.json()["message"]
    r = server.post("/v1/predict", content=b"x" * 20001, headers={"content-type": "application/json"})
    assert r.status_code == 413 and "max_body_bytes" in r.json()["message"]
    assert server.get("/v1/predict").status_code == 405
    m = server.metrics.registry
    assert m.get_sample_value("streamtrain_serve_errors_total", {"kind": "too_large"}) >= 2


def test_no_client_input_gives_a_500(server):
    rng = np.random.default_rng(0)
    junk = [b"", b"null", b"[]", b"{}", b'{"records": null}', b'{"records": [{"f0": null}]}',
            json.dumps({"records": [{"f0": "a" * 10000}]}).encode(),
            json.dumps({"records": [{"d0": 1e308 * 10}]}).encode().replace(b"Infinity", b"1e999"),
            json.dumps({"records": [{"f2": []}]}).encode()]
    junk += [bytes(rng.integers(0, 256, int(n))) for n in rng.integers(1, 300, 20)]
    for body in junk:
        for ctype in ("application/json", "text/plain", "application/octet-stream"):
            r = server.post("/v1/predict", content=body, headers={"content-type": ctype})
            assert r.status_code in (200, 400, 413), (body[:40], ctype, r.text)
    assert server.get("/healthz").status_code == 200


def test_concurrent_requests(server):
    results, errors = [], []

    def client():
        with httpx.Client(base_url=server.base_url) as c:
            for i in range(20):
                r = c.post("/v1/predict", json={"records": RECORDS[i % 3:]})
                (results if r.status_code == 200 else errors).append(r)

    threads = [threading.Thread(target=client) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 120
    one = {tuple(r.json()["predictions"]) for r in results if len(r.json()["predictions"]) == 3}
    assert len(one) == 1                # the same model answers every thread the same


def test_model_description_probes_and_metrics(server):
    d = server.get("/v1/model").json()
    assert d["fields"] == {"sparse": ["f0", "f1", "f2", "f3"], "dense": ["d0", "d1"]}
    assert d["loss"] == "logloss" and d["store"] == "memory" and d["step"] == 16
    assert {layer["name"] for layer in d["layers"]} >= {"emb", "fm", "loss"}
    params = d["parameters"].values()
    assert {"table": True, "dim": 8} in params and any("shape" in p for p in params)
    assert server.get("/healthz").text == "ok\n" and server.get("/readyz").status_code == 200
    server.post("/v1/predict", json={"records": RECORDS})
    text = server.get("/metrics").text
    for name in ("streamtrain_serve_request_seconds_bucket", "streamtrain_serve_batch_records_count",
                 "streamtrain_serve_param_age_seconds_count", "streamtrain_serve_cache_hit_ratio",
                 "streamtrain_serve_errors_total", "streamtrain_serve_model_step 16.0"):
        assert name in text


def test_a_job_that_has_not_trained_answers_503_then_serves():
    cfg = configmod.validate(configmod.load("examples/deepfm.json", [
        "metrics.enabled=false", "batch_size=256", "reader.type=synthetic", "reader.examples=512",
        "reader.fields=2", "serve.enabled=true", "serve.port=0"]))
    job = Job(cfg)
    stop = attach(job, cfg)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{job.serve_port}") as c:
            r = c.post("/v1/predict", json={"records": [{"f0": "1"}]})
            assert r.status_code == 503 and r.headers["Retry-After"] == "1"
            assert r.json()["error"] == "not_ready"
            assert c.get("/readyz").status_code == 503
            job.run()
            r = c.post("/v1/predict", json={"records": [{"f0": "1"}]})
            assert r.status_code == 200 and r.json()["step"] == 2
    finally:
        stop()


def test_streamtrain_run_serves_while_it_trains(tmp_path):
    """The daemon wiring: ``streamtrain run`` with serve.enabled answers on its own port while
    training, its serving metrics join the job's /metrics, and SIGTERM still drains cleanly."""
    import re
    import signal
    import subprocess
    import sys
    from tests.test_serve_freshness import served_port, ROOT
    sets = ["reader.type=synthetic", "reader.fields=3", "serve.enabled=true", "serve.port=0",
            "metrics.port=0", "log.every_seconds=0.2"]
    proc = subprocess.Popen([sys.executable, "-m", "streamtrain", "run", "examples/lr.json",
                             *[a for s in sets for a in ("--set", s)]], cwd=ROOT,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        port = served_port(proc)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            deadline = time.monotonic() + 30
            while (r := c.post("/v1/predict", json={"records": [{"f0": "1"}]})).status_code != 200:
                assert time.monotonic() < deadline, r.text
            first = r.json()["step"]
            while c.post("/v1/predict", json={"records": [{"f0": "1"}]}).json()["step"] == first:
                assert time.monotonic() < deadline, "the served step does not advance"
            assert c.get("/metrics").status_code == 404          # on the job's metrics port instead
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, out[-2000:]
    assert re.search(r"done: examples=\d+", out)


def test_responses_are_not_held_by_nagle():
    """Every accepted connection has TCP_NODELAY: without it a response's body (a second write
    after its headers) waited ~40 ms for the client's delayed ACK, on every request."""
    import socket
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    app = Starlette(routes=[Route("/", lambda request: PlainTextResponse("ok"))])
    srv = Server(app, "127.0.0.1", 0).start()
    try:
        with socket.create_connection(("127.0.0.1", srv.port)) as conn:
            conn.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
            got = b""
            while not got.endswith(b"ok"):
                got += conn.recv(4096)
            served = [p.transport.get_extra_info("socket") for p in srv.uvicorn.server_state.connections]
            assert served and all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in served)
    finally:
        srv.stop()


def test_a_client_that_leaves_mid_body_is_not_an_error(server):
    import socket
    port = int(str(server.base_url).rsplit(":", 1)[1].strip("/"))
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"POST /v1/predict HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"records\": [")
    time.sleep(0.3)
    assert server.metrics.registry.get_sample_value("streamtrain_serve_errors_total", {"kind": "internal"}) == 0
    assert server.post("/v1/predict", json={"records": RECORDS}).status_code == 200
