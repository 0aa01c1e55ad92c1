"""An AutoML job in the daemon (streamtrain/automl/attach.py): metrics per candidate slot, the
champion served and shown in /v1/model, checkpoints that hold every live candidate and the
search, and a restore that resumes the very same search."""
from __future__ import annotations

import json
import os
import threading

import numpy as np
from prometheus_client import CollectorRegistry

from streamtrain import checkpoint
from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.metrics import Metrics
from streamtrain.schema import with_defaults
from streamtrain.serve.inputs import records_batch
from streamtrain.serve.service import JobModel, Service
from streamtrain.serve.settings import SERVE_OPTIONS

from .automl_helpers import layers

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]

READER = {"type": "synthetic", "fields": 4, "cardinality": 20, "dense": 0, "model": "fm", "fm_dim": 4,
          "weight_scale": 1.5, "seed": 3}


def automl_config(tmp_path, examples: int, **over) -> dict:
    cfg = {"reader": dict(READER, examples=examples), "batch_size": 1000, "layers": layers(),
           "metrics": {"enabled": False}, "checkpoint": {"dir": str(tmp_path / "ckpt"), "every_seconds": 0},
           "automl": {"live": 4, "grace": 1000, "space": [
               {"name": "crosses", "cross": "crosses", "max_pairs": 3},
               {"name": "rate", "paths": ["layers.wide.optimizer.alpha", "layers.bias.optimizer.alpha"],
                "values": [0.03, 0.1, 0.3, 1.0]}]}, **over}
    return configmod.validate(configmod.with_defaults(configmod.SCHEMA, cfg))


def check_serving(job) -> None:
    """/v1/predict's answer (a JobModel Service, as `streamtrain run` with serve.enabled builds it)
    is the served candidate's (the leader now); /v1/model shows the search. True if another live
    candidate's differs."""
    service = Service(JobModel(job), with_defaults(SERVE_OPTIONS, {}), job.config["reader"])
    records = {"records": [{"f0": "1", "f1": "2", "f2": "3", "f3": "4"}, {"f0": "5", "f1": "0"}]}
    answer = service.predict(json.dumps(records).encode(), "application/json")["predictions"]
    batch = records_batch(records, job.graph.schema, 10)
    search, candidates = job.trainer.search, job.trainer.candidates
    assert answer == service._answer(candidates[search.served].graph, batch, True)["predictions"]
    others = [service._answer(c.graph, batch, True)["predictions"] for s, c in candidates.items()
              if s != search.served]
    model = service.describe()
    assert model["automl"]["champion"]["slot"] == search.champion
    assert model["automl"]["champion"]["assign"] == candidates[search.champion].assign
    assert model["automl"]["served"]["slot"] == search.served
    assert model["automl"]["served"]["assign"] == candidates[search.served].assign
    assert {c["slot"] for c in model["automl"]["candidates"]} == set(candidates)
    return any(p != answer for p in others)     # a challenger (born from the champion) may still agree


def test_metrics_serving_and_model_follow_the_champion(tmp_path):
    job = Job(automl_config(tmp_path, 60_000))
    metrics = Metrics(CollectorRegistry(), refresh_seconds=0)
    served = []

    def serve_now_and_then(job, batch, result):
        if len(job.trainer.candidates) > 1 and job.trainer.batches % 2 == 0:
            served.append((job.trainer.search.promotions, check_serving(job)))
    job.hooks += [metrics.on_step, serve_now_and_then]
    summary = job.run()
    search = job.trainer.search
    assert search.promotions >= 1, summary["automl"]         # the planted FM's pairs pay off
    assert len(served) >= 3 and served[-1][0] >= 1, served      # served before and after a promotion
    assert any(differs for _, differs in served), served        # ... and not another candidate's answer
    assert summary["examples"] == 60_000 and summary["automl"]["champion"]["slot"] == search.champion
    assert job.graph is job.trainer.served.graph and search.served in job.trainer.candidates
    value = metrics.registry.get_sample_value
    assert value("streamtrain_automl_promotions_total") == search.promotions
    assert value("streamtrain_automl_candidates_born_total") == search.next_epoch
    assert value("streamtrain_automl_champion_slot") == search.champion
    assert value("streamtrain_automl_served_slot") == search.served
    for reason, n in search.retired.items():
        assert value("streamtrain_automl_retirements_total", {"reason": reason}) == n
    for i, slot in enumerate(search.slots):                   # one series per slot, never per config
        assert value("streamtrain_automl_candidate_examples", {"slot": str(i)}) == (slot["examples"] if slot else 0)
    slots = {s.labels["slot"] for m in metrics.registry.collect() if m.name == "streamtrain_automl_candidate_loss"
             for s in m.samples}
    assert slots == {"0", "1", "2", "3"}


