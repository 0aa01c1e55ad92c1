"""Rows that vanish from Redis, and values that are not finite (issue 24, item 1), on a real
redis-server: a ``FLUSHALL`` mid-run leaves a DeepFM / DCN trainer with the default write-back
finite and learning, no NaN or infinity is ever written, a stored one heals at its next write,
and two trainers' merge keeps Adam's second moment non-negative."""
from __future__ import annotations

import logging
import threading
import time

import numpy as np
import pytest
import redis

from streamtrain import config as configmod
from streamtrain.context import Gradients
from streamtrain.job import Job
from streamtrain.params import ParamSpec
from streamtrain.store import make_store
from streamtrain.store.redis_rows import Rows

pytestmark = pytest.mark.timeout(300)


def lost_rows_job(example: str, url: str, namespace: str, examples: int) -> Job:
    cfg = configmod.load(f"examples/{example}.json", ["metrics.enabled=false"])
    cfg["reader"] = {"type": "synthetic", "fields": 6, "cardinality": 300, "dense": 3, "seed": 3}
    cfg["store"] = {"backend": "redis", "urls": [url], "namespace": namespace}     # write-back 0.5 s
    cfg["drift"] = {"enabled": False}
    return Job(configmod.validate(cfg), max_examples=examples)


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize("example", ["deepfm", "dcn"])
def test_flushall_mid_run_leaves_the_model_finite(example, redis_factory, redis_namespace):
    server = redis_factory.start()
    job = lost_rows_job(example, server.url, redis_namespace, None)
    done = threading.Thread(target=job.run)
    done.start()
    try:
        wait_for(lambda: job.store.stats.flushes >= 3, 120, "three flushes")
        redis.Redis(port=server.port).flushall()        # what a restart without persistence does
        at, flushes = job.trainer.examples, job.store.stats.flushes
        wait_for(lambda: job.store.stats.flushes >= flushes + 6, 120, "six flushes after FLUSHALL")
    finally:
        job.stop_requested = True
        done.join(120)
    assert not done.is_alive()
    t, stats = job.trainer, job.store.stats
    assert t.examples > at and t.nonfinite == 0, "batches skipped after the rows vanished"
    assert stats.nonfinite_rows == 0 and stats.rows_vanished > 0
    assert 0 < t.progressive.logloss < 0.69
    # what Redis holds now, read by a fresh trainer's store: finite, second moments non-negative
    fresh = make_store({"backend": "redis", "urls": [server.url], "namespace": redis_namespace})
    try:
        fresh.declare(job.graph.params, job.config["default_optimizer"])
        snap = fresh.snapshot()
        assert fresh.stats.nonfinite_rows == 0
    finally:
        fresh.close()
    for name, arrays in [*snap.dense.items(), *snap.tables.items()]:
        for slot, a in arrays.items():
            assert np.isfinite(a).all(), f"{name}::{slot}"
            if slot in job.store.optimizers[name].nonnegative:
                assert (a >= 0).all(), f"{name}::{slot}"


def sgd_store(url, namespace, every=0.0, optimizer=None):
    store = make_store({"backend": "redis", "urls": [url], "namespace": namespace, "write_back_s": every,
                        "feed_s": 0})
    store.auto_flush = False
    store.declare({"W": ParamSpec("W", (2,)), "t": ParamSpec("t", (3,), table=True)},
                  optimizer or {"type": "sgd", "lr": 1.0})
    return store


def push(store, ids, g_table, g_dense=0.0):
    store.pull(["W"], {"t": ids})
    store.push(Gradients(dense={"W": np.full(2, g_dense, np.float32)},
                         tables={"t": (ids, np.full((len(ids), 3), g_table, np.float32))}))


def raw(server, store, name, ids=None) -> list:
    it = Rows(store, name, ids)
    return redis.Redis(port=server.port).mget(list(it.keys))


@pytest.mark.parametrize("every", [0.0, 60.0], ids=["write-through", "write-back"])
def test_a_nonfinite_value_is_never_written(every, redis_factory, redis_namespace, caplog):
    server = redis_factory.start()
    store = sgd_store(server.url, redis_namespace, every)
    ids = np.arange(4, dtype=np.uint64)
    try:
        push(store, ids, 1.0, 1.0)
        store.flush()
        w1 = store.pull(["W"], {})["W"]
        before = raw(server, store, "t", ids), raw(server, store, "W")
        with caplog.at_level(logging.ERROR, logger="streamtrain.store.redis"):
            push(store, ids[:2], np.inf, np.nan)          # the rule turns them into inf / NaN
            store.flush()
        assert (raw(server, store, "t", ids), raw(server, store, "W")) == before, "a non-finite row was written"
        assert store.stats.nonfinite_rows == 2 + 1
        assert "3 rows (1 of 'W', 2 of 't') not written" in caplog.text
        # the trainer goes on from the stored rows: its copy of the refused ones was dropped
        got = store.pull(["W"], {"t": ids})
        np.testing.assert_array_equal(got["W"], w1)
        assert np.isfinite(got["t"]).all()
        push(store, ids, 1.0, 1.0)
        store.flush()
        np.testing.assert_array_equal(store.pull(["W"], {})["W"], w1 - 1.0)
    finally:
        store.close()


