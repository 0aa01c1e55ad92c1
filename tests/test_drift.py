"""Drift detectors: Page-Hinkley and ADWIN against straightforward per-value transcriptions, a
planted drift in the synthetic stream caught by the trainer's monitor, and 1M stationary losses
that raise no alarm."""
from __future__ import annotations

import math
import types

import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.drift import DETECTORS, Adwin, DriftMonitor, PageHinkley
from streamtrain.graph import Graph, Schema
from streamtrain.metrics import Metrics
from streamtrain.scores import log_losses as logloss
from streamtrain.readers import SyntheticStream
from streamtrain.store import MemoryStore
from streamtrain.trainer import Trainer


# ---- reference transcriptions, one value at a time ---------------------------------------
def page_hinkley_loop(x, min_instances, delta, threshold, alpha, mode):
    """River's ``PageHinkley.update``, value by value."""
    alarms, fresh = [], True
    for i, v in enumerate(x):
        if fresh:
            n, mean, s_inc, min_inc, s_dec, max_dec = 0, 0.0, 0.0, math.inf, 0.0, -1.0
            fresh = False
        n += 1
        mean += (v - mean) / n
        dev = v - mean
        s_inc = alpha * s_inc + dev - delta
        s_dec = alpha * s_dec + dev + delta
        min_inc, max_dec = min(min_inc, s_inc), max(max_dec, s_dec)
        if n >= min_instances:
            up, down = s_inc - min_inc > threshold, max_dec - s_dec > threshold
            if (mode == "up" and up) or (mode == "down" and down) or (mode == "both" and (up or down)):
                alarms.append(i)
                fresh = True
    return alarms


class AdwinLoop:
    """ADWIN2 (MOA's loop) with Python lists: rows of [total, variance] buckets, oldest first."""

    def __init__(self, delta, clock, max_buckets, min_len, grace):
        self.delta, self.clock, self.m, self.min_len, self.grace = delta, clock, max_buckets, min_len, grace
        self.reset()

    def reset(self):
        self.rows, self.width, self.total, self.var, self.tick = [[]], 0, 0.0, 0.0, 0

    def insert(self, x):
        if self.width:
            self.var += self.width * (x - self.total / self.width) ** 2 / (self.width + 1)
        self.width += 1
        self.total += x
        self.rows[0].append([x, 0.0])
        r = 0
        while len(self.rows[r]) > self.m:
            (t1, v1), (t2, v2) = self.rows[r][:2]
            n = 2 ** r
            if r + 1 == len(self.rows):
                self.rows.append([])
            self.rows[r + 1].append([t1 + t2, v1 + v2 + n * n * (t1 / n - t2 / n) ** 2 / (2 * n)])
            del self.rows[r][:2]
            r += 1

    def delete_oldest(self):
        r = len(self.rows) - 1
        n = 2 ** r
        u, v = self.rows[r].pop(0)
        self.width -= n
        self.total -= u
        mu_w = self.total / self.width
        self.var -= v + n * self.width * (u / n - mu_w) ** 2 / (n + self.width)
        if not self.rows[r]:
            self.rows.pop()

    def detect(self):
        found, again = False, True
        while again:
            again = False
            n0, n1, u0, u1 = 0, self.width, 0.0, self.total
            cuts = [(r, k) for r in range(len(self.rows) - 1, -1, -1) for k in range(len(self.rows[r]))]
            for r, k in cuts:
                n = 2 ** r
                n0, n1, u0, u1 = n0 + n, n1 - n, u0 + self.rows[r][k][0], u1 - self.rows[r][k][0]
                if (r, k) == cuts[-1]:
                    break
                if n0 >= self.min_len and n1 >= self.min_len:
                    d = math.log(2 * math.log(self.width) / self.delta)
                    m = 1 / (n0 - self.min_len + 1) + 1 / (n1 - self.min_len + 1)
                    eps = math.sqrt(2 * m * (self.var / self.width) * d) + 2 / 3 * d * m
                    if abs(u0 / n0 - u1 / n1) > eps:
                        found = again = True
                        self.delete_oldest()
                        break
        return found

    def update_many(self, x):
        alarms = []
        for i, v in enumerate(x):
            self.insert(float(v))
            self.tick += 1
            if self.tick % self.clock == 0 and self.width > self.grace and self.detect():
                alarms.append(i)
                self.reset()
        return alarms


