"""The graph store, both backends (Redis: a real server and a real 3-node Cluster): recent-K
distinct neighbours in one order on every backend, idempotent inserts, features,
snapshot/restore across backends, TTL; sampling: fanouts, determinism, the block layout."""
from __future__ import annotations

import time

import numpy as np
import pytest

from streamtrain.errors import ConfigError
from streamtrain.graphstore import GRAPH_STORES, make_graph_store
from streamtrain.graphstore.sampling import Sampler, sample_hop


@pytest.fixture(params=["memory", "redis", "cluster"])
def make_store(request):
    made = []

    def make(**opts):
        backend = "memory" if request.param == "memory" else "redis"
        cfg = {"backend": backend, **GRAPH_STORES.get(backend).test_params(), **opts}
        if request.param == "redis":
            cfg = {"url": request.getfixturevalue("redis_url"), **cfg}
        if request.param == "cluster":
            cfg = {"cluster": request.getfixturevalue("redis_cluster_url"), **cfg}
        if backend == "redis":
            cfg = {"namespace": request.getfixturevalue("redis_namespace"), **cfg}
        store = make_graph_store(cfg)
        made.append(store)
        return store

    yield make
    for s in made:
        s.close()


def ids(*xs):
    return np.array(xs, np.uint64)


def neighbour_sets(store, nodes):
    lists, counts = store.neighbours(ids(*nodes))
    return [sorted(row[:c].tolist()) for row, c in zip(lists, counts)]


def lists(store, nodes):
    """Each node's neighbours in the store's order (oldest first)."""
    got, counts = store.neighbours(ids(*nodes))
    return [row[:c].tolist() for row, c in zip(got, counts)]


def test_keeps_the_k_most_recent_neighbours(make_store):
    store = make_store(neighbours=3)
    store.insert(ids(1, 1, 2), ids(10, 11, 20))
    store.insert(ids(1, 1, 1), ids(12, 13, 14))          # node 1 now had 5: keeps 12, 13, 14
    assert neighbour_sets(store, [1, 2, 99]) == [[12, 13, 14], [20], []]
    store.insert(ids(*[5] * 7), ids(*range(50, 57)))      # more than K in one batch: the newest K
    assert lists(store, [5]) == [[54, 55, 56]]
    assert store.stats() == {"nodes": 3, "edges": 7}


def test_a_neighbour_held_moves_to_the_newest_end_and_inserting_again_changes_nothing(make_store):
    store = make_store(neighbours=3)
    store.insert(ids(1, 1, 1, 1), ids(10, 11, 10, 12))    # 10 again: moved, not held twice
    assert lists(store, [1]) == [[11, 10, 12]]
    store.insert(ids(1), ids(13))                         # full: the oldest (11) falls out
    assert lists(store, [1]) == [[10, 12, 13]]
    rng = np.random.default_rng(7)
    src, dst = rng.integers(1, 40, 400).astype(np.uint64), rng.integers(1, 40, 400).astype(np.uint64)
    store.insert(src, dst)
    once, stats = lists(store, range(1, 40)), store.stats()
    assert all(len(set(x)) == len(x) for x in once) and stats["edges"] == sum(map(len, once))
    store.insert(src, dst)                                # the same edges again (a replay, a reload)
    assert lists(store, range(1, 40)) == once and store.stats() == stats


def test_every_backend_holds_the_same_lists_in_the_same_order_and_samples_the_same_blocks(make_store):
    store, memory = make_store(neighbours=8), make_graph_store({"backend": "memory", "neighbours": 8})
    rng = np.random.default_rng(5)
    for _ in range(5):
        src, dst = rng.integers(1, 120, 300).astype(np.uint64), rng.integers(1, 120, 300).astype(np.uint64)
        store.insert(src, dst)
        memory.insert(src, dst)
    assert lists(store, range(1, 125)) == lists(memory, range(1, 125))
    assert store.stats() == memory.stats()
    a, nodes_a = Sampler(store, [4, 3], seed=2).sample(ids(3, 9, 27))
    b, nodes_b = Sampler(memory, [4, 3], seed=2).sample(ids(3, 9, 27))
    np.testing.assert_array_equal(nodes_a, nodes_b)
    assert [(x.src.tolist(), x.dst.tolist()) for x in a] == [(x.src.tolist(), x.dst.tolist()) for x in b]


def test_features_latest_row_and_zeros_when_unknown(make_store):
    store = make_store()
    store.set_features(ids(1, 2), np.array([[1, 2], [3, 4]], np.float32))
    store.set_features(ids(2), np.array([[5, 6]], np.float32))
    np.testing.assert_array_equal(store.features(ids(2, 7, 1), 2), [[5, 6], [0, 0], [1, 2]])


def test_snapshot_restores_into_either_backend(make_store):
    a = make_store(neighbours=3)
    a.insert(ids(1, 1, 2, 3, 1, 1), ids(2, 3, 1, 1, 4, 5))
    a.set_features(ids(1, 3), np.ones((2, 2), np.float32))
    snap = a.snapshot()
    for b in (make_store(neighbours=3), make_graph_store({"backend": "memory", "neighbours": 3})):
        b.restore(snap)
        assert neighbour_sets(b, [1, 2, 3]) == neighbour_sets(a, [1, 2, 3]) == [[3, 4, 5], [1], [1]]
        np.testing.assert_array_equal(b.features(ids(1, 2, 3), 2), [[1, 1], [0, 0], [1, 1]])


