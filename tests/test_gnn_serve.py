"""Graph models served and evaluated: a prediction samples the record's neighbourhood from the
graph the trainer writes (its own memory graph under ``run``, the Redis graph store under
``serve``, a checkpoint's graph under ``serve --restore``) and writes nothing; with fanouts at
least the degree the blocks are deterministic and the served predictions are the Evaluator's.
``streamtrain eval`` scores a stream with a checkpoint without changing it."""
from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest

from streamtrain import config as C
from streamtrain import saved
from streamtrain.errors import ConfigError
from streamtrain.evaluator import Evaluator
from streamtrain.graph import Schema
from streamtrain.graphstore.stream import GraphInput, open_graph_input
from streamtrain.job import Job
from streamtrain.metrics import ServeMetrics
from streamtrain.progressive import MultiClass
from streamtrain.readers import open_reader
from streamtrain.readers.graph_synthetic import GraphStream
from streamtrain.scores import auc, logloss
from streamtrain.serve.http import Server, make_app
from streamtrain.serve.inputs import records_batch
from streamtrain.serve.run import attach
from streamtrain.serve.service import Service, StoreModel
from streamtrain.serve.settings import serve_settings
from streamtrain.store import make_store
from tests.test_serve_freshness import served_port

ROOT = Path(__file__).resolve().parents[1]
HEADER = "label,user,item,age,gender,occupation,genres"
WHOLE = ["graph.fanouts=[200, 200]"]          # >= every degree (neighbours 128): deterministic blocks
QUIET = ["metrics.enabled=false", "log.every_seconds=1000"]


def write_stream(path: Path, rows: int, seed: int = 0, users: int = 60, items: int = 40) -> Path:
    """A user-item CSV in the MovieLens stream's columns; a click when user and item agree mod 3."""
    rng = np.random.default_rng(seed)
    u, i = rng.integers(0, users, rows), rng.integers(0, items, rows)
    label = ((u % 3 == i % 3) ^ (rng.random(rows) < 0.15)).astype(int)
    genres = np.array(["Drama", "Comedy|Romance", "Action|War"])[i % 3]
    lines = [f"{y},u{a},i{b},{20 + a % 30},{'MF'[a % 2]},job{a % 5},{g}" for y, a, b, g in zip(label, u, i, genres)]
    path.write_text("\n".join([HEADER, *lines]) + "\n")
    return path


def record(user, item, age=30):
    return {"user": user, "item": item, "age": age, "gender": "F", "occupation": "job1", "genres": ["Drama"]}


RECORDS = [record("u3", "i7"), record("u10", "i2", 41), record("u3", "i9"), record("new-user", "i7")]


def rec_config(tmp_path, *sets):
    path = write_stream(tmp_path / "train.csv", 2500)
    return C.validate(C.load(ROOT / "examples" / "graphsage_rec.json",
                             [f"reader.path={path}", *QUIET, *WHOLE, *sets]))


def http(port):
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)


def test_a_predictions_sample_writes_nothing_and_takes_the_records_features():
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage.json",
                            ["reader.examples=2000", "reader.nodes=200", "graph.fanouts=[32, 32]"]))
    batches = list(GraphStream(cfg["reader"], 128).reader()())
    gi = GraphInput(cfg["graph"])
    for b in batches[:-1]:
        gi.attach(b)
        gi.learnt(b)
    before, state = gi.store.snapshot(), json.dumps(gi.sampler.rng.bit_generator.state)
    counts = (gi.sampler.edges, gi.sampler.dst_rows)
    last = batches[-1]
    last.dense = last.dense + 1.0                     # features the store has never seen
    gi.sample(last)
    after = gi.store.snapshot()
    for key in before:
        np.testing.assert_array_equal(before[key], after[key])    # no edge, no feature written
    assert json.dumps(gi.sampler.rng.bit_generator.state) == state and (gi.sampler.edges, gi.sampler.dst_rows) == counts
    sub = last.subgraph
    seeds, rows = np.unique(last.sparse["node"].ids, return_index=True)
    _, degree = gi.store.neighbours(seeds)
    block = sub.blocks[-1]                                        # fanout 32 = neighbours: every one
    np.testing.assert_array_equal(block.indegree()[sub.seeds["src"][rows]], degree)
    src_rows = sub.seeds["src"]
    np.testing.assert_array_equal(sub.features[src_rows], last.dense)    # the record's own features
    again = last.take(np.arange(last.size))
    gi.sample(again)                                              # the same records: the same blocks
    np.testing.assert_array_equal(again.subgraph.node_ids, sub.node_ids)
    assert [b.num_edges for b in again.subgraph.blocks] == [b.num_edges for b in sub.blocks]