def calibrated_losses(n, rng, shift=0.0):
    """Per-example logloss of a calibrated model (log-odds ~ N(-1, 1.5)); ``shift`` moves its
    predictions off by that much in log-odds (a model the stream has drifted away from)."""
    z = rng.normal(-1.0, 1.5, n)
    y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float64)
    return logloss(y, 1 / (1 + np.exp(-(z + shift))))


def step_stream(rng, n=3000, jump=1.0):
    return np.concatenate([rng.normal(0, 1, n), rng.normal(jump, 1, n), rng.normal(0, 1, n)])


# ---- Page-Hinkley ------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["up", "down", "both"])
@pytest.mark.parametrize("alpha", [1.0, 0.999])
def test_page_hinkley_matches_the_per_value_definition(mode, alpha):
    x = step_stream(np.random.default_rng(3), jump=1.5 if mode != "down" else -1.5)
    opts = dict(min_instances=30, delta=0.005, threshold=20.0, alpha=alpha, mode=mode)
    want = page_hinkley_loop(x, **opts)
    assert want, "the step should raise at least one alarm"
    ph = PageHinkley(**opts)
    got = np.concatenate([ph.update_many(part) + start for start, part in _chunks(x, 777)])
    assert got.tolist() == want


def test_page_hinkley_by_hand():
    # min_instances=1, delta=0: means 0, 0, 0, 1; S_up = 0, 0, 0, 3; min S = 0 -> 3 > 2.5 at index 3
    assert PageHinkley(min_instances=1, delta=0.0, threshold=2.5).update_many([0, 0, 0, 4]).tolist() == [3]
    # down mode: S_dn = 0, 0, 0, 3 and max = 0 (it starts at -1): 0 - 3 < 0, no alarm; a drop alarms
    ph = PageHinkley(min_instances=1, delta=0.0, threshold=2.5, mode="down")
    assert ph.update_many([4, 4, 4, 0]).tolist() == [3]


# ---- ADWIN -------------------------------------------------------------------------------
def test_adwin_matches_the_per_value_definition():
    x = step_stream(np.random.default_rng(5), n=2000)
    opts = dict(delta=0.002, clock=32, max_buckets=5, min_window_length=5, grace_period=10, mode="both")
    ref = AdwinLoop(0.002, 32, 5, 5, 10)
    want = ref.update_many(x)
    assert len(want) >= 2, "both steps should be seen"
    ad = Adwin(**opts)
    got = np.concatenate([ad.update_many(part) + start for start, part in _chunks(x, 500)])
    assert got.tolist() == want
    assert ad.width == ref.width
    assert ad.estimation == pytest.approx(ref.total / ref.width, rel=1e-12)


def test_adwin_window_statistics_by_hand():
    ad = Adwin(grace_period=10_000)           # never checks: the window keeps every value
    x = np.arange(1000, dtype=np.float64)
    assert ad.update_many(x).tolist() == []
    sc = ad.state[0]
    assert ad.width == 1000 and sc[1] == x.sum()
    assert sc[2] == pytest.approx(((x - x.mean()) ** 2).sum(), rel=1e-9)   # merged variances stay exact
    counts = ad.state[3]
    assert (counts <= 5).all() and sum(int(c) << r for r, c in enumerate(counts)) == 1000


# ---- the defaults on the progressive loss ----------------------------------------------
def test_a_stationary_million_raises_no_alarm():
    x = calibrated_losses(1_000_000, np.random.default_rng(11))
    for kind in ("page_hinkley", "adwin"):
        assert DETECTORS.get(kind)().update_many(x).tolist() == [], kind


