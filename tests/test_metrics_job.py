"""The metrics module on its own registry, fed by a real Job over an in-process source."""
from __future__ import annotations

import logging
import time

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from streamtrain.metrics import PHASES, BulkHistogram, Metrics
from tests.fixtures_prometheus import job_config


def run_job(tmp_path, fake_stream, batches=12, **over):
    from streamtrain.job import Job
    source = fake_stream(batch_size=64, batches=batches)
    job = Job(job_config(tmp_path, **over))
    metrics = Metrics(CollectorRegistry(), window=500, refresh_seconds=0)
    job.hooks.append(metrics.on_step)
    job.checkpoint_hooks.append(metrics.on_checkpoint)
    summary = job.run()
    return job, metrics, source, summary


def test_counters_gauges_and_histograms_follow_the_job(tmp_path, fake_stream):
    job, m, source, summary = run_job(tmp_path, fake_stream)
    v = m.registry.get_sample_value
    assert v("streamtrain_examples_total") == 12 * 64 == summary["examples"]
    assert v("streamtrain_batches_total") == 12
    for phase in PHASES:
        assert v("streamtrain_step_seconds_count", {"phase": phase}) == 12, phase
        assert v("streamtrain_step_seconds_sum", {"phase": phase}) > 0
    assert 0 < v("streamtrain_progressive_logloss") < 2
    assert 0 <= v("streamtrain_progressive_auc") <= 1
    assert 0 < v("streamtrain_predicted_ctr") < 1 and 0 < v("streamtrain_observed_ctr") < 1
    assert v("streamtrain_window_examples") >= 500           # the window holds the last 500+
    assert v("streamtrain_kafka_lag", {"topic": "fake", "partition": "0"}) == 1000 - 12
    assert v("streamtrain_event_to_update_seconds_count") == 12 * 64
    assert 2 <= v("streamtrain_event_to_update_seconds_sum") / (12 * 64) < 10
    assert v("streamtrain_store_rows_pulled_total") == job.store.stats.rows_pulled > 0
    assert v("streamtrain_store_rows_pushed_total") == job.store.stats.rows_pushed > 0
    assert v("streamtrain_store_errors_total") == 0
    tables = job.store.stats.table_rows
    assert tables and all(v("streamtrain_embedding_rows", {"table": t, "state": "live"}) == n
                          for t, n in tables.items())
    assert v("streamtrain_layer_state", {"layer": "loss", "streamtrain_layer_state": "update"}) == 1
    assert v("streamtrain_checkpoint_last_success_timestamp_seconds") > 1e9   # the final one
    assert v("streamtrain_nonfinite_batches_total") == 0
    assert v("streamtrain_records_malformed_total", {"reason": "label"}) == 0


def test_exposition_parses_and_labels_stay_bounded(tmp_path, fake_stream):
    _, m, _, _ = run_job(tmp_path, fake_stream, batches=3)
    families = {f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())}
    assert families["streamtrain_step_seconds"].type == "histogram"
    states = families["streamtrain_layer_state"]          # an Enum: a gauge per (layer, state)
    layers = {s.labels["layer"] for s in states.samples}
    assert len(states.samples) == len(layers) * 5 and "emb" in layers
    phases = {s.labels["phase"] for s in families["streamtrain_step_seconds"].samples}
    assert phases == set(PHASES)


def test_lag_is_read_at_scrape_time_and_unassigned_partitions_vanish():
    class Source:
        lag_now = {("t", 0): 5, ("t", 1): 6}

        def lag(self):
            return self.lag_now
    m = Metrics(CollectorRegistry())
    m.source = source = Source()
    v = m.registry.get_sample_value
    assert v("streamtrain_kafka_lag", {"topic": "t", "partition": "0"}) == 5
    source.lag_now = {("t", 1): 2, ("t", 2): None}
    assert v("streamtrain_kafka_lag", {"topic": "t", "partition": "0"}) is None
    assert v("streamtrain_kafka_lag", {"topic": "t", "partition": "1"}) == 2
    assert v("streamtrain_kafka_lag", {"topic": "t", "partition": "2"}) is None


def test_embedding_rows_by_state_and_counter_deltas():
    m = Metrics(CollectorRegistry())
    m._table_rows({"emb": {"live": 10, "admitted": 12, "expired": 2, "bogus": 1}, "wide": 4})
    v = m.registry.get_sample_value
    assert (v("streamtrain_embedding_rows", {"table": "emb", "state": "admitted"}),
            v("streamtrain_embedding_rows", {"table": "wide", "state": "live"})) == (12, 4)
    assert v("streamtrain_embedding_rows", {"table": "emb", "state": "bogus"}) is None
    assert [m._delta("k", n) for n in (3, 5, 5, 2)] == [3, 2, 0, 2]   # a reset counts from 0