def test_run_serves_a_graph_model_with_the_evaluators_predictions(tmp_path):
    cfg = rec_config(tmp_path, "serve.enabled=true", "serve.port=0")
    job = Job(cfg)
    stop = attach(job, cfg)
    try:
        with http(job.serve_port) as c:
            job.run()
            edges = job.graph_input.store.stats()["edges"]
            r = c.post("/v1/predict", json={"records": RECORDS})
            assert r.status_code == 200, r.text
            served = np.array(r.json()["predictions"])
            want = Evaluator(job.graph, job.store, graph_input=job.graph_input).forward(
                records_batch({"records": RECORDS}, job.graph.schema, 10))
            np.testing.assert_allclose(served, want, atol=1e-6)
            one = [c.post("/v1/predict", json={"records": [x]}).json()["predictions"][0] for x in RECORDS]
            np.testing.assert_allclose(one, served, atol=1e-6)   # deterministic blocks: alone = batched
            assert job.graph_input.store.stats()["edges"] == edges            # no request's edge inserted
            assert len(set(np.round(served, 5))) == 4                         # the graph part is not constant
            bad = c.post("/v1/predict", json={"records": [record("u1", "i1"), {"item": "i2"}]})
            assert bad.status_code == 400 and bad.json()["where"] == "records[1].user"
    finally:
        stop()


def test_streamtrain_serve_samples_the_redis_graph(tmp_path, redis_url, redis_namespace):
    cfg = rec_config(tmp_path, f"name={redis_namespace}", "store.backend=redis", f'store.urls=["{redis_url}"]',
                     "store.write_back_s=0", "graph.store.backend=redis", f"graph.store.url={redis_url}")
    job = Job(cfg)
    job.run()
    schema = {"sparse": list(job.graph.schema.sparse), "dense": list(job.graph.schema.dense)}
    served_cfg = {**cfg, "serve": {**cfg["serve"], "schema": schema}}
    settings = serve_settings(served_cfg)
    source = StoreModel(served_cfg, settings)
    srv = Server(make_app(Service(source, settings, cfg["reader"]), ServeMetrics()), "127.0.0.1", 0).start()
    store = make_store({**cfg["store"], "namespace": redis_namespace})
    graph_input = open_graph_input(cfg["graph"], namespace=redis_namespace)
    edges = graph_input.stats()["edges"]
    try:
        with http(srv.port) as c:
            r = c.post("/v1/predict", json={"records": RECORDS})
            assert r.status_code == 200, r.text
        store.declare(job.graph.params, cfg["default_optimizer"])
        want = Evaluator(job.graph, store, graph_input=graph_input).forward(
            records_batch({"records": RECORDS}, job.graph.schema, 10))
        np.testing.assert_allclose(r.json()["predictions"], want, atol=1e-6)
        assert graph_input.stats()["edges"] == edges > 0                     # as trained: nothing added
    finally:
        srv.stop()
        source.close()
        store.close()
        graph_input.close()
    with pytest.raises(ConfigError, match="graph.store.backend=redis"):
        StoreModel({**served_cfg, "graph": {**cfg["graph"], "store": {"backend": "memory"}}}, settings)


def checkpointed(tmp_path, config="graphsage_rec.json", *sets):
    ckpt = tmp_path / "ckpt"
    if config == "graphsage_rec.json":
        cfg = rec_config(tmp_path, f"checkpoint.dir={ckpt}", *sets)
    else:
        cfg = C.validate(C.load(ROOT / "examples" / config, [*QUIET, f"checkpoint.dir={ckpt}", *sets]))
    Job(cfg).run()
    return cfg, ckpt


def direct(cfg, ckpt, batches):
    """The checkpoint loaded by hand and the batches predicted by an Evaluator."""
    model = saved.read(str(ckpt))
    graph, store = model.build(cfg, model.schema)
    gi = model.graph_input(cfg)
    ev = Evaluator(graph, store, graph_input=gi)
    return graph, [np.array(ev.forward(b), np.float64) for b in batches]


