"""The metrics ``Metrics`` exports that are read at scrape time, not set by a step: the sliding
window's quality gauges (only those of the model's loss kind), the Kafka lag per partition, the
failures a job counts while no step runs (bad records, store errors, waiting for the store), and
the figures of every step (examples, batches, seconds per phase), tallied in plain numbers.
Part of "every metric defined in ``metrics.py``": registered there, on its registry.
"""
from __future__ import annotations

import bisect
import threading
import time
from collections import deque

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from .lag import source_lag, total_lag  # noqa: F401  (metrics_scrape.source_lag, .total_lag: kept)
from .readers.malformed import REASONS


QUALITY = {   # figure of progressive.py's trackers -> (gauge, help); each exported only when it applies
    "logloss": ("streamtrain_progressive_logloss", "Predict-then-learn logloss over the sliding window "
                                                   "(binary, or multi-class: -log p[label])"),
    "auc": ("streamtrain_progressive_auc", "Predict-then-learn AUC over the sliding window (binary)"),
    "predicted_ctr": ("streamtrain_predicted_ctr", "Mean prediction over the sliding window (binary)"),
    "observed_ctr": ("streamtrain_observed_ctr", "Mean label over the sliding window (binary)"),
    "accuracy": ("streamtrain_progressive_accuracy",
                 "Predict-then-learn top-1 accuracy over the sliding window (multi-class)"),
    "rmse": ("streamtrain_progressive_rmse", "Predict-then-learn root mean squared error over the sliding "
                                             "window (mse)"),
    "mae": ("streamtrain_progressive_mae", "Predict-then-learn mean absolute error over the sliding window (mse)"),
    "label_stddev": ("streamtrain_label_stddev", "Standard deviation of the label over the sliding window: the "
                                                 "RMSE of always predicting its mean (mse)"),
}


class QualityCollector(Collector):
    """The window's quality gauges: only those of the model's loss kind, and only once the
    window has a finite value for them (a binary model exports no accuracy, no model reads 0
    before its first batch)."""

    def __init__(self, metrics):
        self.metrics = metrics

    def describe(self):
        return [GaugeMetricFamily(name, doc) for name, doc in QUALITY.values()]

    def collect(self):
        for key, value in self.metrics.quality.items():
            name, doc = QUALITY[key]
            yield GaugeMetricFamily(name, doc, value=value)


class LagCollector(Collector):
    """``streamtrain_kafka_lag{topic,partition}`` read from ``source.lag()`` at scrape time, so it
    stays current while the loop waits for data; partitions no longer assigned simply vanish."""

    NAME, HELP = "streamtrain_kafka_lag", "Records not yet applied, per assigned partition"

    def __init__(self, metrics):
        self.metrics = metrics

    def describe(self):
        return [GaugeMetricFamily(self.NAME, self.HELP, labels=["topic", "partition"])]

    def collect(self):
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["topic", "partition"])
        for key, value in sorted((source_lag(self.metrics.source) or {}).items(), key=str):
            if value is not None:
                topic, partition = (key.topic, key.partition) if hasattr(key, "topic") else key
                family.add_metric([str(topic), str(partition)], float(value))
        yield family


class LiveCounts(Collector):
    """Failures read from the job at scrape time, so they show while no step runs to sync a
    counter (a store outage, a stream of nothing but bad records): skipped input records by
    reason, every failed store operation (each retry counts), the store work the store gave up
    on, and whether the job waits for the store right now."""

    def __init__(self, metrics):
        self.metrics = metrics

    def describe(self):
        return list(self._families(None))

    def collect(self):
        return self._families(self.metrics.job)

    @staticmethod
    def _families(job):
        malformed = getattr(job, "malformed", None)
        counts = malformed.snapshot() if malformed is not None else {}
        family = CounterMetricFamily("streamtrain_records_malformed", "Input records skipped, by reason",
                                     labels=["reason"])
        for reason in REASONS:
            family.add_metric([reason], float(counts.get(reason, 0)))
        yield family
        stats = getattr(getattr(job, "store", None), "stats", None)
        yield CounterMetricFamily("streamtrain_store_errors", "Store operations that failed (and were retried)",
                                  value=float(getattr(stats, "errors", 0)))
        yield CounterMetricFamily("streamtrain_store_failed_steps",
                                  "Store work the store gave up on (a step or the start-up declare), retried by the job",
                                  value=float(getattr(job, "store_failures", 0)))
        yield GaugeMetricFamily("streamtrain_store_waiting", "1 while the job waits for an unreachable store",
                                value=float(bool(getattr(job, "waiting_for_store", None))))