def test_a_stored_nonfinite_row_reads_as_initial_and_its_next_write_replaces_it(redis_factory, redis_namespace):
    """A NaN an older version wrote: every reader gets the initial row, the next write heals it."""
    server = redis_factory.start()
    store = sgd_store(server.url, redis_namespace)
    ids = np.arange(3, dtype=np.uint64)
    try:
        push(store, ids, 1.0, 1.0)
        it = Rows(store, "t", ids)
        bad = it.layout.encode(np.array([7, 8, 9], np.uint64), np.full((3, 3), np.nan, np.float32), {})
        client = redis.Redis(port=server.port)
        client.mset({k: v.tobytes() for k, v in zip(it.keys.tolist(), bad)})
        reader = sgd_store(server.url, redis_namespace, 0.5)          # a fresh trainer, write-back
        initial = store.absent_rows("t", ids)
        np.testing.assert_array_equal(reader.pull([], {"t": ids})["t"], initial)
        assert reader.stats.nonfinite_rows == 3
        push(reader, ids[:2], 1.0)
        reader.flush()
        healed = sgd_store(server.url, redis_namespace)
        np.testing.assert_array_equal(healed.pull([], {"t": ids[:2]})["t"], initial[:2] - 1.0)
        assert healed.stats.nonfinite_rows == 0
        healed.close(), reader.close()
    finally:
        store.close()


def test_two_trainers_merge_adam_without_a_negative_second_moment(redis_factory, redis_namespace):
    """Both copies' second moments decayed since they were read: the sum of the two changes
    (current + local - base) would be negative, and the next Adam step NaN."""
    server = redis_factory.start()
    adam = {"type": "adam", "lr": 0.1, "beta2": 0.5}
    a, b = (sgd_store(server.url, redis_namespace, 60.0, adam) for _ in range(2))
    ids = np.arange(2, dtype=np.uint64)
    try:
        push(a, ids, 10.0, 10.0)                 # v = 50 everywhere
        a.flush()
        push(b, ids, 0.0, 0.0)                   # b reads v = 50, both decay it to 12.5
        push(b, ids, 0.0, 0.0)
        push(a, ids, 0.0, 0.0)
        push(a, ids, 0.0, 0.0)
        a.flush()
        b.flush()                                # merged: 12.5 + (12.5 - 50) < 0 without the floor
        push(b, ids, 1.0, 1.0)
        b.flush()
        check = sgd_store(server.url, redis_namespace, 0.0, adam)
        check.pull(["W"], {"t": ids})
        states = check.pull_states(["W", "t"])
        assert (states["W"]["v"] > 0).all() and (states["t"]["v"] > 0).all()
        assert np.isfinite(check.pull(["W"], {"t": ids})["t"]).all() and check.stats.nonfinite_rows == 0
        check.close()
    finally:
        a.close(), b.close()


def test_a_prediction_that_is_not_finite_is_a_503_never_a_null(redis_url, redis_namespace):
    """Whatever made the parameters non-finite, a request is answered 503 naming the records,
    not 200 with ``null`` (``streamtrain run`` serving its own store, the redis store here)."""
    import httpx

    from streamtrain.metrics import ServeMetrics
    from streamtrain.serve.http import Server, make_app
    from streamtrain.serve.service import JobModel, Service
    from streamtrain.serve.settings import serve_settings

    job = lost_rows_job("deepfm", redis_url, redis_namespace, 2048)
    job.run()
    settings = serve_settings(job.config)
    metrics = ServeMetrics()
    srv = Server(make_app(Service(JobModel(job), settings, job.config["reader"]), metrics), "127.0.0.1", 0).start()
    records = {"records": [{"f0": "1", "d0": 0.5}, {"f1": "2"}]}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}", timeout=10) as client:
            r = client.post("/v1/predict", json=records)
            assert r.status_code == 200 and all(0 < p < 1 for p in r.json()["predictions"])
            job.store.wb.cached["deep_out.b"].w[0] = np.nan        # the parameters go bad
            r = client.post("/v1/predict", json=records)
            assert r.status_code == 503 and r.headers["Retry-After"] == "1", r.text
            body = r.json()
            assert body["error"] == "nonfinite" and "records[0], records[1]" in body["message"]
        assert metrics.registry.get_sample_value("streamtrain_serve_errors_total", {"kind": "nonfinite"}) == 1
    finally:
        srv.stop()