def digest(root: Path) -> dict:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_eval_scores_a_stream_with_the_checkpoint_and_changes_nothing(tmp_path):
    cfg, ckpt = checkpointed(tmp_path)
    held_out = write_stream(tmp_path / "held_out.csv", 700, seed=1)
    before = digest(ckpt)
    summary_path = tmp_path / "eval.json"
    proc = subprocess.run([sys.executable, "-m", "streamtrain", "eval", str(ROOT / "examples" / "graphsage_rec.json"),
                           "--restore", str(ckpt), "--summary", str(summary_path),
                           *[a for s in [f"reader.path={held_out}", *QUIET, *WHOLE] for a in ("--set", s)]],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert digest(ckpt) == before                                   # the checkpoint is untouched
    got = json.loads(summary_path.read_text())
    eval_cfg = C.validate(C.load(ROOT / "examples" / "graphsage_rec.json", [f"reader.path={held_out}", *QUIET, *WHOLE]))
    batches = list(open_reader(eval_cfg["reader"], eval_cfg["batch_size"], None).batches())
    labels = np.concatenate([b.labels for b in batches])
    _, preds = direct(eval_cfg, ckpt, batches)
    p = np.concatenate(preds)
    assert got["examples"] == 700 and got["malformed"] == 0 and got["nonfinite_batches"] == 0
    assert got["logloss"] == pytest.approx(logloss(labels, p), abs=2e-6)
    assert got["auc"] == pytest.approx(auc(labels, p), abs=1e-4)       # 65,536-bin histograms
    assert got["graph"]["edges"] == saved.read(str(ckpt)).graph_input(cfg).stats()["edges"] > 0
    assert got["step"] == 2500 // 64 + 1
    assert set(got) >= {"examples", "batches", "elapsed_s", "examples_per_s", "predicted_ctr", "checkpoint"}
    done = [ln for ln in proc.stderr.splitlines() if " done: " in ln]
    assert len(done) == 1 and "examples=700" in done[0] and f"logloss={got['logloss']}" in done[0]


def test_eval_of_a_multiclass_graph_model_is_its_accuracy(tmp_path):
    from streamtrain.evaluation import Evaluation
    small = ["reader.examples=2000", "reader.nodes=200"]
    cfg, ckpt = checkpointed(tmp_path, "graphsage.json", *small)
    fresh = C.validate(C.load(ROOT / "examples" / "graphsage.json", [*QUIET, *small, "reader.seed=0"]))
    summary = Evaluation(fresh, str(ckpt), max_examples=1000).run()
    batches = list(GraphStream(fresh["reader"], fresh["batch_size"]).reader()())
    cut = []
    for b in batches:
        n = min(b.size, 1000 - sum(x.size for x in cut))
        if n:
            cut.append(b.take(np.arange(n)))
    _, preds = direct(fresh, ckpt, cut)
    tracker = MultiClass()
    tracker.update(np.concatenate([b.labels for b in cut]), np.concatenate(preds))
    assert summary["examples"] == 1000
    assert summary["accuracy"] == round(tracker.accuracy, 6) and summary["accuracy"] > 0.5
    assert summary["logloss"] == round(tracker.logloss, 6) and summary["auc"] is None


def test_serve_restore_answers_the_checkpoints_predictions(tmp_path):
    cfg, ckpt = checkpointed(tmp_path)
    before = digest(ckpt)
    proc = subprocess.Popen([sys.executable, "-m", "streamtrain", "serve", str(ROOT / "examples" / "graphsage_rec.json"),
                             "--restore", str(ckpt), "--set", "serve.port=0", *[a for s in WHOLE for a in ("--set", s)]],
                            cwd=tmp_path, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        with http(served_port(proc)) as c:
            r = c.post("/v1/predict", json={"records": RECORDS})
            assert r.status_code == 200, r.text
            model = c.get("/v1/model").json()
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, err[-2000:]
    graph, (want,) = direct(cfg, ckpt, [records_batch({"records": RECORDS}, saved.read(str(ckpt)).schema, 10)])
    np.testing.assert_allclose(r.json()["predictions"], want, atol=1e-6)
    assert r.json()["step"] == 2500 // 64 + 1 and model["store"].startswith("checkpoint ")
    assert digest(ckpt) == before


def test_serve_restore_of_a_checkpoint_without_fields_needs_serve_schema(tmp_path):
    from streamtrain.serve.saved import CheckpointModel
    cfg, ckpt = checkpointed(tmp_path)
    meta_path = next(ckpt.glob("ckpt-*/meta.json"))
    meta = json.loads(meta_path.read_text())
    schema = meta.pop("schema")
    meta_path.write_text(json.dumps(meta))                # as an older version wrote it
    with pytest.raises(ConfigError, match="serve.schema"):
        CheckpointModel(cfg, serve_settings(cfg), str(ckpt))
    model = CheckpointModel(cfg, serve_settings({**cfg, "serve": {"schema": schema}}), str(ckpt))
    assert model.graph().schema == Schema(tuple(schema["sparse"]), tuple(schema["dense"]))
