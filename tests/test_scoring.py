"""``scoring.Scorer``: a file job's progressive figures and drift detectors scored in the reader's
parse thread (or, when it waits for a batch, in the training thread), in order: the same
figures and the same alarms, bit for bit, as scoring in the step."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from streamtrain import config as cfgmod
from streamtrain import scoring
from streamtrain.drift import DriftMonitor
from streamtrain.job import Job
from streamtrain.progressive import Progressive
from tests.conftest import ROOT


def _drifting_libsvm(path, n=40_000, seed=0):
    """Two fields of 50 values each; the click rate of every value jumps halfway through."""
    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 50, n), rng.integers(0, 50, n)
    rate = np.where(np.arange(n) < n // 2, 0.05 + 0.004 * a, 0.45 - 0.004 * a)
    y = (rng.random(n) < rate).astype(int)
    path.write_text("".join(f"{y[i]} {a[i]}:1 {50 + b[i]}:1\n" for i in range(n)))
    return path


def _run(path, monkeypatch, scored_by, in_step=False):
    if in_step:
        monkeypatch.setattr(scoring, "attach", lambda job, prepare: None)
    real = Progressive.update

    def update(self, labels, p):
        scored_by.append((threading.current_thread().name, len(labels)))
        return real(self, labels, p)

    monkeypatch.setattr(Progressive, "update", update)
    job = Job(cfgmod.validate(cfgmod.load(ROOT / "examples" / "lr.json", [
        "reader.type=file", f"reader.path={path}", "reader.format=libsvm", "batch_size=256",
        "reader.parse_thread=always", "metrics.enabled=false", "log.every_seconds=1000", "checkpoint.dir=null"])))
    summary = job.run()
    monkeypatch.undo()
    return job, summary


def test_a_file_jobs_figures_and_alarms_are_those_of_scoring_in_the_step(tmp_path, monkeypatch):
    path = _drifting_libsvm(tmp_path / "drift.libsvm")
    step_by, thread_by = [], []
    job_step, in_step = _run(path, monkeypatch, step_by, in_step=True)
    job_thread, handed = _run(path, monkeypatch, thread_by)
    assert isinstance(job_thread.trainer.scorer, scoring.Scorer) and job_step.trainer.scorer is None
    assert {name for name, _ in step_by} == {"MainThread"}
    assert {name for name, _ in thread_by} <= {"MainThread", "streamtrain-buffered"}
    # every batch trained scored once, in order (the sizes: 156 batches of 256, the last of 64)
    assert [n for _, n in thread_by] == [n for _, n in step_by] and sum(n for _, n in step_by) == 40_000
    for key in ("logloss", "auc", "predicted_ctr", "observed_ctr", "examples"):
        assert handed[key] == in_step[key], key
    assert job_thread.drift.alarms == job_step.drift.alarms and sum(job_step.drift.alarms.values()) >= 1
    assert job_thread.drift.last_example == job_step.drift.last_example
    assert job_thread.drift.on_step not in job_thread.hooks and job_step.drift.on_step in job_step.hooks


def _batches(n=40, size=300, seed=1):
    rng = np.random.default_rng(seed)
    return [((rng.random(size) < 0.3).astype(np.float32), rng.random(size)) for _ in range(n)]


def test_scored_in_any_thread_the_figures_are_those_of_one_thread_in_order():
    one, other = Progressive(), Progressive()
    drift_one, drift_other = DriftMonitor.from_config({}), DriftMonitor.from_config({})
    for labels, p in _batches():
        drift_one.update(one.update(labels, p))
    scorer = scoring.Scorer(other, drift_other)
    stop = threading.Event()

    def helper():                      # the parse thread's turns, as often as it can
        while not stop.is_set():
            scorer.run_pending(wait=False)

    t = threading.Thread(target=helper)
    t.start()
    try:
        for labels, p in _batches():
            scorer.submit(labels, p)
    finally:
        stop.set()
        t.join()
    scorer.drain()
    assert (other.count, other.loss_sum, other.label_sum, other.pred_sum) == \
        (one.count, one.loss_sum, one.label_sum, one.pred_sum)
    assert np.array_equal(other.pos, one.pos) and np.array_equal(other.neg, one.neg)
    assert drift_other.examples == drift_one.examples == 12_000


def test_the_training_thread_scores_when_too_many_wait_and_gets_the_error_scoring_met():
    prog = Progressive()
    scorer = scoring.Scorer(prog)
    batches = _batches(scoring.MAX_WAITING)
    for labels, p in batches[:-1]:
        scorer.submit(labels, p)
    assert prog.count == 0             # nobody scored yet
    scorer.submit(*batches[-1])
    assert prog.count == 300 * scoring.MAX_WAITING

    class Broken:
        def update(self, losses):
            raise RuntimeError("detector broke")

    broken = scoring.Scorer(Progressive(), Broken())
    broken.submit(*batches[0])
    broken.run_pending(wait=False)      # in the parse thread: kept, not raised there
    with pytest.raises(RuntimeError, match="detector broke"):
        broken.submit(*batches[1])
    broken.drain()                      # raised once