def test_a_shifted_model_is_caught_within_stated_examples():
    """The model's log-odds shifted by 2 after 100k examples (mean loss 0.48 -> 0.83):
    Page-Hinkley within 2,000 examples, ADWIN within 1,000."""
    rng = np.random.default_rng(12)
    x = np.concatenate([calibrated_losses(100_000, rng), calibrated_losses(20_000, rng, shift=2.0)])
    for kind, within in (("page_hinkley", 2000), ("adwin", 1000)):
        hits = DETECTORS.get(kind)().update_many(x)
        assert len(hits) and 100_000 <= hits[0] < 100_000 + within, (kind, hits[:3])


def test_planted_drift_in_the_synthetic_stream_fires_in_the_trainer():
    """A trainer learns the synthetic stream's planted model for 60k examples; then the planted
    weights change (another seed). The monitor's first alarm comes within 4,000 examples of the
    change, none before it; the metrics count it."""
    lr = [{"name": "sp", "type": "sparse_input"}, {"name": "dn", "type": "dense_input"},
          {"name": "w", "type": "embedding", "inputs": ["sp"], "dim": 1, "init": "zeros"},
          {"name": "ws", "type": "sum_pooling", "inputs": ["w"]},
          {"name": "lin", "type": "fc", "inputs": ["dn"], "dim": 1},
          {"name": "logit", "type": "add", "inputs": ["ws", "lin"]},
          {"name": "loss", "type": "logloss", "inputs": ["logit"]}]
    cfg = {"fields": 6, "cardinality": 50, "dense": 2, "weight_scale": 1.5, "examples": 60_000}
    before = SyntheticStream({**cfg, "seed": 1}, 512).reader()
    after = SyntheticStream({**cfg, "seed": 2, "examples": 20_000}, 512).reader()
    graph = store = None
    monitor = DriftMonitor.from_config({})
    metrics = Metrics()
    job = types.SimpleNamespace(drift=monitor, malformed=types.SimpleNamespace(counts={}), store=None,
                                source=None, received_at=None)
    for batch in [*before(), *after()]:
        if graph is None:
            graph = Graph.from_config(lr, Schema.of(batch))
            store = MemoryStore()
            store.declare(graph.params, {"type": "adagrad", "lr": 0.1})
            job.trainer = Trainer(graph, store)
            job.store = store
        result = job.trainer.step(batch)
        monitor.on_step(job, batch, result)
        metrics._sync_drift(monitor)
    assert set(monitor.alarms) == {"page_hinkley", "adwin"}
    first = min(monitor.last_example.values())
    assert sum(monitor.alarms.values()) >= 1
    for kind in monitor.alarms:
        assert monitor.alarms[kind] == 0 or monitor.last_example[kind] >= 60_000
    assert 60_000 <= first < 64_000, monitor.last_example
    total = sum(metrics.registry.get_sample_value("streamtrain_drift_detected_total", {"detector": k}) or 0
                for k in monitor.alarms)
    assert total == sum(monitor.alarms.values())


def test_config_problems_name_the_detector_option():
    cfg = configmod.load("examples/lr.json", ['drift.detectors=[{"type": "adwin", "delta": -1}, {"type": "cusum"}, 3]'])
    assert [p for p in configmod.problems(cfg) if p[0].startswith("drift")] == [
        ("drift.detectors[0].delta", "must be > 0, got -1"),
        ("drift.detectors[1].type", f"unknown drift detector 'cusum' (known: {', '.join(DETECTORS.names())})"),
        ("drift.detectors[2]", 'expected an object like {"type": "adwin"}, got 3')]
    assert DriftMonitor.from_config({"enabled": False}) is None


def test_every_detector_builds_from_its_test_params():
    for kind, cls in DETECTORS.items():
        d = cls(**cls.test_params())
        assert d.kind == kind and d.update_many(np.zeros(100)).tolist() == []