def test_a_checkpoint_holds_every_candidate_and_the_search(tmp_path):
    first = Job(automl_config(tmp_path, 40_000))
    first.run()
    saved = first.trainer.search.to_json()
    snap, meta = checkpoint.read(first.last_checkpoint)
    assert meta["automl"] == json.loads(json.dumps(saved))
    live = {c.prefix for c in first.trainer.candidates.values()}
    assert {name.split("_", 1)[0] + "_" for name in snap.specs} == live      # every live candidate, only them

    again = Job(automl_config(tmp_path, 40_000), restore=first.last_checkpoint)
    again._build(next(iter(again.source.batches())))
    try:
        assert again.trainer.search.to_json() == saved
        assert again.trainer.examples == first.trainer.examples
        back = again.store.snapshot()
        assert set(back.specs) == set(snap.specs)
        for name, arrays in snap.tables.items():
            order = np.argsort(arrays["ids"])
            mine = back.tables[name]
            np.testing.assert_array_equal(np.sort(mine["ids"]), arrays["ids"][order])
            np.testing.assert_array_equal(mine["value"][np.argsort(mine["ids"])], arrays["value"][order])
    finally:
        again.finish()

    # `streamtrain eval` and `serve --restore` load the served candidate of the checkpoint
    from streamtrain import saved
    graph, store = saved.read(first.last_checkpoint).build(first.config, first.graph.schema)
    assert saved.read(first.last_checkpoint).meta["automl"]["served"] == first.trainer.search.served
    champion = first.trainer.served
    assert set(graph.params) == set(champion.graph.params)
    batch = next(iter(Job(automl_config(tmp_path, 2_000)).source.batches()))
    ctx = graph.context(training=False)
    graph.feed(ctx, batch)
    ctx.values = store.pull(*graph.needs(ctx), create=False)
    graph.forward(ctx)
    mine = champion.graph.context(training=False)
    champion.graph.feed(mine, batch)
    mine.values = first.store.pull(*champion.graph.needs(mine), create=False)
    champion.graph.forward(mine)
    np.testing.assert_array_equal(ctx.predictions, mine.predictions)

    resumed = Job(automl_config(tmp_path, 50_000), max_examples=first.trainer.examples + 10_000,
                  restore=first.last_checkpoint)
    summary = resumed.run()
    assert summary["examples"] == 50_000
    assert resumed.trainer.search.next_epoch >= first.trainer.search.next_epoch
    assert resumed.trainer.search.promotions >= first.trainer.search.promotions


def test_dropped_tables_leave_the_row_gauge():
    """streamtrain_embedding_rows is labelled by table: a retired candidate's tables leave it
    (the label set stays that of the live candidates)."""
    from streamtrain.metrics import Metrics as M
    from streamtrain.params import ParamSpec
    from streamtrain.store import make_store
    store = make_store({"backend": "memory"})
    store.declare({"a0g0_w.table": ParamSpec("a0g0_w.table", (1,), table=True)}, {"type": "sgd", "lr": 0.1})
    store.add({"a1g1_w.table": ParamSpec("a1g1_w.table", (1,), table=True)}, {"type": "sgd", "lr": 0.1})
    store.stats.table_rows = {"a0g0_w.table": 3, "a1g1_w.table": 4}
    m = M(CollectorRegistry(), refresh_seconds=0)
    m._store_rows(store)
    assert m.registry.get_sample_value("streamtrain_embedding_rows", {"table": "a1g1_w.table", "state": "live"}) == 4
    store.drop(["a1g1_w.table"])
    m._store_rows(store)
    assert m.registry.get_sample_value("streamtrain_embedding_rows", {"table": "a1g1_w.table", "state": "live"}) is None
    assert m.registry.get_sample_value("streamtrain_embedding_rows", {"table": "a0g0_w.table", "state": "live"}) == 3


