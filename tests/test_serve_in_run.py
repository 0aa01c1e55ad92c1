"""``streamtrain run`` with ``serve.enabled`` on a Redis store that goes down (issue 24, item 6):
requests get their 503 within ``serve.store_give_up_s``, as from ``streamtrain serve``, instead of
waiting for the trainer's own retries (``store.retry.give_up_s``, 30 s), and recover with Redis."""
from __future__ import annotations

import threading
import time

import httpx
import pytest

from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.serve.run import attach

pytestmark = pytest.mark.timeout(180)
RECORDS = {"records": [{"f0": "1", "d0": 0.5}, {"f1": "7"}]}
NEW = iter(range(10**6))


def timed_post(client, records=None) -> tuple[int, float, str]:
    """A request; by default for ids nobody has seen (the trainer's copy has not got them: a
    read from Redis)."""
    records = records or {"records": [{"f0": f"new-{next(NEW)}", "d0": 0.5}]}
    t0 = time.monotonic()
    r = client.post("/v1/predict", json=records)
    return r.status_code, time.monotonic() - t0, r.json().get("error", "")


def test_requests_get_their_503_within_store_give_up_s(redis_factory, redis_namespace):
    server = redis_factory.start()
    cfg = configmod.load("examples/deepfm.json", ["metrics.enabled=false", "serve.enabled=true", "serve.port=0",
                                                  "serve.store_give_up_s=1.5"])
    cfg["reader"] = {"type": "synthetic", "fields": 4, "cardinality": 200, "dense": 2, "seed": 5}
    cfg["store"] = {"backend": "redis", "urls": [server.url], "namespace": redis_namespace,
                    "retry": {"give_up_s": 30.0}, "timeout_s": 1.0}
    job = Job(configmod.validate(cfg))
    stop_serving = attach(job, cfg)
    runner = threading.Thread(target=job.run)
    runner.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{job.serve_port}", timeout=60) as client:
            deadline = time.monotonic() + 60
            while client.post("/v1/predict", json=RECORDS).status_code != 200:
                assert time.monotonic() < deadline, "the model never answered"
                time.sleep(0.05)
            port = server.port
            server.stop()
            answers = [timed_post(client) for _ in range(3)]
            for status, took, kind in answers:
                assert status == 503 and kind == "store_unavailable", answers
                assert took < 1.5 + 1.5, answers          # the bound, plus one store.timeout_s at most
            status, took, _ = timed_post(client, RECORDS)     # rows it holds: from its copy, or a 503
            assert status in (200, 503) and took < 3.0
            codes = []                                      # concurrent requests do not queue behind it
            t0 = time.monotonic()
            threads = [threading.Thread(target=lambda: codes.append(timed_post(client)[0])) for _ in range(6)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert codes == [503] * 6 and time.monotonic() - t0 < 6
            redis_factory.start(port=port)                  # Redis is back (empty: rows written again)
            deadline = time.monotonic() + 60
            while (status := timed_post(client)[0]) != 200:
                assert time.monotonic() < deadline, f"no recovery ({status})"
                time.sleep(0.1)
    finally:
        job.stop_requested = True
        runner.join(90)
        stop_serving()
    assert not runner.is_alive()