def _chunks(x, size):
    return [(i, x[i:i + size]) for i in range(0, len(x), size)]


def test_adwin_raises_the_alarm_only_for_the_watched_direction():
    """A falling loss (a model that learns: every job's first minutes) is a change ADWIN adapts
    its window to, but by default (``mode: up``) not an alarm; a rising one is."""
    rng = np.random.default_rng(13)
    falling = np.concatenate([rng.normal(0.8, 0.1, 5000), rng.normal(0.4, 0.1, 5000)])
    rising = falling[::-1].copy()
    assert Adwin().update_many(falling).tolist() == []
    assert len(Adwin(mode="both").update_many(falling)) and len(Adwin(mode="down").update_many(falling))
    hits = Adwin().update_many(rising)
    assert len(hits) and 5000 <= hits[0] < 6000
    assert Adwin(mode="down").update_many(rising).tolist() == []
    ad = Adwin(mode="up")
    ad.update_many(falling)
    assert ad.width < 6000 and ad.estimation == pytest.approx(0.4, abs=0.02)   # the window moved on


def test_the_monitor_is_fed_the_progressive_losses_of_the_step():
    """The trainer's progressive figures compute each batch's per-example losses once and the
    step hands them on: the monitor reads those (bit for bit its own ``log_losses`` of the
    predictions) instead of computing them again."""
    lr = [{"name": "sp", "type": "sparse_input"},
          {"name": "w", "type": "embedding", "inputs": ["sp"], "dim": 1, "init": "zeros"},
          {"name": "ws", "type": "sum_pooling", "inputs": ["w"]},
          {"name": "loss", "type": "logloss", "inputs": ["ws"], "sequential": True}]
    batches = list(SyntheticStream({"fields": 4, "cardinality": 20, "dense": 0, "examples": 2048}, 512).reader()())
    graph = Graph.from_config(lr, Schema.of(batches[0]))
    store = MemoryStore()
    store.declare(graph.params, {"type": "adagrad", "lr": 0.1})
    monitor = DriftMonitor.from_config({})
    job = types.SimpleNamespace(trainer=Trainer(graph, store))
    fed = []
    real = monitor.update
    monitor.update = lambda losses: (fed.append(losses), real(losses))[1]
    for batch in batches:
        result = job.trainer.step(batch)
        monitor.on_step(job, batch, result)
        assert fed[-1] is result.losses
        # the step's compiled log against numpy's (a SIMD routine per CPU): equal to the last bit or two
        np.testing.assert_array_max_ulp(result.losses, logloss(batch.labels, np.asarray(result.predictions).reshape(-1)), 2)
    assert len(fed) == len(batches) and monitor.examples == 2048
    assert job.trainer.progressive.loss_sum == pytest.approx(sum(float(f.sum()) for f in fed), rel=1e-12)