def test_offsets_are_committed_after_every_candidate_applied_the_batch(tmp_path, monkeypatch):
    """Between two commits of the reader's offsets, every live candidate stepped the one batch
    those offsets are for (and none stepped a later one)."""
    from streamtrain.automl.candidates import Candidate
    seen = []
    real = Candidate.step

    def step(self, batch):
        result = real(self, batch)
        seen.append(("step", self.slot, id(batch), result.applied))
        return result
    monkeypatch.setattr(Candidate, "step", step)
    job = Job(automl_config(tmp_path, 30_000))
    commit = job.source.commit
    job.source.commit = lambda offsets: (seen.append(("commit",)), commit(offsets))
    job.run()
    segments, current = [], []
    for event in seen:
        if event[0] == "commit":
            segments.append(current)
            current = []
        else:
            current.append(event)
    assert len(segments) == 30 and not current
    for steps in segments:
        assert steps and len({s[2] for s in steps}) == 1, steps          # one batch
        assert len({s[1] for s in steps}) == len(steps) >= 1               # each live candidate once
        assert all(s[3] for s in steps)                                     # applied


def test_the_search_bench_runs_seeds_and_counts_those_at_or_below_the_best(capsys):
    """``bench/automl_search.py --seeds`` prints each seed's line and then their mean and how
    many are at or below ``--best``: the figures of single runs of the same seeds."""
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    import automl_search
    short = ["reader.examples=3000"]
    single = []
    for n in (0, 1):
        automl_search.main(["synlr", "--quiet", "--set", *short, f"automl.seed={n}"])
        single.append(json.loads(capsys.readouterr().out.strip().splitlines()[-1])["logloss"])
    automl_search.main(["synlr", "--seeds", "0-1", "--best", str(max(single)), "--set", *short])
    lines = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert [line["logloss"] for line in lines[:2]] == single and lines[0]["examples"] == 3000
    summary = lines[-1]
    assert summary["seeds"] == [0, 1] and summary["logloss"] == single
    assert summary["mean"] == round(sum(single) / 2, 5) and summary["at_or_below"] == 2


def test_a_search_trains_from_a_file_source(criteo_path):
    """A file source's parse thread prepares every batch for the live candidates; a search does
    not pace it (``AutoTrainer.pace``), it trains the whole file."""
    cfg = configmod.validate(configmod.with_defaults(configmod.SCHEMA, {
        "reader": {"type": "file", "path": str(criteo_path), "format": "criteo"},
        "batch_size": 500, "layers": layers(), "metrics": {"enabled": False}, "checkpoint": {"dir": None},
        "automl": {"live": 2, "grace": 1000, "space": [
            {"name": "rate", "paths": ["layers.wide.optimizer.alpha"], "values": [0.1, 0.3]}]}}))
    job = Job(cfg)
    before = _automl_threads()      # (searches other tests built without a job, still alive)
    stepping = set()        # the candidates' threads while it runs (two cores: side by side)
    job.hooks.append(lambda job, batch, result: stepping.update(_automl_threads() - before))
    summary = job.run()
    assert summary["examples"] == 7625 and job.trainer.candidates
    assert bool(stepping) == (os.cpu_count() > 1)
    assert not any(t.is_alive() for t in stepping) and job.trainer._pool is None    # the teardown ended them


def _automl_threads() -> set:
    return {t for t in threading.enumerate() if t.name.startswith("streamtrain-automl")}


def test_auto_json_on_a_csv_of_one_categorical_column_proposes_only_what_builds(tmp_path):
    """examples/auto.json is for 'any CSV with a label column': on one categorical column its
    search proposed inner products of the field embeddings (they need two fields) and the run
    failed at the first batch with 'invalid config: layers.a3g3_products: ... needs at least 2
    fields, got 1' (exit 2). Such a configuration is now never proposed; the rest of the space is."""
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    c = rng.integers(0, 30, 6000)
    y = (rng.random(6000) < np.where(c < 10, 0.6, 0.1)).astype(int)
    data = tmp_path / "one.csv"
    data.write_text("c,clicked\n" + "".join(f"{a},{b}\n" for a, b in zip(c, y)))
    summary = tmp_path / "s.json"
    out = subprocess.run([sys.executable, "-m", "streamtrain", "run", "auto", "--set", "reader.type=file",
                          "--set", f"reader.path={data}", "--set", "reader.format=csv", "--set", "reader.label=clicked",
                          "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null", "--summary", str(summary)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(summary.read_text())["examples"] == 6000
    born = [line for line in out.stderr.splitlines() if " born: " in line]
    assert len(born) >= 4 and not any("deep_out" in line for line in born)
    assert "automl: not proposed on this stream" in out.stderr and "inner_product" in out.stderr
