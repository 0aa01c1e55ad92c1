"""The run's figures agree with each other (issue 24, item 11): the `done` line and ``--summary``
are one measure; examples/s counts only what this run trained (not a restored checkpoint's
examples); ``streamtrain_examples_total`` leaves out skipped non-finite batches; every give-up
of the store, a background flush's included, counts in ``store_failures`` and
``streamtrain_store_failed_steps_total`` (the latter against a real redis-server)."""
from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.metrics import Metrics
from tests.fixtures_prometheus import job_config

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[1]


def run(tmp_path, *args) -> tuple[dict, str]:
    """``streamtrain run`` on the synthetic demo: its summary and its `done` line."""
    summary = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / "synthetic.json"),
                           "--set", "metrics.port=0", "--set", f"checkpoint.dir={tmp_path / 'ckpt'}",
                           "--summary", str(summary), *args], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    done = [line for line in proc.stderr.splitlines() if " done: " in line]
    assert len(done) == 1, proc.stderr[-2000:]
    return json.loads(summary.read_text()), done[0]


def figures(done: str) -> dict:
    return {k: v for k, v in re.findall(r"(examples|batches|ex/s|elapsed)=([\d.]+)", done)}


def test_the_done_line_is_the_summary(tmp_path):
    """With the metrics endpoint and a prediction server to stop after the summary (the old
    `done` line measured their shutdown too: 2-3x lower on short runs)."""
    summary, done = run(tmp_path, "--set", "serve.enabled=true", "--set", "serve.port=0", "--max-examples", "20000")
    got = figures(done)
    assert got == {"examples": str(summary["examples"]), "batches": str(summary["batches"]),
                   "ex/s": f"{summary['examples_per_s']:.0f}", "elapsed": f"{summary['elapsed_s']:.3f}"}, done
    assert summary["examples"] == 20000


def test_examples_per_s_counts_only_this_runs_examples(tmp_path):
    first, _ = run(tmp_path, "--max-examples", "20000")
    second, done = run(tmp_path, "--restore", "latest", "--max-examples", "30000")
    assert first["restored_examples"] == 0 and second["restored_examples"] == 20000
    assert second["examples"] == 30000                     # the model's total, restored ones included
    rate = (30000 - 20000) / second["elapsed_s"]           # (elapsed_s is rounded to the millisecond)
    assert second["examples_per_s"] == pytest.approx(rate, rel=0.01), second
    assert figures(done)["ex/s"] == f"{second['examples_per_s']:.0f}"


def nan_dense(batch):
    batch.dense[3] = np.nan           # one example: its logit, hence the loss, becomes NaN


def test_skipped_batches_are_not_counted_as_trained(tmp_path, fake_stream):
    fake_stream(batch_size=64, batches=8, poison={2: nan_dense, 5: nan_dense})
    job = Job(job_config(tmp_path), max_examples=8 * 64)
    metrics = Metrics(CollectorRegistry(), refresh_seconds=0)
    job.hooks.append(metrics.on_step)
    summary = job.run()
    value = metrics.registry.get_sample_value
    assert summary["nonfinite_batches"] == 2 and summary["nonfinite_examples"] == 2 * 64
    assert summary["examples"] == value("streamtrain_examples_total") == 6 * 64
    assert summary["batches"] == value("streamtrain_batches_total") == 6
    assert value("streamtrain_nonfinite_batches_total") == 2
    assert job.trainer.stepped == 8 * 64                   # --max-examples counts what was read


def test_every_give_up_of_the_store_is_counted(tmp_path, redis_factory, redis_namespace, caplog):
    """Redis stops just before a background flush: the flush gives up in its thread, the job
    flushes again in the foreground until Redis is back. Each give-up is one failed step."""
    server = redis_factory.start()
    cfg = configmod.load(ROOT / "examples" / "synthetic.json", ["metrics.enabled=false", "checkpoint.dir="])
    cfg["store"] = {"backend": "redis", "urls": [server.url], "namespace": redis_namespace, "timeout_s": 0.5,
                    "retry": {"initial_s": 0.02, "max_s": 0.05, "give_up_s": 0.3},
                    "write_back_s": 0.02}   # the second flush a background one on a host of any speed
    job = Job(configmod.validate(cfg), max_examples=120_000)
    metrics = Metrics(CollectorRegistry(), refresh_seconds=0)
    metrics.attach(job)
    job.hooks.append(metrics.on_step)
    begin, calls, restarted = job.store.flush_begin, [], []

    def restart_when_failed_twice(port):
        deadline = time.monotonic() + 60
        while job.store_failures < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        restarted.append(redis_factory.start(port=port))

    def flush_begin():
        calls.append(1)
        if len(calls) == 2:                  # Redis goes away under this flush's compare-and-set
            server.stop()
            threading.Thread(target=restart_when_failed_twice, args=(server.port,), daemon=True).start()
        return begin()

    job.store.flush_begin = flush_begin
    with caplog.at_level(logging.WARNING, logger="streamtrain"):
        summary = job.run()
    assert restarted and summary["examples"] == 120_000
    failures = [r for r in caplog.records if r.name == "streamtrain"
                and ("failed (nothing applied" in r.message or "background flush failed" in r.message)]
    background = [r for r in failures if "background flush failed" in r.message]
    assert len(background) >= 1 and summary["store_failures"] >= 2
    assert summary["store_failures"] == len(failures) == metrics.registry.get_sample_value(
        "streamtrain_store_failed_steps_total")
    assert metrics.registry.get_sample_value("streamtrain_store_errors_total") >= summary["store_failures"]
