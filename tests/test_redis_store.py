"""The redis store against real redis-server processes: equality with the memory store,
no lost updates across processes, exact pulls, lifecycle, checkpoints, failures."""
from __future__ import annotations

import logging
import multiprocessing as mp
import time

import numpy as np
import pytest
import redis

from streamtrain import checkpoint
from streamtrain.context import Gradients
from streamtrain.errors import StoreError
from streamtrain.params import ParamSpec
from streamtrain.store import MemoryStore, make_store, validate_store_config
from streamtrain.store.redis_store import RedisStore
from tests.fixtures_redis import OPTIMIZER_SETS, assert_snapshots_close, build, run, sequential_layers, stream

BATCHES = stream(300)


@pytest.fixture(scope="module")
def memory_runs():
    return {k: run(MemoryStore(), BATCHES, *v) for k, v in OPTIMIZER_SETS.items()}


def _where(kind, redis_url, redis_urls3, redis_cluster_url):
    return {"x1": {"urls": [redis_url]}, "x3": {"urls": redis_urls3},
            "cluster": {"cluster": redis_cluster_url}}[kind]


@pytest.mark.parametrize("kind", ["x1", "x3", "cluster"])
@pytest.mark.parametrize("opts", list(OPTIMIZER_SETS))
def test_memory_and_redis_agree(kind, opts, memory_runs, redis_url, redis_urls3, redis_cluster_url,
                                redis_namespace):
    where = _where(kind, redis_url, redis_urls3, redis_cluster_url)
    store = make_store({"backend": "redis", "namespace": redis_namespace, **where})
    try:
        logloss, losses, snap = run(store, BATCHES, *OPTIMIZER_SETS[opts])
    finally:
        store.close()
    m_logloss, m_losses, m_snap = memory_runs[opts]
    assert abs(logloss - m_logloss) <= 1e-6
    np.testing.assert_allclose(losses, m_losses, rtol=0, atol=1e-6)
    assert_snapshots_close(snap, m_snap)


def _hammer(url, ns, worker, pushes, out):
    store = RedisStore({"urls": [url], "namespace": ns})
    store.declare({"t": ParamSpec("t", (4,), table=True, init="zeros"),
                   "W": ParamSpec("W", (3,), init="zeros")}, {"type": "sgd", "lr": 1.0})
    ids = np.arange(0, 64, dtype=np.uint64)
    grads = Gradients(dense={"W": np.ones(3, np.float32)}, tables={"t": (ids, np.ones((64, 4), np.float32))})
    for i in range(pushes):
        if i % 2:
            store.pull(["W"], {"t": ids})     # the push then starts from (possibly stale) pulled rows
        store.push(grads)
    out.put((worker, store.stats.rows_pushed))
    store.close()


