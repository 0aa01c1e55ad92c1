"""Live quality for every loss kind: the progressive trackers against closed forms, and a real
Job per kind (softmax_ce, mse, logloss) with its gauges, progress line, summary and drift
detectors fed that loss's per-example losses; a figure that does not apply is not exported."""
from __future__ import annotations

import logging

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from streamtrain.metrics import Metrics
from streamtrain.progressive import MultiClass, Progressive, Regression, Window, tracker_class
from streamtrain.scores import log_losses
from tests.fixtures_prometheus import job_config

WINDOW = 300
BASE = [{"name": "sparse", "type": "sparse_input"}, {"name": "dense", "type": "dense_input"},
        {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 4},
        {"name": "pool", "type": "sum_pooling", "inputs": ["emb"]},
        {"name": "x", "type": "concat", "inputs": ["pool", "dense"]}]
MODELS = {
    "softmax_ce": BASE + [{"name": "out", "type": "fc", "inputs": ["x"], "dim": 3},
                          {"name": "loss", "type": "softmax_ce", "inputs": ["out"]}],
    "mse": BASE + [{"name": "out", "type": "fc", "inputs": ["x"], "dim": 1},
                   {"name": "loss", "type": "mse", "inputs": ["out"]}],
    "logloss": BASE + [{"name": "out", "type": "fc", "inputs": ["x"], "dim": 1},
                       {"name": "loss", "type": "logloss", "inputs": ["out"]}],
}
GAUGES = {"logloss": "streamtrain_progressive_logloss", "auc": "streamtrain_progressive_auc",
          "accuracy": "streamtrain_progressive_accuracy", "rmse": "streamtrain_progressive_rmse",
          "mae": "streamtrain_progressive_mae", "predicted_ctr": "streamtrain_predicted_ctr",
          "observed_ctr": "streamtrain_observed_ctr", "label_stddev": "streamtrain_label_stddev"}


def test_multiclass_figures_are_the_closed_form():
    p = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.25, 0.5, 0.25], [0.4, 0.4, 0.2]])
    y = np.array([0, 1, 1, 1], np.float32)
    t = MultiClass()
    losses = t.update(y[:2], p[:2])
    t.update(y[2:], p[2:])
    np.testing.assert_allclose(losses, [-np.log(0.7), -np.log(0.3)], rtol=1e-12)
    assert t.logloss == pytest.approx(-(np.log(0.7) + np.log(0.3) + np.log(0.5) + np.log(0.4)) / 4, rel=1e-12)
    assert t.accuracy == 0.5          # rows 0 and 2 right; row 3's tie goes to class 0
    assert t.figures() == {"logloss": t.logloss, "accuracy": 0.5}


def test_regression_figures_are_the_closed_form():
    t = Regression()
    losses = t.update(np.array([1.0, 2.0, 0.0]), np.array([1.5, 0.0, 0.0]))
    np.testing.assert_allclose(losses, np.array([0.25, 4.0, 0.0]) / np.var([1.0, 2.0, 0.0]))   # over the variance
    t.update(np.array([-1.0]), np.array([2.0]))
    assert t.rmse == pytest.approx(np.sqrt((0.25 + 4 + 0 + 9) / 4), rel=1e-12)
    assert t.mae == pytest.approx((0.5 + 2 + 0 + 3) / 4, rel=1e-12)
    assert t.label_stddev == pytest.approx(np.std([1.0, 2.0, 0.0, -1.0]), rel=1e-12)
    assert set(t.figures()) == {"rmse", "mae", "label_stddev"}
    assert Regression().figures()["label_stddev"] != Regression().figures()["label_stddev"]   # nan: no label yet


def test_the_window_keeps_the_last_examples_of_any_kind():
    w = Window(4, MultiClass)
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(3), 10)
    y = rng.integers(0, 3, 10)
    for i in range(0, 10, 2):
        w.update(y[i:i + 2], p[i:i + 2])
    got = w.figures()
    assert got.count == 4
    assert got.logloss == pytest.approx(-np.log(p[np.arange(6, 10), y[6:]]).mean(), rel=1e-12)


class Recorder:
    """A job hook keeping every applied step's labels and predictions."""

    def __init__(self):
        self.labels, self.predictions = [], []

    def __call__(self, job, batch, result):
        if result.applied:
            self.labels.append(np.array(batch.labels))
            self.predictions.append(np.array(result.predictions, np.float64))

    def all(self, last=None):
        y, p = np.concatenate(self.labels), np.concatenate(self.predictions)
        return (y, p) if last is None else (y[-last:], p[-last:])