class StepFigures(Collector):
    """``streamtrain_examples_total``, ``_batches_total``, ``_nonfinite_batches_total``,
    ``_last_batch_timestamp_seconds`` and the ``streamtrain_step_seconds{phase}`` histogram.

    A step only counts and keeps its ``StepResult.seconds`` (``step``: a few additions and an
    append, where the Prometheus client's counters, gauge and six histogram observations took a
    lock and a method call each); the seconds go into the histogram's buckets when folded in
    (``fold``: at every scrape, before any other collector of the registry is read, and at the
    metrics' refresh, so the list stays short). Buckets are Prometheus's: a value counts in the
    first bound at or above it; each phase's sum adds its values in order."""

    STEPS = (("streamtrain_examples", "Examples trained on (not those of skipped batches)", "examples"),
             ("streamtrain_batches", "Mini-batches trained on (not skipped ones)", "batches"),
             ("streamtrain_nonfinite_batches", "Batches skipped because their loss or gradient was not finite",
              "nonfinite"))
    SECONDS = ("streamtrain_step_seconds", "Seconds per phase of one step")
    LAST = ("streamtrain_last_batch_timestamp_seconds", "Unix time of the last step")

    def __init__(self, phases, buckets, before_collect=None):
        self.bounds = [float(b) for b in buckets]
        self.counts = {p: [0] * (len(self.bounds) + 1) for p in phases}    # last: above every bound
        self.sums = dict.fromkeys(phases, 0.0)
        self.examples = self.batches = self.nonfinite = 0
        self.last = 0.0
        self.pending: deque = deque()       # StepResult.seconds of the steps not folded in yet
        self.before_collect = before_collect
        self._fold_lock = threading.Lock()  # a scrape's fold and the refresh's: += on a bucket is not atomic

    def step(self, result, size: int) -> None:
        if result.applied:
            self.batches += 1
            self.examples += size
        else:
            self.nonfinite += 1
        self.last = time.time()
        self.pending.append(result.seconds)

    def fold(self) -> None:
        pending, counts, sums, bounds = self.pending, self.counts, self.sums, self.bounds
        with self._fold_lock:
            while pending:                  # (popleft: a step appending meanwhile is not lost)
                for phase, value in pending.popleft().items():
                    got = counts.get(phase)
                    if got is not None:
                        got[bisect.bisect_left(bounds, value)] += 1
                        sums[phase] += value

    def describe(self):
        return list(self._families())

    def collect(self):
        if self.before_collect is not None:
            self.before_collect()
        self.fold()
        return self._families()

    def _families(self):
        for name, doc, attr in self.STEPS:
            yield CounterMetricFamily(name, doc, value=float(getattr(self, attr)))
        yield GaugeMetricFamily(*self.LAST, value=self.last)
        family = HistogramMetricFamily(*self.SECONDS, labels=["phase"])
        for phase, counts in self.counts.items():
            total, buckets = 0, []
            for bound, n in zip(self.bounds, counts):
                total += n
                buckets.append((floatToGoString(bound), total))
            buckets.append(("+Inf", total + counts[-1]))
            family.add_metric([phase], buckets, sum_value=self.sums[phase])
        yield family
