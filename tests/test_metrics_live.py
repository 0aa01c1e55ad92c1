"""Failure counters reach a scrape while no step runs (issue 15, defect 5 and its sibling)."""
from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]


def test_a_stream_of_only_bad_records_shows_in_the_metrics(tmp_path):
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(b"not-a-label\t1\tx\n" * 30 + b"1\t2\n" * 12)
    cfg = configmod.load(ROOT / "examples" / "synthetic.json",
                         ["metrics.enabled=false", f"checkpoint.dir={tmp_path / 'ckpt'}", "reader.type=file",
                          f"reader.path={bad}", "reader.format=criteo"])
    cfg["reader"] = {k: cfg["reader"][k] for k in ("type", "path", "format")}
    job = Job(configmod.validate(cfg))
    metrics = Metrics(CollectorRegistry())
    metrics.attach(job)
    job.hooks.append(metrics.on_step)
    assert job.run()["batches"] == 0                       # not one step: nothing to sync a counter
    value = metrics.registry.get_sample_value
    assert value("streamtrain_records_malformed_total", {"reason": "field_count"}) == 42
    assert value("streamtrain_records_malformed_total", {"reason": "field_length"}) == 0
    assert value("streamtrain_store_errors_total") == 0 and value("streamtrain_store_waiting") == 0
