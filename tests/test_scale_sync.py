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

from streamtrain.context import Gradients
from streamtrain.errors import StoreError
from streamtrain.graph import Graph, Schema
from streamtrain.params import ParamSpec
from streamtrain.readers.synthetic import SyntheticStream
from streamtrain.store.redis_keys import meta_key
from streamtrain.store.redis_store import RedisStore
from tests.fixtures_prometheus import wait_for

pytestmark = pytest.mark.timeout(180)

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
TIMEOUT_S = 2.0


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
        wait_for(lambda w=w: "trainer(s) 2 did not arrive" in procs[w].log(), 30,
                 f"trainer {w} to report the missing trainer 2")
        assert procs[w].proc.poll() is None, procs[w].log()[-2000:]
    stuck = round_now()
    time.sleep(TIMEOUT_S)
    assert round_now() == stuck                        # nobody moves without trainer 2

    procs.append(trainers("w2-replacement", config(redis_url, redis_namespace, 2)))
    # (the survivors retry their step with a growing pause, so catching up may take a while)
    wait_for(lambda: round_now() >= stuck + 10, 120, "the three trainers to go on together")
    for p in (procs[0], procs[1], procs[3]):
        p.proc.send_signal(signal.SIGTERM)
    for p in (procs[0], procs[1], procs[3]):
        assert p.proc.wait(60) == 0, p.log()[-3000:]
    assert "sync barrier" in procs[0].log() and "step failed" in procs[1].log()
    assert bias_steps(redis_url, redis_namespace) == round_now()


def sync_stores(url, namespace, workers, timeout_s=0.3):
    stores = [RedisStore({"urls": [url], "namespace": namespace, "mode": "sync", "trainers": 2,
                          "worker": w, "barrier_timeout_s": timeout_s}) for w in workers]
    for s in stores:
        s.declare({"W": ParamSpec("W", (2,), init="zeros")}, {"type": "sgd", "lr": 1.0})
    return stores


ONES = Gradients(dense={"W": np.ones(2, np.float32)})


def test_a_step_retried_after_a_barrier_timeout_is_applied_once(redis_url, redis_namespace):
    zero, one = sync_stores(redis_url, redis_namespace, [0, 1])
    one.push(ONES)
    with pytest.raises(StoreError, match=r"round 0: trainer\(s\) 0 did not arrive"):
        one.barrier(one)                       # trainer 0 is late: trainer 1's step fails ...
    zero.push(ONES)
    assert zero.barrier(zero) is True          # ... trainer 0 applies round 0 with its first stage
    one.push(ONES)                             # the daemon retries trainer 1's step (same batch)
    assert one.barrier(one) is False
    assert (zero.pull(["W"], {})["W"] == -1).all()          # mean of the two gradients, once
    assert one.io.meta("EXISTS", one.barrier.key("grad", 1, 1)) == 0     # not staged again
    assert zero.barrier.round == one.barrier.round == 1
    for s in (zero, one):
        s.close()


def test_a_batch_staged_too_late_goes_to_the_next_round(redis_url, redis_namespace):
    zero, dead = sync_stores(redis_url, redis_namespace, [0, 1])
    dead.push(ONES)                            # trainer 1 stages and arrives, then dies
    dead.io.meta("SADD", dead.barrier.key("arrived", 0), 1)
    zero.push(ONES)
    assert zero.barrier(zero) is True          # round 0 is applied with the dead trainer's batch
    (late,) = sync_stores(redis_url, redis_namespace, [1], timeout_s=0.5)
    late.barrier.round = 0                     # its replacement read the round just before it moved
    late.push(Gradients(dense={"W": np.full(2, 5, np.float32)}))
    with pytest.raises(StoreError, match=r"round 1: trainer\(s\) 0 did not arrive"):
        late.barrier(late)                     # round 0 went without its batch: it waits in round 1
    assert late.io.meta("GET", late.barrier.key("grad", 1, 1)) == late.barrier._staged
    assert (zero.pull(["W"], {})["W"] == -1).all()
    for s in (zero, dead, late):
        s.close()
