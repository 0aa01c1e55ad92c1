"""Real Redis for tests: ``STREAMTRAIN_TEST_REDIS`` if set, else testcontainers when a Docker
engine answers, else local ``redis-server`` processes on free loopback ports (never 6379),
including a 3-node Redis Cluster. Every process started here is killed by pid at teardown.

Fixtures: ``redis_url`` (one server), ``redis_urls3`` (three standalone servers),
``redis_cluster_url`` (any node of a 3-node cluster), ``redis_factory`` (start private servers,
e.g. to kill one), ``redis_namespace`` (a fresh namespace per test).
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid

import numpy as np
import pytest

from tests.conftest import docker_answers
from tests.redis_cluster import cluster_args, create_cluster

from streamtrain.graph import Graph, Schema
from streamtrain.store.redis_server import RedisServer, free_port
from streamtrain.testing import random_batch
from streamtrain.trainer import Trainer




class _Servers:
    def __init__(self):
        self.started: list[RedisServer] = []
        self.workdirs: list[str] = []          # removed after the servers stop

    def start(self, *extra, port=None, workdir=None) -> RedisServer:
        if not shutil.which("redis-server"):
            pytest.skip("no redis-server binary on PATH (apt install redis-server)")
        server = RedisServer(port, extra=extra, workdir=workdir).start()
        self.started.append(server)
        return server

    def stop_all(self):
        for s in self.started:
            s.stop()
        for d in self.workdirs:
            shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def _redis_servers():
    servers = _Servers()
    yield servers
    servers.stop_all()


@pytest.fixture(scope="session")
def redis_url(_redis_servers):
    url = os.environ.get("STREAMTRAIN_TEST_REDIS")
    if url:
        yield url
        return
    if docker_answers():               # pragma: no cover - no Docker engine on the dev machines
        from testcontainers.redis import RedisContainer
        with RedisContainer() as c:
            yield f"redis://{c.get_container_host_ip()}:{c.get_exposed_port(6379)}"
        return
    yield _redis_servers.start().url


@pytest.fixture(scope="session")
def redis_urls3(_redis_servers):
    return [_redis_servers.start().url for _ in range(3)]


def start_cluster(servers, n: int = 3) -> list[str]:
    """``n`` fresh ``redis-server --cluster-enabled yes`` nodes made into one cluster (no
    replicas, slots split evenly); their ``host:port`` addresses, once the cluster is ok."""
    if not shutil.which("redis-cli"):
        pytest.skip("no redis-cli on PATH to create a cluster")
    workdir = tempfile.mkdtemp(prefix="streamtrain-cluster-")
    servers.workdirs.append(workdir)
    addrs = []
    for _ in range(n):                   # one at a time: a started node holds its port
        port = free_port(below=55536)
        servers.start(*cluster_args(port), port=port, workdir=tempfile.mkdtemp(dir=workdir))
        addrs.append(f"127.0.0.1:{port}")
    create_cluster(addrs)
    return addrs


@pytest.fixture(scope="session")
def redis_cluster_url(_redis_servers):
    yield f"redis://{start_cluster(_redis_servers)[0]}"


@pytest.fixture
def redis_factory(_redis_servers):
    """Start private servers for one test; they are killed when it ends."""
    mine = _Servers()
    yield mine
    mine.stop_all()


@pytest.fixture
def redis_namespace():
    return "t" + uuid.uuid4().hex[:10]


# ---- a small model and a stream, shared by the Redis tests --------------------------------

OPTIMIZER_SETS = {
    "adagrad+momentum+adam": ({"type": "adagrad", "lr": 0.05},
                              {"emb": {"type": "adam", "lr": 0.01}, "hidden": {"type": "momentum", "lr": 0.02}}),
    "ftrl+sgd": ({"type": "sgd", "lr": 0.05}, {"emb": {"type": "ftrl", "alpha": 0.1}}),
}


def layers(overrides=None, reduction="sum"):
    overrides = overrides or {}
    out = [
        {"name": "sp", "type": "sparse_input"},
        {"name": "dn", "type": "dense_input"},
        {"name": "emb", "type": "embedding", "inputs": ["sp"], "dim": 4, "combiner": "sum"},
        {"name": "cat", "type": "concat", "inputs": ["emb", "dn"]},
        {"name": "hidden", "type": "fc", "inputs": ["cat"], "dim": 8, "activation": "relu"},
        {"name": "out", "type": "fc", "inputs": ["hidden"], "dim": 1},
        {"name": "loss", "type": "logloss", "inputs": ["out"], "reduction": reduction},
    ]
    for layer in out:
        if layer["name"] in overrides:
            layer["optimizer"] = overrides[layer["name"]]
    return out


def sequential_layers():
    """A crossed FTRL wide part, an Adagrad linear term and bias, learnt per example."""
    adagrad = {"type": "adagrad", "lr": 0.5}
    return [
        {"name": "sp", "type": "sparse_input"},
        {"name": "dn", "type": "dense_input"},
        {"name": "x", "type": "feature_cross", "inputs": ["sp"]},
        {"name": "wide", "type": "embedding", "inputs": ["x"], "dim": 1, "shared": True, "init": "zeros",
         "optimizer": {"type": "ftrl", "alpha": 0.3, "l1": 0.0, "l2": 1.0}},
        {"name": "ws", "type": "sum_pooling", "inputs": ["wide"]},
        {"name": "lin", "type": "fc", "inputs": ["dn"], "dim": 1, "init": "zeros", "optimizer": adagrad},
        {"name": "bias", "type": "bias", "optimizer": adagrad},
        {"name": "logit", "type": "add", "inputs": ["ws", "lin", "bias"]},
        {"name": "loss", "type": "logloss", "inputs": ["logit"], "sequential": True},
    ]


def stream(n, size=32, seed=0, cardinality=60):
    return [random_batch(size, fields=("a", "b", "c"), dense=3, cardinality=cardinality,
                         multivalue=("c",), seed=seed + i) for i in range(n)]


def build(store, default, overrides=None, reduction="sum"):
    first = stream(1)[0]
    graph = Graph.from_config(layers(overrides, reduction), Schema.of(first))
    store.declare(graph.params, default)
    return graph


def run(store, batches, default, overrides=None, reduction="sum"):
    """Train ``store`` on ``batches``; return (progressive logloss, per-batch losses, snapshot)."""
    graph = build(store, default, overrides, reduction)
    trainer = Trainer(graph, store)
    losses = [trainer.step(b).loss for b in batches]
    return trainer.progressive.logloss, np.array(losses), store.snapshot()


def assert_snapshots_close(a, b, atol=1e-6, rtol=0.0):
    assert sorted(a.tables) == sorted(b.tables) and sorted(a.dense) == sorted(b.dense)
    for name in a.tables:
        np.testing.assert_array_equal(a.tables[name]["ids"], b.tables[name]["ids"], err_msg=name)
        for k in a.tables[name]:
            np.testing.assert_allclose(a.tables[name][k], b.tables[name][k], rtol=rtol, atol=atol,
                                       err_msg=f"{name}.{k}")
    for name in a.dense:
        assert sorted(a.dense[name]) == sorted(b.dense[name])
        for k in a.dense[name]:
            assert np.shape(a.dense[name][k]) == np.shape(b.dense[name][k]), f"{name}.{k}"
            np.testing.assert_allclose(a.dense[name][k], b.dense[name][k], rtol=rtol, atol=atol,
                                       err_msg=f"{name}.{k}")
