"""Serving from the Redis store (real redis-server): the same numbers as the store holds, rows
never created, the staleness bound of the cache, fields published by a trainer, and a store
outage answered with 503 + Retry-After and recovered from without a restart."""
from __future__ import annotations

import threading
import time

import httpx
import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.evaluator import Evaluator
from streamtrain.graph import Graph, Schema
from streamtrain.metrics import ServeMetrics
from streamtrain.serve.http import Server, make_app
from streamtrain.serve.inputs import records_batch
from streamtrain.serve.publish import Publisher
from streamtrain.serve.service import Service, StoreModel
from streamtrain.serve.settings import serve_settings
from streamtrain.store import make_store
from streamtrain.testing import random_batch
from streamtrain.trainer import Trainer
from tests.fixtures_redis import layers

FIELDS = ("a", "b", "c")
DENSE = ("d0", "d1", "d2")
SCHEMA = {"sparse": list(FIELDS), "dense": list(DENSE)}      # serve.schema of these tests


def job_config(url, namespace, **serve):
    cfg = configmod.load("examples/lr.json", [])
    cfg.update(name=namespace, layers=layers(), store={"backend": "redis", "urls": [url], "write_back_s": 0},
               serve={"max_staleness_s": 0.3, "store_give_up_s": 0.5, **serve})
    return configmod.validate(cfg)


def trainer_on(cfg):
    store = make_store({**cfg["store"], "namespace": cfg["name"]})
    first = random_batch(32, fields=FIELDS, dense=3, cardinality=40, multivalue=("c",), seed=0)
    graph = Graph.from_config(cfg["layers"], Schema.of(first))
    store.declare(graph.params, cfg["default_optimizer"])
    return Trainer(graph, store), first


def serving(cfg, store=None):
    source = StoreModel(cfg, serve_settings(cfg))
    metrics = ServeMetrics()
    srv = Server(make_app(Service(source, serve_settings(cfg), cfg["reader"]), metrics), "127.0.0.1", 0).start()
    return source, srv, httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=10), metrics


def records(batch, rows):
    """The dict form of some rows of a random_batch: its ids are not (field, value) hashes, so
    the test rebuilds the batch from records and uses that one on both sides."""
    return [{"a": f"v{r}", "b": r % 7, "c": [f"x{r}", f"y{r % 3}"], "d0": 0.1 * r} for r in rows]


def clicked(recs):
    """The records as a training batch whose every label is 1."""
    batch = records_batch({"records": recs}, Schema(FIELDS, DENSE), 100)
    batch.labels = np.ones(batch.size, np.float32)
    return batch


def test_predictions_follow_the_store_within_the_staleness_bound(redis_url, redis_namespace):
    cfg = job_config(redis_url, redis_namespace, schema=SCHEMA)
    trainer, _ = trainer_on(cfg)
    recs = records(None, range(12))
    batch = clicked(recs)
    source, srv, client, metrics = serving(cfg)
    try:
        # this namespace's keys only: the session's Redis also holds other tests' keys, some of
        # them expiring (sync receipts) between the two reads
        ns_keys = lambda: set(trainer.store.shards.clients[0].keys(f"*{redis_namespace}*"))  # noqa: E731
        keys_before = ns_keys()
        assert keys_before
        r1 = client.post("/v1/predict", json={"records": recs}).json()
        truth = Evaluator(trainer.graph, trainer.store)
        np.testing.assert_allclose(r1["predictions"], truth.forward(batch), rtol=1e-5)
        assert ns_keys() == keys_before                                       # nothing created
        for _ in range(30):                       # the trainer learns these rows: all clicks
            trainer.step(batch)
        moved = truth.forward(batch)
        r2 = client.post("/v1/predict", json={"records": recs}).json()
        if r2["max_param_age_s"] > 0:             # still within the bound: the old values, from the cache
            assert r2["max_param_age_s"] <= 0.3 + 0.05
        deadline = time.monotonic() + 0.3 + 1.0
        while time.monotonic() < deadline:
            r3 = client.post("/v1/predict", json={"records": recs}).json()
            if np.allclose(r3["predictions"], moved, rtol=1e-5):
                break
        else:
            pytest.fail("the served predictions did not follow the store within max_staleness_s")
        assert np.mean(moved) > np.mean(r1["predictions"]) + 0.2
        assert metrics.registry.get_sample_value("streamtrain_serve_cache_lookups_total", {"result": "hit"}) > 0
        assert 0 < metrics.registry.get_sample_value("streamtrain_serve_cache_hit_ratio") < 1
    finally:
        srv.stop(), client.close(), source.close(), trainer.store.close()


def test_fields_published_by_a_trainer(redis_url, redis_namespace):
    cfg = job_config(redis_url, redis_namespace)
    source, srv, client, _ = serving(cfg)
    try:
        r = client.post("/v1/predict", json={"records": [{"a": "1"}]})
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert "published" in r.json()["message"]
        assert client.get("/readyz").status_code == 503
        trainer, first = trainer_on(cfg)
        job = type("J", (), {"graph": trainer.graph, "trainer": trainer, "store": trainer.store, "config": cfg})
        for _ in range(3):
            trainer.step(first)
        Publisher()(job, first, None)
        r = client.post("/v1/predict", json={"records": [{"a": "1", "d2": 1.0}]})
        assert r.status_code == 200 and r.json()["step"] == 3
        assert client.get("/v1/model").json()["fields"] == {"sparse": list(FIELDS), "dense": ["d0", "d1", "d2"]}
        assert client.get("/readyz").status_code == 200
        trainer.store.close()
    finally:
        srv.stop(), client.close(), source.close()


