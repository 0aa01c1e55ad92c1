"""Sync mode with real processes: three ``streamtrain run`` trainers (synthetic streams, one
redis-server) share every round. One is SIGKILLed: the other two fail the barrier with the
error that names it (and keep retrying their step); its replacement, a new process with the
same worker index, joins at the round in progress and all three go on. Every published round
applied exactly one update: the bias's Adam step count equals the round counter.
"""
from __future__ import annotations

import signal
import time

import numpy as np
import pytest
import redis

from streamtrain.graph import Graph, Schema
from streamtrain.readers.synthetic import SyntheticStream
from streamtrain.store.redis_keys import meta_key
from streamtrain.store.redis_store import RedisStore
from tests.fixtures_prometheus import wait_for

pytestmark = pytest.mark.timeout(120)

READER = {"type": "synthetic", "fields": 4, "cardinality": 200, "dense": 2}
LAYERS = [
    {"name": "sparse", "type": "sparse_input"},
    {"name": "dense", "type": "dense_input"},
    {"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 1, "init": "zeros", "shared": True},
    {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
    {"name": "linear", "type": "fc", "inputs": ["dense"], "dim": 1, "init": "zeros", "bias": False},
    {"name": "bias", "type": "bias", "init": "zeros", "optimizer": {"type": "adam", "lr": 0.01}},
    {"name": "logit", "type": "add", "inputs": ["wide_sum", "linear", "bias"]},
    {"name": "loss", "type": "logloss", "inputs": ["logit"], "reduction": "mean"},
]
TIMEOUT_S = 1.0


def config(url, namespace, worker) -> dict:
    return {"reader": {**READER, "seed": worker}, "batch_size": 64, "layers": LAYERS,
            "default_optimizer": {"type": "sgd", "lr": 0.1},
            "store": {"backend": "redis", "urls": [url], "namespace": namespace, "mode": "sync",
                      "trainers": 3, "worker": worker, "barrier_timeout_s": TIMEOUT_S, "timeout_s": 2.0},
            "metrics": {"enabled": False, "port": 0}, "checkpoint": {"dir": None},
            "log": {"every_seconds": 60, "level": "INFO"}}


def bias_steps(url, namespace) -> int:
    batch = next(iter(SyntheticStream(READER, 64).reader()()))
    graph = Graph.from_config(LAYERS, Schema.of(batch))
    store = RedisStore({"urls": [url], "namespace": namespace})
    try:
        store.declare(graph.params, {"type": "sgd", "lr": 0.1})
        (name,) = [n for n in store.snapshot().dense if n.startswith("bias")]
        return int(np.asarray(store.snapshot().dense[name]["t"]).reshape(-1)[0])
    finally:
        store.close()


def test_a_dead_trainer_stops_the_barrier_and_its_replacement_resumes_it(trainers, redis_url, redis_namespace):
    client = redis.Redis.from_url(redis_url)
    round_key = meta_key(redis_namespace, "sync:round")

    def round_now() -> int:
        return int(client.get(round_key) or 0)

    procs = [trainers(f"w{w}", config(redis_url, redis_namespace, w)) for w in range(3)]
    wait_for(lambda: round_now() >= 10, 60, "ten sync rounds")
    procs[2].kill()
    for w in (0, 1):                                   # the named error, on both survivors
        wait_for(lambda: "trainer(s) 2 did not arrive" in procs[w].log(), 30,
                 f"trainer {w} to report the missing trainer 2")
        assert procs[w].proc.poll() is None, procs[w].log()[-2000:]
    stuck = round_now()
    time.sleep(2 * TIMEOUT_S)
    assert round_now() == stuck                        # nobody moves without trainer 2

    procs.append(trainers("w2-replacement", config(redis_url, redis_namespace, 2)))
    wait_for(lambda: round_now() >= stuck + 10, 60, "the three trainers to go on together")
    for p in (procs[0], procs[1], procs[3]):
        p.proc.send_signal(signal.SIGTERM)
    for p in (procs[0], procs[1], procs[3]):
        assert p.proc.wait(60) == 0, p.log()[-3000:]
    assert "sync barrier" in procs[0].log() and "step failed" in procs[1].log()
    assert bias_steps(redis_url, redis_namespace) == round_now()