@pytest.mark.parametrize("trainers", [2, 4])
def test_concurrent_processes_lose_no_update(trainers, redis_url, redis_namespace):
    pushes = 40
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(redis_url, redis_namespace, w, pushes, out)) for w in range(trainers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = RedisStore({"urls": [redis_url], "namespace": redis_namespace})
    store.declare({"t": ParamSpec("t", (4,), table=True, init="zeros"),
                   "W": ParamSpec("W", (3,), init="zeros")}, {"type": "sgd", "lr": 1.0})
    got = store.pull(["W"], {"t": np.arange(0, 64, dtype=np.uint64)}, create=False)
    store.close()
    np.testing.assert_array_equal(got["t"], np.full((64, 4), -float(trainers * pushes)))
    np.testing.assert_array_equal(got["W"], np.full(3, -float(trainers * pushes)))


def test_pull_reads_exactly_the_unique_rows(redis_url, redis_namespace):
    store = make_store({"backend": "redis", "urls": [redis_url], "namespace": redis_namespace, "write_back_s": 0})
    graph = build(store, {"type": "adagrad"})
    client = redis.Redis.from_url(redis_url)
    batch = stream(1, size=64, seed=7)[0]
    ctx = graph.context()
    graph.feed(ctx, batch)
    dense, tables = graph.needs(ctx)
    store.pull(dense, tables)                      # creates the rows
    unique = sum(len(ids) for ids in tables.values())
    ns_keys = lambda: len(client.keys(f"*{redis_namespace}*"))   # noqa: E731 (other tests' keys expire meanwhile)
    keys_before = ns_keys()
    client.config_resetstat()
    before = client.info("stats")
    store.pull(dense, tables)
    after = client.info("stats")
    stats = client.info("commandstats")
    reads = (after["keyspace_hits"] - before["keyspace_hits"]) + (after["keyspace_misses"] - before["keyspace_misses"])
    assert reads == unique + len(dense)             # every unique row once, each dense block once
    assert after["keyspace_misses"] == before["keyspace_misses"]
    assert stats["cmdstat_mget"]["calls"] == 1      # one round trip on one server
    assert set(stats) == {"cmdstat_mget", "cmdstat_config|resetstat", "cmdstat_info"}
    assert ns_keys() == keys_before
    store.close()


def test_admission_ttl_and_cap(redis_url, redis_namespace):
    store = RedisStore({"urls": [redis_url], "namespace": redis_namespace,
                        "tables": {"adm": {"admit_after": 3}, "ttl": {"ttl_s": 0.3}, "cap": {"max_rows": 5}}})
    specs = {n: ParamSpec(n, (2,), table=True, init="ones") for n in ("adm", "ttl", "cap")}
    store.declare(specs, {"type": "sgd", "lr": 0.5})
    ids = np.array([1, 2], np.uint64)
    g = np.ones((2, 2), np.float32)
    for sighting in range(1, 4):
        got = store.pull([], {"adm": ids})["adm"]
        assert (got == (1.0 if sighting >= 3 else 0.0)).all(), sighting     # zeros until admitted
        store.push(Gradients(tables={"adm": (ids, g)}))
    assert (store.pull([], {"adm": ids})["adm"] == 0.5).all()               # one update, after admission

    store.pull([], {"ttl": np.arange(10, dtype=np.uint64)})
    store.push(Gradients(tables={"ttl": (np.arange(5, dtype=np.uint64), np.ones((5, 2), np.float32))}))
    counts = store.lifecycle()["ttl"]          # (a loaded machine may already have let some expire)
    assert counts["created"] == 10 and counts["live"] + counts["expired"] == 10
    deadline = time.monotonic() + 30          # every row expires 0.3 s after its last write
    while (counts := store.lifecycle())["ttl"]["live"]:
        assert time.monotonic() < deadline, counts["ttl"]
        time.sleep(0.05)
    assert counts["ttl"]["live"] == 0 and counts["ttl"]["expired"] == 10
    assert (store.pull([], {"ttl": np.arange(3, dtype=np.uint64)})["ttl"] == 1.0).all()   # recreated fresh

    got = store.pull([], {"cap": np.arange(8, dtype=np.uint64)})["cap"]
    assert (got[:5] == 1.0).all() and (got[5:] == 0.0).all()
    counts = store.lifecycle()
    assert counts["adm"]["admitted"] == 2 and counts["adm"]["dropped"] == 4
    assert counts["cap"] == {**counts["cap"], "live": 5, "rejected": 3, "created": 5}
    assert store.stats.table_rows["cap"] == 5
    store.close()


@pytest.mark.parametrize("kind", ["x1", "cluster"])
def test_checkpoint_round_trips(kind, tmp_path, redis_url, redis_urls3, redis_cluster_url, redis_namespace):
    default, overrides = OPTIMIZER_SETS["adagrad+momentum+adam"]
    mem = MemoryStore()
    run(mem, BATCHES[:40], default, overrides)
    path = checkpoint.write(tmp_path / "a", mem.snapshot(), step=40)

    where = _where(kind, redis_url, redis_urls3, redis_cluster_url)
    rs = RedisStore({"namespace": redis_namespace, **where})
    build(rs, default, overrides)
    rs.restore(checkpoint.read(path)[0])
    assert_snapshots_close(rs.snapshot(), mem.snapshot(), atol=0)
    path2 = checkpoint.write(tmp_path / "b", rs.snapshot(), step=40)     # redis -> disk
    rs.close()

    back = MemoryStore()
    build(back, default, overrides)
    back.restore(checkpoint.read(path2)[0])
    assert_snapshots_close(back.snapshot(), mem.snapshot(), atol=0)
    # and training continues identically from the restored stores
    l1 = run(back, BATCHES[40:60], default, overrides)[0]
    l2 = run(mem, BATCHES[40:60], default, overrides)[0]
    assert l1 == l2


def test_embedded_server_and_config_errors():
    assert validate_store_config({"backend": "redis", "mode": "later"}) == \
        [("mode", "expected one of async, sync, got 'later'")]
    store = make_store({"backend": "redis"})
    pid = store.server.proc.pid
    assert store.ready() and "embedded" in store.describe()
    store.declare({"W": ParamSpec("W", (2,))}, {"type": "sgd"})
    store.close()
    with pytest.raises(ProcessLookupError):
        import os
        os.kill(pid, 0)


def test_restart_mid_run_retries_then_succeeds(redis_factory, redis_namespace, tmp_path, caplog):
    """AOF with fsync always: a SIGKILLed server loses nothing acknowledged; the run retries
    through the outage and ends with exactly the memory store's weights."""
    server = redis_factory.start("--appendonly", "yes", "--appendfsync", "always", workdir=str(tmp_path))
    default, overrides = OPTIMIZER_SETS["adagrad+momentum+adam"]
    store = RedisStore({"urls": [server.url], "namespace": redis_namespace, "write_back_s": 0,
                        "retry": {"initial_s": 0.05, "max_s": 0.2, "give_up_s": 20}})
    from streamtrain.trainer import Trainer
    graph = build(store, default, overrides)
    trainer = Trainer(graph, store)
    batches = BATCHES[:60]
    caplog.set_level(logging.WARNING, "streamtrain.store.redis")
    for i, b in enumerate(batches):
        if i == 30:
            server.proc.kill()
            server.proc.wait()
            import threading
            threading.Timer(0.5, lambda: server.start()).start()
        trainer.step(b)
    assert store.stats.errors > 0
    assert any("retry" in r.message for r in caplog.records)
    snap = store.snapshot()
    store.close()
    mem_logloss, _, mem_snap = run(MemoryStore(), batches, default, overrides)
    assert abs(trainer.progressive.logloss - mem_logloss) <= 1e-6
    assert_snapshots_close(snap, mem_snap)


def test_push_that_cannot_be_applied_raises(redis_factory, redis_namespace):
    server = redis_factory.start()
    store = RedisStore({"urls": [server.url], "namespace": redis_namespace, "write_back_s": 0,
                        "retry": {"initial_s": 0.02, "max_s": 0.1, "give_up_s": 0.5}})
    store.declare({"t": ParamSpec("t", (2,), table=True)}, {"type": "sgd"})
    ids = np.array([1, 2], np.uint64)
    store.pull([], {"t": ids})
    server.stop()
    with pytest.raises(StoreError, match="failed after"):
        store.push(Gradients(tables={"t": (ids, np.ones((2, 2), np.float32))}))
    store.close()


def test_snapshot_of_a_table_with_no_rows_yet(redis_url):
    """A declared table nobody has pulled from snapshots as empty arrays (it used to raise)."""
    from streamtrain.params import ParamSpec
    from streamtrain.store.memory import MemoryStore
    from streamtrain.store.redis_store import RedisStore

    spec = ParamSpec("emb.table", (4,), table=True)
    store = RedisStore({"backend": "redis", "urls": [redis_url], "namespace": "empty-snapshot"})
    try:
        store.declare({spec.name: spec}, {"type": "adam"})
        snap = store.snapshot()
        assert snap.tables[spec.name]["ids"].shape == (0,)
        assert snap.tables[spec.name]["value"].shape == (0, 4)
        mem = MemoryStore()
        mem.declare({spec.name: spec}, {"type": "adam"})
        mem.restore(snap)
        assert len(mem.tables[spec.name]) == 0
    finally:
        store.close()


def _sequential_run(store, batches):
    from streamtrain.graph import Graph, Schema
    from streamtrain.trainer import Trainer
    graph = Graph.from_config(sequential_layers(), Schema.of(batches[0]))
    store.declare(graph.params, {"type": "adagrad", "lr": 0.5})
    trainer = Trainer(graph, store)
    preds = np.concatenate([trainer.step(b).predictions for b in batches])
    return preds, store.snapshot()


@pytest.mark.parametrize("kind", ["x1", "x3"])
def test_sequential_model_memory_and_redis_agree(kind, redis_url, redis_urls3, redis_cluster_url, redis_namespace):
    """Per-example squares and the pulled optimizer state take the same path through Redis. The
    memory store writes the engine's values rounded once to float32 (``assigns``), Redis steps
    them by the combined gradient in float32: an ulp apart at most (rtol 1e-6)."""
    batches = stream(40, cardinality=8)
    m_preds, m_snap = _sequential_run(MemoryStore(), batches)
    store = make_store({"backend": "redis", "namespace": redis_namespace,
                        **_where(kind, redis_url, redis_urls3, redis_cluster_url)})
    try:
        preds, snap = _sequential_run(store, batches)
    finally:
        store.close()
    np.testing.assert_allclose(preds, m_preds, atol=1e-5)
    assert_snapshots_close(snap, m_snap, atol=1e-5, rtol=1e-6)


def test_pull_states_reports_the_pulled_rows(redis_url, redis_namespace):
    specs = {"t": ParamSpec("t", (2,), table=True, init="zeros"), "W": ParamSpec("W", (3,), init="zeros")}
    ids = np.array([5, 9], np.uint64)
    grads = Gradients(dense={"W": np.ones(3, np.float32)},
                      tables={"t": (ids, np.full((2, 2), 2.0, np.float32))},
                      squares={"t": np.full((2, 2), 3.0, np.float32)})
    got = []
    for store in (MemoryStore(), RedisStore({"urls": [redis_url], "namespace": redis_namespace})):
        store.declare(specs, {"type": "adagrad", "lr": 0.1})
        store.pull(["W"], {"t": ids})
        store.push(grads)
        store.pull(["W"], {"t": ids[::-1].copy()})
        got.append(store.pull_states(["t", "W"]))
        store.close()
    for states in got:
        np.testing.assert_allclose(states["t"]["n"], 3.0)        # the squares, not g² = 4
        np.testing.assert_allclose(states["W"]["n"], 1.0)        # no squares sent: g²
        assert states["W"]["n"].shape == (3,) and states["t"]["n"].shape == (2, 2)


@pytest.mark.parametrize("kind", ["x1", "cluster"])
def test_a_push_whose_answers_were_lost_is_applied_once(kind, redis_url, redis_urls3, redis_cluster_url,
                                                        redis_namespace):
    """The connection drops after the scripts ran: the retry returns their receipts' answers
    instead of writing again. A finished push's receipts are deleted by the next push."""
    from streamtrain.store import redis_keys, redis_scripts
    store = RedisStore({"namespace": redis_namespace, "write_back_s": 0, **_where(kind, redis_url, redis_urls3, redis_cluster_url),
                        "retry": {"initial_s": 0.01, "max_s": 0.05, "give_up_s": 10}})
    store.declare({"t": ParamSpec("t", (4,), table=True, init="zeros")}, {"type": "sgd", "lr": 1.0})
    n = 3 * redis_scripts.MAX_ROWS + 7                       # several script calls per push
    ids = np.arange(n, dtype=np.uint64)
    grads = Gradients(tables={"t": (ids, np.ones((n, 4), np.float32))})
    receipts = redis_keys.namespace_pattern(redis_namespace) + "receipt:*"
    try:
        store.pull([], {"t": ids})                          # creates the rows (one push of receipts)
        store.push(grads)
        first = set(store.io.scan(receipts))
        assert first
        run, lost = store.shards.run, []

        def run_then_drop(groups):                          # the scripts run, their answers are lost
            answers = run(groups)
            if not lost and any(c[0] == "EVALSHA" for cmds in groups.values() for c in cmds):
                lost.append(True)
                raise redis.ConnectionError("connection dropped after the scripts ran")
            return answers
        store.shards.run = run_then_drop
        store.push(grads)
        store.shards.run = run
        assert lost
        second = set(store.io.scan(receipts))
        assert second and not (first & second)             # the first push's receipts are gone
        w = store.pull([], {"t": ids}, create=False)["t"]
        np.testing.assert_array_equal(w, -2.0)              # two pushes of lr * 1, none applied twice
    finally:
        store.close()
