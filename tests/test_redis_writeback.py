"""The redis store's write-back cache (``store.write_back_s``) against real redis-servers: one
trainer is bit-identical to the memory store, two trainers' changes are merged, a flush that
fails keeps its changes, and a job commits offsets only after the flush that wrote them."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.context import Gradients
from streamtrain.errors import ConfigError, StoreError
from streamtrain.graph import Graph, Schema
from streamtrain.job import Job
from streamtrain.params import ParamSpec
from streamtrain.store import MemoryStore, validate_store_config
from streamtrain.store.redis_store import RedisStore
from streamtrain.trainer import Trainer
from tests.fixtures_redis import OPTIMIZER_SETS, assert_snapshots_close, run, sequential_layers, stream

ROOT = Path(__file__).resolve().parents[1]
BATCHES = stream(80)


def _store(url, ns, every, **more):
    return RedisStore({"urls": [url], "namespace": ns, "write_back_s": every, **more})


@pytest.mark.parametrize("every", [1e-6, 0.02, 3600.0])      # every push, some, only at the snapshot
@pytest.mark.parametrize("opts", list(OPTIMIZER_SETS))
def test_one_trainer_is_bit_identical_to_the_memory_store(opts, every, redis_url, redis_namespace):
    store = _store(redis_url, redis_namespace, every)
    assert store.wb is not None and store.assigns
    try:
        logloss, losses, snap = run(store, BATCHES, *OPTIMIZER_SETS[opts])
    finally:
        store.close()
    m_logloss, m_losses, m_snap = run(MemoryStore(), BATCHES, *OPTIMIZER_SETS[opts])
    assert logloss == m_logloss
    np.testing.assert_array_equal(losses, m_losses)
    assert_snapshots_close(snap, m_snap, atol=0.0)


def _sequential(store, batches, rule, background=False):
    """(predictions, snapshot, params) of the sequential model over ``batches``; ``background``:
    a background flush started after every step (finished when its answer is in, or waited for
    every third step)."""
    layers = sequential_layers()
    for layer in layers:
        if layer.get("optimizer", {}).get("type") == "adagrad" and rule != "adagrad":
            layer["optimizer"] = {"type": "sgd", "lr": 0.1}
    graph = Graph.from_config(layers, Schema.of(batches[0]))
    store.declare(graph.params, {"type": "adagrad", "lr": 0.5})
    trainer = Trainer(graph, store)
    assert trainer.engine is not None and trainer.engine.assign == store.assigns
    preds = []
    for i, b in enumerate(batches):
        preds.append(trainer.step(b).predictions)
        if background and store.flushes_in_background:
            store.flush_poll(wait=i % 3 == 2)
            store.flush_begin()
    return np.concatenate(preds), store.snapshot(), graph.params


@pytest.mark.parametrize("rule", ["adagrad", "sgd"])
@pytest.mark.parametrize("every", [1e-6, 3600.0])
def test_per_example_engine_is_bit_identical_to_the_memory_store(rule, every, redis_url, redis_namespace):
    """LR learnt per example (FTRL wide part, Adagrad or SGD linear term and bias): the engine
    hands over final rows (``assigns``) to the local copy, as to the memory store."""
    store = _store(redis_url, redis_namespace, every)
    try:
        preds, snap, _ = _sequential(store, BATCHES[:40], rule)
    finally:
        store.close()
    m_preds, m_snap, _ = _sequential(MemoryStore(), BATCHES[:40], rule)
    np.testing.assert_array_equal(preds, m_preds)
    assert_snapshots_close(snap, m_snap, atol=0.0)


SPECS = {"t": ParamSpec("t", (3,), table=True, init="zeros"), "W": ParamSpec("W", (2,), init="zeros")}


def _sgd_store(url, ns, every=3600.0):
    store = _store(url, ns, every)
    store.declare(SPECS, {"type": "sgd", "lr": 1.0})
    return store


def _push(store, ids, g):
    store.pull(["W"], {"t": ids})
    store.push(Gradients(dense={"W": np.full(2, g, np.float32)},
                         tables={"t": (ids, np.full((len(ids), 3), g, np.float32))}))


def test_two_trainers_on_the_same_rows_lose_no_change(redis_url, redis_namespace):
    """SGD, lr 1: final = initial (0) - every gradient of both trainers, whoever flushes first;
    the second flush conflicts on every row and writes current + (local - base)."""
    a, b = _sgd_store(redis_url, redis_namespace), _sgd_store(redis_url, redis_namespace)
    ids = np.arange(10, dtype=np.uint64)
    try:
        for _ in range(3):
            _push(a, ids, 1.0)                       # a: -3 per row
        for _ in range(2):
            _push(b, ids[:6], 2.0)                   # b: -4 on rows 0..5
        assert a.unflushed and b.unflushed
        assert a.flush() == 10 + 1
        assert b.flush() == 6 + 1 and b.wb.conflicts == 6 + 1    # every row of b was written by a
        want = np.where(np.arange(10)[:, None] < 6, -7.0, -3.0) * np.ones((10, 3))
        np.testing.assert_array_equal(b.pull([], {"t": ids[:6]})["t"], want[:6])   # merged locally
        # rows a wrote in its flush are its own until its next flush: its view is one window old
        np.testing.assert_array_equal(a.pull(["W"], {"t": ids})["t"], -3 * np.ones((10, 3)))
        _push(a, ids, 1.0)
        a.flush()                                    # conflicts on rows 0..5 and W: merged
        assert a.wb.conflicts == 6 + 1
        np.testing.assert_array_equal(a.pull(["W"], {"t": ids})["t"], want - 1.0)
        np.testing.assert_array_equal(a.pull(["W"], {})["W"], [-8.0, -8.0])
        b.flush()                                    # nothing dirty; b's rows now stale: re-read
        np.testing.assert_array_equal(b.pull([], {"t": ids})["t"], want - 1.0)
        fresh = _sgd_store(redis_url, redis_namespace, every=0)
        np.testing.assert_array_equal(fresh.pull(["W"], {"t": ids}, create=False)["t"], want - 1.0)
        fresh.close()
    finally:
        a.close()
        b.close()


def test_rows_are_written_only_by_a_flush(redis_url, redis_namespace):
    a = _sgd_store(redis_url, redis_namespace)
    reader = _sgd_store(redis_url, redis_namespace, every=0)
    try:
        ids = np.array([7, 8], np.uint64)
        _push(a, ids, 1.0)
        np.testing.assert_array_equal(reader.pull([], {"t": ids}, create=False)["t"], np.zeros((2, 3)))
        assert a.flush() == 3 and not a.unflushed
        np.testing.assert_array_equal(reader.pull([], {"t": ids}, create=False)["t"], -np.ones((2, 3)))
        assert a.flush() == 0                        # nothing dirty: nothing written
    finally:
        a.close()
        reader.close()


@pytest.mark.parametrize("background", [False, True])
def test_a_failed_flush_keeps_its_changes(background, redis_factory, redis_namespace, tmp_path):
    server = redis_factory.start("--appendonly", "yes", "--appendfsync", "always", workdir=str(tmp_path))
    store = _store(server.url, redis_namespace, 3600.0, retry={"initial_s": 0.02, "max_s": 0.1, "give_up_s": 0.3})
    store.declare(SPECS, {"type": "sgd", "lr": 1.0})
    ids = np.arange(4, dtype=np.uint64)
    try:
        _push(store, ids, 1.0)
        store.flush()
        _push(store, ids, 1.0)
        server.stop()
        with pytest.raises(StoreError):
            if background:                           # the rows are clean while in flight ...
                assert store.flush_begin() and store.unflushed
                store.flush_poll(wait=True)
            else:
                store.flush()
        assert store.unflushed and store.wb.flight is None        # ... and dirty again after
        _push(store, ids, 1.0)                       # training goes on locally (rows cached)
        server.start()
        assert store.flush() == 5
        check = _store(server.url, redis_namespace, 0)
        check.declare(SPECS, {"type": "sgd", "lr": 1.0})
        np.testing.assert_array_equal(check.pull(["W"], {"t": ids}, create=False)["t"], -3 * np.ones((4, 3)))
        check.close()
    finally:
        store.close()


def test_sync_mode_with_write_back_is_a_config_error():
    problems = validate_store_config({"backend": "redis", "mode": "sync", "write_back_s": 1.0})
    assert any("write_back_s" in p for p, _ in problems), problems
    assert not validate_store_config({"backend": "redis", "mode": "sync"})     # the default is ignored there
    with pytest.raises(ConfigError, match="store.write_back_s"):
        RedisStore({"mode": "sync", "write_back_s": 0.5})


def test_a_gated_table_writes_through(redis_url, redis_namespace):
    store = RedisStore({"urls": [redis_url], "namespace": redis_namespace, "tables": {"t": {"admit_after": 2}}})
    try:
        assert store.wb is None and not store.assigns
    finally:
        store.close()


def _job(tmp_path, url, ns, examples, every):
    cfg = configmod.load(ROOT / "examples" / "synthetic.json",
                         [f"checkpoint.dir={tmp_path / 'ckpt'}", "metrics.enabled=false"])
    cfg["store"] = {"backend": "redis", "urls": [url], "namespace": ns, "write_back_s": every}
    return Job(configmod.validate(cfg), max_examples=examples)


def test_a_job_commits_offsets_only_after_the_flush(tmp_path, redis_url, redis_namespace):
    """No flush is due within the run (write_back_s large): nothing is committed until the
    drain at the end flushes, then every batch's offsets are, after the rows landed."""
    job = _job(tmp_path, redis_url, redis_namespace, 256 * 12, 3600.0)
    events = []
    flush, commit = job.store.flush, job.source.commit
    job.store.flush = lambda: (events.append(("flush", job.store.unflushed)), flush())[1]
    job.source.commit = lambda offsets: (events.append(("commit", job.store.unflushed)), commit(offsets))[1]
    summary = job.run()
    assert summary["batches"] == 12
    commits = [i for i, (what, _) in enumerate(events) if what == "commit"]
    first_flush = next(i for i, (what, _) in enumerate(events) if what == "flush")
    assert len(commits) == 12 and min(commits) > first_flush, events
    assert events[first_flush][1] is True                      # the drain had rows to write
    assert not any(dirty for what, dirty in events if what == "commit")   # committed rows are in Redis
    assert job.last_checkpoint                               # the checkpoint came after the flush