def test_a_server_that_forgot_the_insert_script_is_given_it_again(redis_url, redis_namespace):
    import redis
    store = make_graph_store({"backend": "redis", "url": redis_url, "namespace": redis_namespace})
    store.insert(ids(1), ids(2))
    redis.Redis.from_url(redis_url).script_flush()        # what a restarted server has
    store.insert(ids(1), ids(3))
    assert lists(store, [1]) == [[2, 3]]
    store.close()


def test_redis_lists_expire_after_ttl(redis_url, redis_namespace):
    store = make_graph_store({"backend": "redis", "url": redis_url, "namespace": redis_namespace,
                              "ttl_s": 2.0})           # (0.2 s could pass before the read below on a loaded machine)
    store.insert(ids(1), ids(2))
    assert neighbour_sets(store, [1]) == [[2]]
    deadline = time.monotonic() + 30
    while neighbour_sets(store, [1]) != [[]] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert neighbour_sets(store, [1]) == [[]]


@pytest.mark.parametrize("where", ["redis_url", "redis_cluster_url"])
def test_redis_sampling_is_one_round_trip_per_hop(request, where, redis_namespace, monkeypatch):
    key = "url" if where == "redis_url" else "cluster"
    store = make_graph_store({"backend": "redis", key: request.getfixturevalue(where), "namespace": redis_namespace})
    rng = np.random.default_rng(0)
    store.insert(rng.integers(1, 200, 3000).astype(np.uint64), rng.integers(1, 200, 3000).astype(np.uint64))
    calls = []
    real = store.shards.run
    monkeypatch.setattr(store.shards, "run", lambda groups: calls.append(sorted(groups)) or real(groups))
    blocks, _ = Sampler(store, [10, 5, 3]).sample(ids(*range(1, 60)))
    assert len(calls) == 3 and len(blocks) == 3
    assert all(len(c) == (1 if key == "url" else 3) for c in calls)   # every Cluster node in each round trip
    store.close()


def test_sample_hop_fanout_and_uniformity():
    lists = np.tile(np.arange(1, 9, dtype=np.uint64), (3, 1))
    counts = np.array([8, 3, 0])
    dst, picked = sample_hop(lists, counts, 4, np.random.default_rng(0))
    assert dst.tolist() == [0] * 4 + [1] * 3
    assert len(set(picked[:4].tolist())) == 4 and sorted(picked[4:].tolist()) == [1, 2, 3]
    # every valid slot equally likely: 8 slots, 4 picked, 20000 draws -> each ~ 10000
    one = np.tile(lists[:1], (20000, 1))
    _, many = sample_hop(one, np.full(20000, 8), 4, np.random.default_rng(1))
    freq = np.bincount(many.astype(np.int64), minlength=9)[1:]
    assert np.all(np.abs(freq - 10000) < 400), freq


def test_blocks_layout_and_determinism(make_store):
    store = make_store(neighbours=16)
    rng = np.random.default_rng(3)
    src, dst = rng.integers(1, 300, 5000).astype(np.uint64), rng.integers(1, 300, 5000).astype(np.uint64)
    store.insert(src, dst)
    seeds = ids(5, 7, 11, 400)                            # 400: never seen, no neighbours
    blocks, nodes = Sampler(store, [6, 3], seed=9).sample(seeds)
    again, nodes2 = Sampler(store, [6, 3], seed=9).sample(seeds)
    np.testing.assert_array_equal(nodes, nodes2)
    assert [b.src.tolist() for b in blocks] == [b.src.tolist() for b in again]
    inner, outer = blocks[1], blocks[0]
    assert inner.num_dst == 4 and outer.num_dst == inner.num_src and outer.num_src == len(nodes)
    np.testing.assert_array_equal(nodes[:4], seeds)       # destinations first, in seed order
    assert np.all(np.diff(inner.dst) >= 0) and np.all(np.diff(outer.dst) >= 0)
    assert inner.indegree().tolist()[3] == 0 and max(inner.indegree()) <= 6 and max(outer.indegree()) <= 3
    lists, counts = store.neighbours(nodes[:outer.num_dst])
    for e in range(outer.num_edges):                      # every sampled edge is a stored neighbour
        d = outer.dst[e]
        assert nodes[outer.src[e]] in lists[d][:counts[d]]


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(ConfigError, match=f"unknown graph store backend 'disk' \\(known: {', '.join(GRAPH_STORES.names())}\\)"):
        make_graph_store({"backend": "disk"})


def test_an_unreachable_redis_is_a_store_error_after_the_retries(redis_factory):
    from streamtrain.errors import StoreError
    server = redis_factory.start()
    store = make_graph_store({"backend": "redis", "url": server.url, "timeout_s": 1.0,
                              "retry": {"initial_s": 0.05, "give_up_s": 0.5}})
    store.insert(ids(1), ids(2))
    server.stop()
    t0 = time.monotonic()
    with pytest.raises(StoreError, match=r"redis graph store: read the graph's neighbour lists failed after \d+ "
                                         r"attempts .*127\.0\.0\.1"):
        store.neighbours(ids(1))
    assert time.monotonic() - t0 < 5
    with pytest.raises(StoreError, match="insert edges into the graph failed"):
        store.insert(ids(1), ids(3))