def test_store_outage_gives_503_and_recovers(redis_factory, redis_namespace):
    server = redis_factory.start()
    cfg = job_config(server.url, redis_namespace, schema=SCHEMA, max_staleness_s=0.0)
    source, srv, client, metrics = serving(cfg)
    rec = {"records": [{"a": "1"}]}
    try:
        assert client.post("/v1/predict", json=rec).status_code == 200
        port = server.port
        server.stop()
        t0 = time.monotonic()
        r = client.post("/v1/predict", json=rec)
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert r.json()["error"] == "store_unavailable" and time.monotonic() - t0 < 3
        assert client.get("/readyz").status_code == 503 and client.get("/healthz").status_code == 200
        t0, codes = time.monotonic(), []            # concurrent requests do not queue behind the outage
        threads = [threading.Thread(target=lambda: codes.append(client.post("/v1/predict", json=rec).status_code))
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert codes == [503] * 8 and time.monotonic() - t0 < 3
        redis_factory.start(port=port)
        deadline = time.monotonic() + 10
        while client.post("/v1/predict", json=rec).status_code != 200:
            assert time.monotonic() < deadline, "did not recover after the store came back"
        assert metrics.registry.get_sample_value("streamtrain_serve_errors_total", {"kind": "store_unavailable"}) >= 1
    finally:
        srv.stop(), client.close(), source.close()


def test_serve_refuses_a_store_it_cannot_share(tmp_path):
    from streamtrain.errors import ConfigError
    cfg = configmod.validate(configmod.load("examples/lr.json", []))
    with pytest.raises(ConfigError, match="store.backend=redis"):
        StoreModel(cfg, serve_settings(cfg))


def test_rows_in_use_are_refreshed_in_the_background(redis_url, redis_namespace):
    """Rows requests keep using are re-read by the refresher before they reach max_staleness_s:
    after the first request none waits for the store, every answer is within the bound, and a
    trainer's update still shows within it."""
    cfg = job_config(redis_url, redis_namespace, schema=SCHEMA, refresh_window_s=5.0, max_staleness_s=1.0)
    trainer, _ = trainer_on(cfg)
    recs = records(None, range(8))
    batch = clicked(recs)
    source, srv, client, metrics = serving(cfg)
    try:
        assert client.post("/v1/predict", json={"records": recs}).status_code == 200
        reads = source.params.reads
        ages = []
        t_end = time.monotonic() + 3.0                   # three times the bound
        while time.monotonic() < t_end:
            ages.append(client.post("/v1/predict", json={"records": recs}).json()["max_param_age_s"])
            time.sleep(0.02)
        assert source.params.reads == reads, "a request waited for the store"
        assert max(ages) <= 1.0 + 0.2, max(ages)
        for _ in range(30):
            trainer.step(batch)
        moved = Evaluator(trainer.graph, trainer.store).forward(batch)
        applied = time.monotonic()
        while not np.allclose(client.post("/v1/predict", json={"records": recs}).json()["predictions"],
                              moved, rtol=1e-5):
            assert time.monotonic() - applied < 1.0 + 0.5, "the refreshed rows did not follow the store"
        assert source.params.reads == reads
    finally:
        srv.stop(), client.close(), source.close(), trainer.store.close()


def test_an_outage_with_the_background_refresh_on(redis_factory, redis_namespace):
    """The refresher's reads fail with the store: cached rows are served only while within the
    bound, then 503 + Retry-After, and both requests and refresher recover by themselves."""
    server = redis_factory.start()
    cfg = job_config(server.url, redis_namespace, schema=SCHEMA, max_staleness_s=0.3, refresh_window_s=5.0)
    source, srv, client, _ = serving(cfg)
    rec = {"records": [{"a": "1", "c": ["x"]}]}
    try:
        assert client.post("/v1/predict", json=rec).status_code == 200
        port = server.port
        server.stop()
        stopped = time.monotonic()
        while (r := client.post("/v1/predict", json=rec)).status_code == 200:
            assert r.json()["max_param_age_s"] <= 0.3 + 0.1          # never beyond the bound
            assert time.monotonic() - stopped < 3, "still answering from the cache"
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        redis_factory.start(port=port)
        deadline = time.monotonic() + 10
        while client.post("/v1/predict", json=rec).status_code != 200:
            assert time.monotonic() < deadline, "did not recover after the store came back"
        reads = source.params.reads
        time.sleep(1.0)                                               # the refresher works again:
        for _ in range(5):                                            # no request waits for the store
            assert client.post("/v1/predict", json=rec).status_code == 200
            time.sleep(0.1)
        assert source.params.reads == reads
    finally:
        srv.stop(), client.close(), source.close()