# ---- false alarms (issue 24, item 12) ------------------------------------------------------
def wandering_losses(n, rng, sd, tau, chunk=1_000_000):
    """Per-example logloss of a learner with no drift to see: the stream is stationary and
    calibrated, but the model's log-odds are off by an AR(1) error of stationary sd ``sd`` and
    correlation time ``tau`` examples (the wander of an online learner's weights)."""
    from scipy.signal import lfilter
    phi = np.exp(-1.0 / tau)
    state = np.array([rng.normal(0, sd) * phi])
    for _ in range(n // chunk):
        z = rng.normal(-1.0, 1.5, chunk)
        y = (rng.random(chunk) < 1 / (1 + np.exp(-z))).astype(np.float64)
        u, state = lfilter([1.0], [1.0, -phi], rng.normal(0, sd * np.sqrt(1 - phi * phi), chunk), zi=state)
        yield logloss(y, 1 / (1 + np.exp(-(z + u))))


def alarms_on(stream, detectors):
    counts = {kind: 0 for kind in detectors}
    for x in stream:
        for kind, d in detectors.items():
            counts[kind] += len(d.update_many(x))
    return counts


def test_the_false_alarm_rate_of_a_learner_that_wanders_is_bounded():
    """20M examples of a learner whose log-odds wander (sd 0.2, correlation 200k examples) on a
    stationary stream (seed 1): at most 3 alarms per detector with the defaults (1 and 2 here),
    where the defaults before issue 24 (Page-Hinkley delta 0.005, ADWIN without min_change), fed
    the same losses, raise 8 and 6."""
    got = alarms_on(wandering_losses(20_000_000, np.random.default_rng(1), 0.2, 2e5),
                    {"page_hinkley": PageHinkley(), "adwin": Adwin(),
                     "old page_hinkley": PageHinkley(delta=0.005), "old adwin": Adwin(min_change=0.0)})
    assert got["page_hinkley"] <= 3 and got["adwin"] <= 3, got
    assert got["old page_hinkley"] >= 5 and got["old adwin"] >= 5, got


def test_adwin_min_change_keeps_the_cut_and_drops_small_alarms():
    rng = np.random.default_rng(14)
    x = np.concatenate([rng.normal(0.50, 0.2, 50_000), rng.normal(0.51, 0.2, 50_000)])
    assert len(Adwin(min_change=0.0).update_many(x)) >= 1       # a change of 0.01 is found...
    quiet = Adwin()
    assert quiet.update_many(x).tolist() == []                  # ...and is below the default's 0.02
    assert quiet.width < 100_000                                # the window was cut all the same


def test_the_log_says_a_detector_alarm_at_most_once_per_interval(caplog):
    """Bursts of alarms (a small file cycled: the loss moves at each pass) give one WARNING line
    per detector per ``log_every_seconds``, which counts those it did not print; every alarm is
    counted in ``alarms`` (the metrics)."""
    rng = np.random.default_rng(15)
    now = [0.0]
    monitor = DriftMonitor([Adwin(grace_period=200)], log_every_s=300, clock=lambda: now[0])
    for i in range(10):                                          # ten passes, each a rise
        monitor.update(np.concatenate([rng.normal(0.3, 0.1, 3000), rng.normal(0.9, 0.1, 3000)]))
        now[0] += 60 if i != 4 else 100                          # 5 minutes pass after the 5th
    lines = [r.getMessage() for r in caplog.records if "drift alarm" in r.getMessage()]
    assert monitor.alarms["adwin"] == 10
    assert len(lines) == 2, lines
    assert lines[0].startswith("drift alarm (adwin) at example 3") and "more" not in lines[0]
    assert "the progressive loss rose (4 more alarm(s) of it since its last line" in lines[1]


def test_a_cycled_file_logs_its_bursts_of_alarms_once(data_dir, tmp_path):
    """MovieLens-100K cycled 4 times under FM: ADWIN's window sees the loss move within the
    file (71 alarms in 1M examples, 69 WARNING lines before issue 24); the log has one line for
    them, the summary and the metrics count every one."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    from streamtrain.readers import write_movielens_csv
    csv = tmp_path / "ml.csv"
    write_movielens_csv(data_dir / "movielens_100k", csv)
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(root / "examples" / "fm.json"),
                          "--set", "reader.type=file", "--set", f"reader.path={csv}", "--set", "reader.format=csv",
                          "--set", 'reader.multivalue={"genres": "|"}', "--set", "reader.loop=true",
                          "--max-examples", "400000", "--set", "metrics.enabled=false",
                          "--set", "checkpoint.dir=null", "--summary", str(tmp_path / "s.json")],
                         capture_output=True, text=True, timeout=300, cwd=root)
    assert out.returncode == 0, out.stderr[-2000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    lines = [line for line in out.stderr.splitlines() if "drift alarm" in line]
    assert summary["drift_alarms"]["adwin"] >= 10
    assert len(lines) <= len(summary["drift_alarms"]), lines       # one per detector (the run is short)