def test_a_due_flush_commits_what_it_wrote(tmp_path, redis_url, redis_namespace):
    """Flushes due after every step run in the background while training goes on; a batch's
    offsets are committed only once a flush that began after it has finished (or the drain's)."""
    job = _job(tmp_path, redis_url, redis_namespace, 256 * 12, 1e-6)      # due after every step
    store = job.store
    assert store.flushes_in_background
    covered, begun, committed = [0], {}, []
    begin, poll, flush, commit = store.flush_begin, store.flush_poll, store.flush, job.source.commit

    def flush_begin():
        started = begin()
        if started:
            begun["batches"] = job.trainer.batches    # every batch trained so far is in this flush
        return started

    def flush_poll(wait=False):
        done = poll(wait)
        if done is not None:
            covered[0] = begun["batches"]
        return done

    def flush_():
        n = job.trainer.batches
        out = flush()
        covered[0] = n
        return out

    def commit_(offsets):
        committed.append(1)
        assert len(committed) <= covered[0]            # the batch's rows are in Redis (a flush of
        # later batches' rows may be in flight: the job takes what is durable, then commits it)
        return commit(offsets)

    store.flush_begin, store.flush_poll, store.flush, job.source.commit = flush_begin, flush_poll, flush_, commit_
    job.run()
    assert len(committed) == 12
    stats = job.store.stats                       # the metrics' counters
    assert stats.flushes >= 6 and stats.rows_flushed > 0 and stats.flush_conflicts == 0 and stats.flush_seconds > 0


