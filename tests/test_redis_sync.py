"""Sync mode: two trainers on halves of each batch reproduce one process on whole batches."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from streamtrain.errors import StoreError
from streamtrain.params import ParamSpec
from streamtrain.store import MemoryStore
from streamtrain.store.redis_store import RedisStore
from streamtrain.context import Gradients
from streamtrain.trainer import Trainer
from tests.fixtures_redis import OPTIMIZER_SETS, assert_snapshots_close, build, run, sequential_layers, stream


def run_halves(trainers, stores, batches, half: int):
    """Trainer w steps rows ``[w*half, (w+1)*half)`` of every batch, each in its own thread;
    returns the store's snapshot once both are done, and closes the stores."""
    errors = []

    def work(w):
        try:
            for b in batches:
                trainers[w].step(b.take(np.arange(half) + half * w))
        except Exception as err:                       # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(len(trainers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    snap = stores[0].snapshot()
    for s in stores:
        s.close()
    return snap


@pytest.mark.parametrize("where", ["x1", "cluster"])
def test_two_sync_trainers_match_one_process(where, redis_url, redis_cluster_url, redis_namespace):
    default, overrides = OPTIMIZER_SETS["adagrad+momentum+adam"]
    batches = stream(40, size=64, seed=100)
    # the reference: one process, whole batches, gradient of the batch mean
    ref_logloss, _, ref_snap = run(MemoryStore(), batches, default, overrides, reduction="mean")

    addr = {"urls": [redis_url]} if where == "x1" else {"cluster": redis_cluster_url}
    stores = [RedisStore({**addr, "namespace": redis_namespace, "mode": "sync", "trainers": 2,
                          "worker": w, "barrier_timeout_s": 20}) for w in range(2)]
    trainers = [Trainer(build(s, default, overrides, reduction="mean"), s) for s in stores]
    assert all(t.barrier is s.barrier for t, s in zip(trainers, stores))
    snap = run_halves(trainers, stores, batches, 32)
    assert_snapshots_close(snap, ref_snap)
    logloss = (trainers[0].progressive.logloss + trainers[1].progressive.logloss) / 2
    assert abs(logloss - ref_logloss) <= 1e-6


def test_barrier_timeout_names_the_missing_trainer(redis_url, redis_namespace):
    store = RedisStore({"urls": [redis_url], "namespace": redis_namespace, "mode": "sync",
                        "trainers": 3, "worker": 0, "barrier_timeout_s": 0.3})
    store.declare({"W": ParamSpec("W", (2,), init="zeros")}, {"type": "sgd", "lr": 1.0})
    store.push(Gradients(dense={"W": np.ones(2, np.float32)}))
    assert (store.pull(["W"], {})["W"] == 0).all()            # staged, not applied
    with pytest.raises(StoreError, match=r"round 0: trainer\(s\) 1, 2 did not arrive"):
        store.barrier(store)
    store.close()


def test_staged_gradients_carry_squares_and_combine_them():
    from streamtrain.store.redis_sync import combine, decode_grads, encode_grads
    a = Gradients(dense={"W": np.array([1.0, 2.0], np.float32)},
                  tables={"t": (np.array([3, 7], np.uint64), np.array([[1.0], [2.0]], np.float32))},
                  squares={"W": np.array([1.0, 4.0], np.float32), "t": np.array([[1.0], [3.0]], np.float32)})
    b = Gradients(dense={"W": np.array([1.0, 0.0], np.float32)},
                  tables={"t": (np.array([7, 8], np.uint64), np.array([[1.0], [1.0]], np.float32))},
                  squares={"W": np.array([2.0, 0.0], np.float32), "t": np.array([[5.0], [1.0]], np.float32)})
    again = decode_grads(encode_grads(a))
    np.testing.assert_array_equal(again.squares["t"], a.squares["t"])
    np.testing.assert_array_equal(again.squares["W"], a.squares["W"])
    out = combine([a, b], 2, "mean")
    np.testing.assert_allclose(out.dense["W"], [1.0, 1.0])
    np.testing.assert_allclose(out.squares["W"], [0.75, 1.0])             # (1+2)/4, (4+0)/4
    np.testing.assert_array_equal(out.tables["t"][0], [3, 7, 8])
    np.testing.assert_allclose(out.squares["t"][:, 0], [0.25, 2.0, 0.25])
    b.squares.pop("t")                                                     # one trainer sent none
    assert "t" not in combine([a, b], 2, "sum").squares


def test_sync_trainers_with_a_sequential_loss(redis_url, redis_namespace):
    """Each trainer solves its half of the batch from the same pulled rows; worker 0 applies the
    sum of both pushes (per-example squares included): the model learns and stays finite."""
    from streamtrain.graph import Graph, Schema
    batches = stream(30, size=64, seed=7, cardinality=8)
    stores = [RedisStore({"urls": [redis_url], "namespace": redis_namespace, "mode": "sync", "trainers": 2,
                          "worker": w, "barrier_timeout_s": 20, "sync_combine": "sum"}) for w in range(2)]
    trainers = []
    for s in stores:
        graph = Graph.from_config(sequential_layers(), Schema.of(batches[0]))
        s.declare(graph.params, {"type": "adagrad", "lr": 0.5})
        trainers.append(Trainer(graph, s))
    assert [layer.name for layer in trainers[0].engine.layers] == ["wide", "lin", "bias"]
    snap = run_halves(trainers, stores, batches, 32)
    wide = snap.tables["wide.table"]
    assert np.isfinite(wide["value"]).all() and np.abs(wide["value"]).max() > 0
    assert (wide["n"] > 0).all()                       # every row's accumulator saw its examples
    for t in trainers:
        assert np.isfinite(t.progressive.logloss) and t.progressive.logloss < 0.75
