"""Graph learning in the job: bad graph input counted, a batch's own edges inserted only after
its step, the GraphSAGE example trained end to end with the graph in its checkpoints and in the
metrics, sync trainers sharing a Redis graph, and a Kafka stream into both Redis stores."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from streamtrain import checkpoint
from streamtrain import config as C
from streamtrain.batch import Batch, SparseField
from streamtrain.graph import Graph, Schema
from streamtrain.graphstore.stream import GraphInput
from streamtrain.job import Job
from streamtrain.metrics import Metrics
from streamtrain.readers import Malformed, make_parser
from streamtrain.readers.graph_synthetic import GraphStream
from streamtrain.store import MemoryStore
from streamtrain.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["reader.examples=3000", "reader.nodes=300", "batch_size=128", "metrics.enabled=false",
         "log.every_seconds=1000"]


def field(ids, present=None):
    ids = np.asarray(ids, np.uint64)
    present = np.ones(len(ids), bool) if present is None else np.asarray(present)
    offsets = np.zeros(len(ids) + 1, np.int64)
    np.cumsum(present, out=offsets[1:])
    return SparseField(ids[present], offsets)


def test_bad_graph_input_is_counted_and_skipped():
    m = Malformed()
    gi = GraphInput({"src": "a", "dst": "b"}, m)
    batch = Batch(labels=np.zeros(5, np.float32),
                  sparse={"a": field([1, 2, 3, 4, 5], [1, 1, 0, 1, 1])},
                  dense=np.array([[7], [8], [9], [4], [np.nan]], np.float32), dense_names=("b",),
                  offsets={"p": 5})
    # row 2 has no source value; row 4's numeric id does not parse (NaN)
    kept = gi.clean(batch)
    assert kept.size == 3 and m.counts["graph"] == 2 and kept.offsets == {"p": 5}
    loop = Batch(labels=np.zeros(2, np.float32), sparse={"a": field([1, 2]), "b": field([1, 3])})
    assert gi.clean(loop).size == 1 and m.counts["graph"] == 3
    missing = Batch(labels=np.zeros(2, np.float32), sparse={"a": field([1, 2])})
    assert gi.clean(missing).size == 0 and m.counts["graph"] == 5


def test_a_batchs_own_edges_enter_the_graph_only_after_its_step():
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage.json", SMALL))
    stream = GraphStream(cfg["reader"], 64)
    batches = stream.reader()()
    first = next(batches)
    gi = GraphInput(cfg["graph"])
    seen = []
    real_attach = gi.attach

    def attach(batch):
        real_attach(batch)
        seen.append((gi.store.stats()["edges"], [b.num_edges for b in batch.subgraph.blocks]))
    gi.attach = attach
    store = MemoryStore()
    graph = Graph.from_config(cfg["layers"], Schema.of(first))
    store.declare(graph.params, cfg["default_optimizer"])
    trainer = Trainer(graph, store, graph_input=gi)
    trainer.step(first)
    assert seen[0] == (0, [0, 0])                          # nothing of its own edges while predicted
    u = first.sparse["node"].ids
    assert gi.store.stats()["edges"] == 2 * len(u)         # undirected: both directions, after
    lists, counts = gi.store.neighbours(u[:1])
    assert first.sparse["peer"].ids[0] in lists[0][:counts[0]]
    trainer.step(next(batches))
    assert seen[1][0] == 2 * len(u) and seen[1][1][1] > 0


def test_graphsage_example_trains_and_checkpoints_hold_the_graph(tmp_path):
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage.json",
                            SMALL + [f"checkpoint.dir={tmp_path}", "checkpoint.every_batches=10"]))
    job = Job(cfg)
    metrics = Metrics()
    job.hooks.append(metrics.on_step)
    summary = job.run()
    assert summary["examples"] == 3000 - summary["malformed"] and summary["malformed"] == 0
    assert summary["accuracy"] > 0.6                       # 4 communities: chance is 0.25
    assert summary["graph"]["nodes"] == 300 and 0 < summary["graph"]["mean_fanout"] <= 10
    metrics.refresh(job)
    get = metrics.registry.get_sample_value
    assert get("streamtrain_graph_nodes") == 300
    assert get("streamtrain_graph_edges") == summary["graph"]["edges"]
    assert get("streamtrain_graph_sample_seconds_count") == summary["batches"]
    assert get("streamtrain_graph_mean_sampled_fanout") == pytest.approx(summary["graph"]["mean_fanout"])

    _, meta = checkpoint.read(tmp_path)
    saved = meta["arrays"]["graph"]
    assert len(saved["ids"]) == 300 and saved["features"].shape == (300, 8)
    again = Job(cfg, restore=str(tmp_path))
    again.graph_input.store.restore(saved)                # what restore() does once the model is built
    ids = saved["ids"][:20]
    a, ca = job.graph_input.store.neighbours(ids)
    b, cb = again.graph_input.store.neighbours(ids)
    np.testing.assert_array_equal(ca, cb)
    assert all(sorted(x[:c]) == sorted(y[:c]) for x, y, c in zip(a, b, ca))
    again.source.close()


def test_restore_puts_the_graph_back(tmp_path):
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage.json",
                            SMALL + [f"checkpoint.dir={tmp_path}", "reader.examples=600"]))
    first = Job(cfg)
    first.run()
    edges = first.summary()["graph"]["edges"]
    second = Job(C.validate(C.load(ROOT / "examples" / "graphsage.json",
                                   SMALL + ["reader.examples=128"])), restore=str(tmp_path))
    summary = second.run()
    assert summary["graph"]["edges"] >= edges               # the restored graph, grown by a batch


def test_sync_trainers_share_one_redis_graph(redis_url, redis_namespace):
    from streamtrain.store.redis_store import RedisStore
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage.json", SMALL))
    graph_cfg = {**cfg["graph"], "store": {"backend": "redis", "url": redis_url, "namespace": redis_namespace}}
    batches = list(GraphStream(cfg["reader"], 128).reader()())
    stores = [RedisStore({"urls": [redis_url], "namespace": redis_namespace, "mode": "sync", "trainers": 2,
                          "worker": w, "barrier_timeout_s": 30}) for w in range(2)]
    inputs = [GraphInput(graph_cfg) for _ in range(2)]
    trainers = []
    for s, gi in zip(stores, inputs):
        g = Graph.from_config(cfg["layers"], Schema.of(batches[0]))
        s.declare(g.params, cfg["default_optimizer"])
        trainers.append(Trainer(g, s, graph_input=gi))
    errors = []

    def work(w):
        try:
            for b in batches[:-1]:
                trainers[w].step(b.take(np.arange(64) + 64 * w))
        except Exception as err:                         # pragma: no cover - reported below
            errors.append(err)
    threads = [threading.Thread(target=work, args=(w,)) for w in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    hits = sum(t.hits for t in trainers) / sum(t.examples for t in trainers)
    assert hits > 0.5
    # what the two trainers inserted, in any order: a node holds min(K, distinct neighbours) entries
    reference = GraphInput({**graph_cfg, "store": {"backend": "memory", "neighbours": 32}})
    for b in batches[:-1]:
        reference.learnt(b)
    stats, want = inputs[0].stats(), reference.stats()
    assert stats["edges"] == want["edges"] and stats["nodes"] == want["nodes"] == 300
    for s, gi in zip(stores, inputs):
        s.close()
        gi.close()


def test_kafka_movielens_into_both_redis_stores(kafka_bootstrap, kafka_topic, kafka_names, kafka_test_consumer,
                                                redis_url, redis_namespace, trainers, tmp_path, data_dir):
    from tests.kafka_broker import committed_offsets, end_offsets
    from streamtrain.readers import write_movielens_csv
    from streamtrain.produce import produce
    csv = tmp_path / "ml.csv"
    write_movielens_csv(data_dir / "movielens_100k", csv)
    lines = csv.read_bytes().split(b"\n")
    header, rows = lines[0], [x for x in lines[1:2001] if x]
    rows[5] = b"1,,50,20,M,writer,Drama"                       # an edge without its source node
    topic, group = kafka_topic(2), kafka_names("g")
    produce(rows, kafka_bootstrap, topic)
    cfg = json.loads((ROOT / "examples" / "graphsage_rec.json").read_text())
    cfg.update({"batch_size": 128, "metrics": {"enabled": False, "port": 0}, "log": {"every_seconds": 60},
                "store": {"backend": "redis", "urls": [redis_url], "namespace": redis_namespace},
                "reader": {"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic, "group": group,
                           "format": "csv", "columns": header.decode().split(","), "multivalue": {"genres": "|"},
                           "max_wait_ms": 100, "stop_at_end": True, "consumer": dict(kafka_test_consumer)}})
    cfg["graph"]["store"] = {"backend": "redis", "url": redis_url, "namespace": redis_namespace + "g"}
    summary = trainers("t", cfg).wait(120)
    assert summary["examples"] == 1999 and summary["malformed_by_reason"]["graph"] == 1
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic)
    reference = GraphInput({**cfg["graph"], "store": {"backend": "memory"}}, Malformed())   # 32 kept, as there
    parser = make_parser("csv", {"columns": header.decode().split(","), "multivalue": {"genres": "|"}})
    reference.learnt(reference.clean(parser.parse(rows)))
    want = reference.stats()
    assert summary["graph"]["edges"] == want["edges"] and summary["graph"]["nodes"] == want["nodes"] > 100
    assert 0.4 < summary["logloss"] < 0.75


def test_a_model_that_asks_for_more_than_the_graph_section_gives_is_a_config_error():
    from streamtrain.errors import ConfigError
    from streamtrain.graphstore.stream import model_problems
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage.json", SMALL))
    g = Graph.from_config(cfg["layers"], Schema())
    assert model_problems(g, cfg["graph"]) == []
    found = dict(model_problems(g, {**cfg["graph"], "fanouts": [5], "features": ["f0"]}))
    assert found == {"layers.self1.block": "block 1, but graph.fanouts [5] gives 1 blocks",
                     "layers.agg1.block": "block 1, but graph.fanouts [5] gives 1 blocks",
                     "layers.norm1.block": "block 1, but graph.fanouts [5] gives 1 blocks",
                     "layers.h0.features": "8 node features, but graph.features names 1"}
    assert model_problems(g, None)[0][1].startswith("layers h0, self0, ")
    with pytest.raises(ConfigError, match="layers.seed.endpoint: endpoint 'src' is not sampled"):
        Job(C.validate(C.load(ROOT / "examples" / "graphsage.json", SMALL + ['graph.seeds=["dst"]']))).run()


def test_file_stream_into_the_redis_store_reads_no_graph_batch_ahead(redis_url, redis_namespace, tmp_path, data_dir):
    """The Redis store reads a file stream's next batch ahead; a graph batch has no blocks until
    it is sampled after the previous batch's edges entered the graph, so none is read ahead."""
    from streamtrain.readers import write_movielens_csv
    csv = tmp_path / "ml.csv"
    write_movielens_csv(data_dir / "movielens_100k", csv)
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage_rec.json", [
        f"reader.path={csv}", "reader.limit=1000", "batch_size=128", "metrics.enabled=false",
        "store=" + json.dumps({"backend": "redis", "urls": [redis_url], "namespace": redis_namespace,
                                "write_back_s": 0})]))   # write-back reads nothing ahead
    job = Job(cfg)
    assert job.store.prefetches                          # the store would read ahead for other models
    summary = job.run()
    assert summary["examples"] == 1000 and 0 < summary["graph"]["edges"] <= 2 * 1000
    assert 0.4 < summary["logloss"] < 0.8