@pytest.mark.parametrize("rule", ["adagrad", "sgd"])
def test_background_flushes_are_bit_identical_to_the_memory_store(rule, redis_url, redis_namespace):
    store = _store(redis_url, redis_namespace, 1e-6)
    try:
        preds, snap, params = _sequential(store, BATCHES, rule, background=True)
        assert store.wb.flushes > 10 and not store.unflushed
    finally:
        store.close()
    m_preds, m_snap, _ = _sequential(MemoryStore(), BATCHES, rule, background=True)
    np.testing.assert_array_equal(preds, m_preds)
    assert_snapshots_close(snap, m_snap, atol=0.0)
    check = _store(redis_url, redis_namespace, 0)              # and Redis holds exactly that
    try:
        check.declare(params, {"type": "adagrad", "lr": 0.5})
        assert_snapshots_close(check.snapshot(), m_snap, atol=0.0)
    finally:
        check.close()


def test_a_background_flush_that_conflicts_merges_before_it_is_done(redis_url, redis_namespace):
    """Two trainers: b's background flush finds every row written by a; ``flush_poll``
    merges them and writes them before it reports the flush done."""
    a, b = _sgd_store(redis_url, redis_namespace), _sgd_store(redis_url, redis_namespace)
    ids = np.arange(10, dtype=np.uint64)
    try:
        _push(a, ids, 1.0)
        _push(b, ids[:6], 2.0)
        assert a.flush_begin() and not a.flush_begin()       # one in flight at a time
        _push(a, ids, 1.0)                                   # training goes on meanwhile
        assert a.flush_poll(wait=True) == 10 + 1 and a.unflushed
        assert b.flush_begin()
        assert b.flush_poll(wait=True) == 6 + 1 and b.wb.conflicts == 6 + 1 and not b.unflushed
        want = np.where(np.arange(10)[:, None] < 6, -3.0, -1.0) * np.ones((10, 3))
        fresh = _sgd_store(redis_url, redis_namespace, every=0)
        np.testing.assert_array_equal(fresh.pull(["W"], {"t": ids}, create=False)["t"], want)
        assert a.flush() == 10 + 1                           # a's second push: merged with b's
        np.testing.assert_array_equal(fresh.pull(["W"], {"t": ids}, create=False)["t"], want - 1.0)
        np.testing.assert_array_equal(fresh.pull(["W"], {})["W"], [-4.0, -4.0])
        fresh.close()
    finally:
        a.close()
        b.close()


def test_shards_count_errors_from_two_threads_exactly(redis_url):
    """The flush thread and the training thread share one ``Shards``: its error count is
    made under a lock, so no increment is lost."""
    import threading

    from streamtrain.store.base import StoreStats
    from streamtrain.store.redis_shards import Shards

    stats = StoreStats()
    shards = Shards(urls=[redis_url], stats=stats)
    try:
        def count():
            for _ in range(20000):
                shards._count_error()
        threads = [threading.Thread(target=count) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert stats.errors == 40000
    finally:
        shards.close()