def run(tmp_path, fake_stream, loss, batches=10, labels=None):
    from streamtrain.job import Job
    fake_stream(batch_size=64, batches=batches,
                poison={i: labels for i in range(batches)} if labels else None)
    cfg = job_config(tmp_path, layers=MODELS[loss], drift={"detectors": [{"type": "adwin"}]},
                     log={"every_seconds": 0})
    job = Job(cfg)
    metrics = Metrics(CollectorRegistry(), window=WINDOW, refresh_seconds=0)
    seen, fed = Recorder(), []
    job.hooks[:0] = [seen]
    job.hooks.append(metrics.on_step)
    real = job.drift.update
    job.drift.update = lambda losses: (fed.append(np.array(losses)), real(losses))[1]
    summary = job.run()
    return job, metrics, seen, np.concatenate(fed), summary


def three_classes(batch):
    batch.labels = (np.arange(batch.size) % 3).astype(np.float32)


def exported(metrics) -> dict:
    get = metrics.registry.get_sample_value
    return {k: get(name) for k, name in GAUGES.items() if get(name) is not None}


def window_start(seen) -> int:
    """The window holds whole batches: the last ones whose count reaches ``WINDOW``."""
    sizes, n = [len(y) for y in seen.labels], 0
    for size in reversed(sizes):
        if n >= WINDOW:
            break
        n += size
    return n


def test_softmax_ce_reports_accuracy_and_multiclass_logloss(tmp_path, fake_stream, caplog):
    with caplog.at_level(logging.INFO, logger="streamtrain"):
        job, metrics, seen, fed, summary = run(tmp_path, fake_stream, "softmax_ce", labels=three_classes)
    y, p = seen.all()
    losses = -np.log(np.maximum(p[np.arange(len(y)), y.astype(int)], 1e-7))
    np.testing.assert_allclose(fed, losses, rtol=1e-12)                    # drift: the model's own loss
    assert summary["accuracy"] == round(float((p.argmax(1) == y).mean()), 6)
    assert summary["logloss"] == round(float(losses.mean()), 6)
    assert summary["auc"] is None and summary["predicted_ctr"] is None and "rmse" not in summary
    wy, wp = seen.all(window_start(seen))
    got = exported(metrics)
    assert set(got) == {"logloss", "accuracy"}                              # no AUC, no CTR, no RMSE
    assert got["accuracy"] == pytest.approx((wp.argmax(1) == wy).mean(), rel=1e-12)
    assert got["logloss"] == pytest.approx(losses[-len(wy):].mean(), rel=1e-12)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("examples=")]
    assert lines and "accuracy=" in lines[-1] and "logloss=None" not in lines[-1] and "auc=" not in lines[-1]


def test_mse_reports_rmse_and_mae(tmp_path, fake_stream, caplog):
    with caplog.at_level(logging.INFO, logger="streamtrain"):
        job, metrics, seen, fed, summary = run(tmp_path, fake_stream, "mse")
    y, p = seen.all()
    ends = np.cumsum([len(b) for b in seen.labels])          # drift: each batch's squared errors over the
    var = np.concatenate([np.full(len(b), np.var(y[:e])) for b, e in zip(seen.labels, ends)])   # variance so far
    np.testing.assert_allclose(fed, (p - y) ** 2 / var, rtol=1e-6)     # (the variance from running sums)
    assert summary["rmse"] == round(float(np.sqrt(((p - y) ** 2).mean())), 6)
    assert summary["mae"] == round(float(np.abs(p - y).mean()), 6)
    assert summary["label_stddev"] == round(float(y.std()), 6)
    assert summary["logloss"] is None and summary["auc"] is None and "accuracy" not in summary
    wy, wp = seen.all(window_start(seen))
    got = exported(metrics)
    assert set(got) == {"rmse", "mae", "label_stddev"}
    assert got["rmse"] == pytest.approx(np.sqrt(((wp - wy) ** 2).mean()), rel=1e-12)
    assert got["label_stddev"] == pytest.approx(np.std(wy, dtype=np.float64), rel=1e-9)
    assert got["mae"] == pytest.approx(np.abs(wp - wy).mean(), rel=1e-12)
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("examples=")]
    assert lines and "rmse=" in lines[-1] and "mae=" in lines[-1] and "logloss" not in lines[-1]


def test_logloss_keeps_its_figures_and_exports_no_accuracy(tmp_path, fake_stream):
    job, metrics, seen, fed, summary = run(tmp_path, fake_stream, "logloss")
    y, p = seen.all()
    np.testing.assert_allclose(fed, log_losses(y, p), rtol=1e-12)
    assert summary["logloss"] == round(float(log_losses(y, p).mean()), 6)
    assert "accuracy" not in summary and "rmse" not in summary
    assert set(exported(metrics)) == {"logloss", "auc", "predicted_ctr", "observed_ctr"}


def test_no_quality_gauge_before_the_first_batch():
    metrics = Metrics(CollectorRegistry())
    assert exported(metrics) == {}
    assert metrics.registry.get_sample_value("streamtrain_window_examples") == 0


def test_each_loss_declares_its_tracker():
    from streamtrain.ops import LAYERS
    kinds = {name: tracker_class(LAYERS.get(name)) for name in ("logloss", "softmax_ce", "mse")}
    assert kinds == {"logloss": Progressive, "softmax_ce": MultiClass, "mse": Regression}