def test_bulk_histogram_buckets_are_cumulative_and_le_inclusive():
    r = CollectorRegistry()
    h = BulkHistogram("x_seconds", "x", (1, 2), r)
    h.observe_many(np.array([0.5, 1.0, 1.5, 3.0, np.nan]))
    v = r.get_sample_value
    assert [v("x_seconds_bucket", {"le": le}) for le in ("1.0", "2.0", "+Inf")] == [2, 3, 4]
    assert v("x_seconds_count") == 4 and v("x_seconds_sum") == pytest.approx(6.0)


def test_bulk_histogram_one_value_many_times_equals_the_array_of_it():
    r = CollectorRegistry()
    one, many = BulkHistogram("a_seconds", "a", (1, 2), r), BulkHistogram("b_seconds", "b", (1, 2), r)
    for value, count in ((1.0, 3), (1.5, 2048), (7.0, 5), (float("nan"), 4), (0.5, 0)):
        one.observe_same(value, count)
        many.observe_many(np.full(count, value))
    assert one.counts.tolist() == many.counts.tolist() == [3, 2048, 5]
    assert one.sum == pytest.approx(many.sum, rel=1e-12)


def test_json_progress_line_carries_fields(tmp_path, fake_stream, capsys):
    import json
    from streamtrain.logs import setup_logging
    setup_logging("json")
    try:
        run_job(tmp_path, fake_stream, batches=3, log={"every_seconds": 0})
    finally:
        logging.getLogger().handlers[:] = []
    lines = [json.loads(x) for x in capsys.readouterr().err.splitlines()]
    progress = [x for x in lines if "examples_per_s" in x]
    assert progress and progress[-1]["lag"] is not None and progress[-1]["level"] == "INFO"


def test_step_figures_expose_what_the_prometheus_client_objects_did():
    """The steps' tallies, folded in at a scrape, against the client's Counter and Histogram fed
    step by step: the same samples (the client's ``_created`` series aside), bucket for bucket."""
    from types import SimpleNamespace

    from prometheus_client import Counter, Histogram

    from streamtrain.metrics import STEP_BUCKETS

    m = Metrics(CollectorRegistry())
    ref = CollectorRegistry()
    examples = Counter("streamtrain_examples_total", "e", registry=ref)
    batches = Counter("streamtrain_batches_total", "b", registry=ref)
    nonfinite = Counter("streamtrain_nonfinite_batches_total", "n", registry=ref)
    hist = Histogram("streamtrain_step_seconds", "s", ["phase"], buckets=STEP_BUCKETS, registry=ref)
    for phase in PHASES:
        hist.labels(phase)
    rng = np.random.default_rng(0)
    values = [*STEP_BUCKETS, 0.0, 20.0, *rng.exponential(0.01, 200)]      # on the bounds, past them
    for i, value in enumerate(values):
        applied = i % 7 != 3
        seconds = {"feed": 1.0, **{p: float(value) * (k + 1) for k, p in enumerate(PHASES)}}
        m.steps.step(SimpleNamespace(applied=applied, seconds=seconds), 64)
        if i == 100:
            m.registry.get_sample_value("streamtrain_batches_total")        # a scrape folds in midway
        (examples.inc(64), batches.inc()) if applied else nonfinite.inc()
        for phase in PHASES:
            hist.labels(phase).observe(seconds[phase])

    def samples(registry):
        return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in registry.collect() for s in f.samples
                if f.name in ("streamtrain_examples", "streamtrain_batches", "streamtrain_nonfinite_batches",
                              "streamtrain_step_seconds") and not s.name.endswith("_created")}
    got, want = samples(m.registry), samples(ref)
    assert got == want and len(got) == 3 + len(PHASES) * (len(STEP_BUCKETS) + 3)
    assert 0 < time.time() - m.registry.get_sample_value("streamtrain_last_batch_timestamp_seconds") < 60
    m.steps.step(SimpleNamespace(applied=True, seconds={"pull": 0.5}), 64)        # a scrape of one name
    only = m.registry.restricted_registry(["streamtrain_step_seconds_count", "streamtrain_batches_total"])
    got = {(s.name, s.labels.get("phase")): s.value for f in only.collect() for s in f.samples}
    assert got[("streamtrain_batches_total", None)] == want[("streamtrain_batches_total", ())] + 1
    assert got[("streamtrain_step_seconds_count", "pull")] == len(values) + 1
