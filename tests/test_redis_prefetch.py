"""The redis store reads batch k+1's rows while batch k computes (redis_prefetch): one trainer
trains exactly as without it (and as the memory store); a row another trainer writes meanwhile
is seen one batch stale by the forward pass, and its update is still not lost."""
from pathlib import Path

import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.context import Gradients
from streamtrain.graph import Graph, Schema
from streamtrain.job import Job
from streamtrain.params import ParamSpec
from streamtrain.store import MemoryStore, make_store
from streamtrain.store.redis_store import RedisStore
from streamtrain.trainer import Trainer
from tests.fixtures_redis import OPTIMIZER_SETS, assert_snapshots_close, layers, sequential_layers, stream

ROOT = Path(__file__).resolve().parents[1]
BATCHES = stream(60)


def run_ahead(store, batch_layers, default):
    """Train with the next batch handed to ``prefetch`` before each step, as the job does."""
    graph = Graph.from_config(batch_layers, Schema.of(BATCHES[0]))
    store.declare(graph.params, default)
    trainer = Trainer(graph, store)
    losses = []
    for i, batch in enumerate(BATCHES):
        if i + 1 < len(BATCHES):
            trainer.prefetch(BATCHES[i + 1])
        losses.append(trainer.step(batch).loss)
    return np.array(losses), store.snapshot()


MODELS = {"adagrad+momentum+adam": lambda: (layers(OPTIMIZER_SETS["adagrad+momentum+adam"][1]),
                                            OPTIMIZER_SETS["adagrad+momentum+adam"][0]),
          "sequential ftrl": lambda: (sequential_layers(), {"type": "adagrad", "lr": 0.05})}


@pytest.mark.parametrize("model", list(MODELS))
def test_read_ahead_trains_exactly_as_the_memory_store(model, redis_url, redis_namespace):
    batch_layers, default = MODELS[model]()
    m_losses, m_snap = run_ahead(MemoryStore(), batch_layers, default)
    store = make_store({"backend": "redis", "urls": [redis_url], "namespace": redis_namespace, "write_back_s": 0})
    try:
        losses, snap = run_ahead(store, batch_layers, default)
        hits, misses = store.ahead.hits, store.ahead.misses
    finally:
        store.close()
    assert (hits, misses) == (len(BATCHES) - 1, 0)          # every pull after the first was read ahead
    np.testing.assert_allclose(losses, m_losses, rtol=0, atol=1e-6)
    # a sequential model's rows: the memory store writes the engine's values rounded once to
    # float32, redis steps them by the combined gradient in float32: an ulp apart at most
    assert_snapshots_close(snap, m_snap, rtol=1e-6 if model.startswith("sequential") else 0.0)


def _store(url, ns):
    store = RedisStore({"urls": [url], "namespace": ns, "write_back_s": 0})
    store.declare({"t": ParamSpec("t", (4,), table=True, init="zeros"), "W": ParamSpec("W", (3,), init="zeros")},
                  {"type": "sgd", "lr": 1.0})
    return store


def test_a_row_another_trainer_writes_meanwhile_is_one_batch_stale_and_not_lost(redis_url, redis_namespace):
    a, b = _store(redis_url, redis_namespace), _store(redis_url, redis_namespace)
    ids = np.arange(16, dtype=np.uint64)
    ones = Gradients(dense={"W": np.ones(3, np.float32)}, tables={"t": (ids, np.ones((16, 4), np.float32))})
    try:
        a.pull(["W"], {"t": ids})
        a.push(ones)                                           # a's own write: -1 everywhere
        a.prefetch(["W"], {"t": ids})
        a.ahead.thread.join()                                  # the read ahead is done ...
        b.pull(["W"], {"t": ids})
        b.push(ones)                                           # ... before b writes: -2 in Redis
        seen = a.pull(["W"], {"t": ids})
        assert a.ahead.hits == 1
        np.testing.assert_array_equal(seen["t"], np.full((16, 4), -1.0))   # one write stale
        a.push(ones)                                           # CAS sees b's write: re-read, recompute
        got = b.pull(["W"], {"t": ids}, create=False)
    finally:
        a.close()
        b.close()
    np.testing.assert_array_equal(got["t"], np.full((16, 4), -3.0))
    np.testing.assert_array_equal(got["W"], np.full(3, -3.0))


def test_a_job_reads_ahead_on_the_redis_store_with_the_memory_store_results(redis_url, redis_namespace):
    def predictions(store_sets, waits=False):
        cfg = configmod.validate(configmod.load(ROOT / "examples" / "synthetic.json", [
            "metrics.enabled=false", "checkpoint.dir=null", *store_sets]))
        job = Job(cfg, max_examples=256 * 12)
        if waits:                          # a source that may wait for data (Kafka) is not read ahead
            job.source.waits_for_data = True
        out = []
        job.hooks.append(lambda job, batch, result: out.append(np.array(result.predictions).ravel()))
        job.run()
        return np.concatenate(out), getattr(job.store, "ahead", None)

    mem, _ = predictions([])
    red, ahead = predictions(["store.backend=redis", f"store.urls=[\"{redis_url}\"]", "store.write_back_s=0",
                              f"store.namespace={redis_namespace}"])
    assert ahead.hits == 11                                  # batches 2..12 were read ahead
    np.testing.assert_allclose(red, mem, rtol=0, atol=1e-6)
    red, ahead = predictions(["store.backend=redis", f"store.urls=[\"{redis_url}\"]", "store.write_back_s=0",
                              f"store.namespace={redis_namespace}x"], waits=True)
    assert ahead.hits == 0
    np.testing.assert_allclose(red, mem, rtol=0, atol=1e-6)


def test_a_lost_compare_and_set_while_reading_ahead_is_retried_not_fatal(redis_url, redis_namespace):
    """Another trainer wins the race on a dense parameter while this store reads ahead: the
    first compare-and-set writes nothing (a dense parameter's attempt records no rows), the
    retry writes it. The read ahead then takes the retry's write; it used to fail with an
    IndexError on the empty attempt, ending the trainer (two trainers, one file each)."""
    a, b = _store(redis_url, redis_namespace), _store(redis_url, redis_namespace)
    ids = np.arange(16, dtype=np.uint64)
    ones = Gradients(dense={"W": np.ones(3, np.float32)}, tables={"t": (ids, np.ones((16, 4), np.float32))})
    try:
        a.pull(["W"], {"t": ids})
        b.pull(["W"], {"t": ids})
        b.push(ones)                                           # b wins: a's tags are stale now
        a.prefetch(["W"], {"t": ids})                          # a reads its next batch ahead ...
        a.push(ones)                                           # ... while its push loses, then retries
        seen = a.pull(["W"], {"t": ids})
        assert a.ahead.hits == 1
    finally:
        a.close()
        b.close()
    np.testing.assert_array_equal(seen["W"], np.full(3, -2.0))
    np.testing.assert_array_equal(seen["t"], np.full((16, 4), -2.0))
