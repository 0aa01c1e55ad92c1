"""Every Prometheus metric streamtrain exports, defined here and nowhere else.

``Metrics(registry)`` registers them on the registry it is given (a fresh ``CollectorRegistry``
by default, so tests never share state); ``on_step`` is a job hook called after every step.
Labels are bounded: phases, malformed reasons, row states and layer states are fixed sets;
tables and layers come from the model file; topic/partition pairs from the source's assignment.
A step only tallies its own figures (``metrics_scrape.StepFigures``); they, and the counters
kept from the job's counts (store work, drift alarms, AutoML), reach the exported metrics at
each scrape and each refresh. Figures that cost more than a counter (the sliding window, store
and source gauges) are refreshed at most every ``refresh_seconds``.
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np
from prometheus_client import (CollectorRegistry, Counter, Enum, Gauge, Histogram, Info, PlatformCollector,
                               ProcessCollector)
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from . import scoring
from .metrics_scrape import LagCollector, LiveCounts, QualityCollector, StepFigures
from .progressive import Window
from .state import Status
from .version import build_info

log = logging.getLogger("streamtrain.metrics")
PHASES = ("pull", "forward", "backward", "push", "update", "commit")
ROW_STATES = ("live", "admitted", "expired")
LAYER_STATES = [s.name.lower() for s in Status]
STEP_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10)
FRESHNESS_BUCKETS = (.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 21600, 86400)


def register_build_info(registry: CollectorRegistry) -> Info:
    """``streamtrain_build_info{version, python, numpy, numba} 1``, as Prometheus exporters do."""
    info = Info("streamtrain_build", "streamtrain's version and the versions it runs on", registry=registry)
    info.info(build_info())
    return info


class BulkHistogram(Collector):
    """A histogram fed a whole numpy array at a time (one observation per example)."""

    def __init__(self, name, documentation, buckets, registry):
        self.name, self.documentation = name, documentation
        self.bounds = np.asarray(buckets, np.float64)
        self.counts = np.zeros(len(self.bounds) + 1, np.int64)   # last bucket: above every bound
        self.sum = 0.0
        registry.register(self)

    def observe_many(self, values) -> None:
        values = np.asarray(values, np.float64)
        values = values[np.isfinite(values)]
        if values.size:
            self.counts = self.counts + np.bincount(np.searchsorted(self.bounds, values, side="left"),
                                       minlength=len(self.counts))
            self.sum += float(values.sum())

    def observe_same(self, value: float, count: int) -> None:
        """``count`` observations of one value (a batch without event times: every example's
        arrival → update is the batch's), without an array of them."""
        if count > 0 and np.isfinite(value):
            counts = self.counts.copy()
            counts[np.searchsorted(self.bounds, value, side="left")] += count
            self.counts = counts
            self.sum += float(value) * count

    def describe(self):
        return [HistogramMetricFamily(self.name, self.documentation)]

    def collect(self):
        counts = self.counts                  # replaced, never mutated: a consistent view
        cumulative = np.cumsum(counts)
        buckets = [(repr(float(b)), int(c)) for b, c in zip(self.bounds, cumulative[:-1])]
        buckets.append(("+Inf", int(cumulative[-1])))
        yield HistogramMetricFamily(self.name, self.documentation, buckets=buckets, sum_value=self.sum)


class Metrics:
    """The metric objects plus the bookkeeping that turns job state into them."""

    def __init__(self, registry: CollectorRegistry | None = None, *, window: int = 100_000,
                 refresh_seconds: float = 1.0, lifecycle_seconds: float = 60.0, process: bool = False):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        self.lock = threading.Lock()       # a scrape holding it sees one step's updates whole
        if process:                      # process_* (start time, memory, fds) and python_info
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
        register_build_info(r)
        # first of ours: a scrape folds in the steps' figures and syncs the counters below first
        self.steps = StepFigures(PHASES, STEP_BUCKETS, before_collect=self._sync_job)
        r.register(self.steps)
        self._sync_lock = threading.Lock()
        self.window = Window(int(window))
        self.refresh_seconds = float(refresh_seconds)
        self._next_refresh = 0.0
        self.lifecycle_seconds = float(lifecycle_seconds)
        self._next_lifecycle = 0.0
        self._seen: dict = {}
        self._row_labels: set = set()      # (table, state) of streamtrain_embedding_rows set so far
        self.source = None                 # whose lag() the scrape reads (set by on_step / attach)
        self.job = None                    # whose store failures the scrape reads (set by on_step / attach)
        self.quality: dict = {}            # the window's figures that apply to the model (QUALITY names)
        r.register(QualityCollector(self))
        self.window_examples = Gauge("streamtrain_window_examples", "Examples in the sliding window", registry=r)
        r.register(LagCollector(self))
        self.freshness = BulkHistogram("streamtrain_event_to_update_seconds",
                                       "Seconds from an example's event time to its update being applied",
                                       FRESHNESS_BUCKETS, r)
        self._store_counters(r)
        r.register(LiveCounts(self))
        self._state_gauges(r)
        self._automl_metrics(r)

    def _store_counters(self, r: CollectorRegistry) -> None:
        """The store's work, synced from ``store.stats`` after each step."""
        self.rows_pulled = Counter("streamtrain_store_rows_pulled_total", "Parameter rows pulled from the store", registry=r)
        self.rows_pushed = Counter("streamtrain_store_rows_pushed_total", "Parameter rows pushed to the store", registry=r)
        self.flushes = Counter("streamtrain_store_flushes_total", "Write-back flushes (redis store)", registry=r)
        self.rows_flushed = Counter("streamtrain_store_rows_flushed_total",
                                    "Rows written by write-back flushes", registry=r)
        self.flush_conflicts = Counter("streamtrain_store_flush_conflicts_total",
                                       "Rows a flush found written by another trainer and merged", registry=r)
        self.flush_seconds = Counter("streamtrain_store_flush_seconds_total", "Seconds spent flushing", registry=r)
        self.nonfinite_rows = Counter("streamtrain_store_nonfinite_rows_total",
                                      "Rows with a NaN or infinite value: not written (the stored row is kept), "
                                      "or read from the store (taken as the initial row)", registry=r)
        self.rows_vanished = Counter("streamtrain_store_rows_vanished_total",
                                     "Rows this trainer held that Redis had lost (written again from its copy)",
                                     registry=r)

    def _state_gauges(self, r: CollectorRegistry) -> None:
        """Tables, layers, checkpoints, drift and the graph: set by a step or a refresh."""
        self.embedding_rows = Gauge("streamtrain_embedding_rows", "Rows of each embedding table, by state",
                                    ["table", "state"], registry=r)
        self.layer_state = Enum("streamtrain_layer_state", "Each layer's state after the last step",
                                ["layer"], states=LAYER_STATES, registry=r)
        self.checkpoint_ts = Gauge("streamtrain_checkpoint_last_success_timestamp_seconds",
                                   "Unix time of the last checkpoint written", registry=r)
        self.checkpoint_failures = Counter("streamtrain_checkpoint_failures_total", "Checkpoints that failed", registry=r)
        self.drift_alarms = Counter("streamtrain_drift_detected_total",
                                    "Drift alarms over the progressive loss, by detector", ["detector"], registry=r)
        self.drift_last = Gauge("streamtrain_drift_last_alarm_timestamp_seconds",
                                "Unix time of the last drift alarm, by detector (0: none yet)", ["detector"], registry=r)
        self.graph_nodes = Gauge("streamtrain_graph_nodes", "Nodes with neighbours in the graph store", registry=r)
        self.graph_edges = Gauge("streamtrain_graph_edges", "Neighbour entries held by the graph store", registry=r)
        self.graph_fanout = Gauge("streamtrain_graph_mean_sampled_fanout",
                                  "Sampled neighbours per destination node, mean over every hop so far", registry=r)
        self.graph_sample_seconds = Histogram("streamtrain_graph_sample_seconds",
                                              "Seconds to sample one batch's blocks", buckets=STEP_BUCKETS, registry=r)

    def _automl_metrics(self, r: CollectorRegistry) -> None:
        """AutoML (automl/): labelled by slot (0 .. automl.live - 1, a shadow among them), never by configuration."""
        self.automl_loss = Gauge("streamtrain_automl_candidate_loss",
                                 "Each AutoML candidate's mean progressive loss since it was born, by slot "
                                 "(NaN: the slot is empty)", ["slot"], registry=r)
        self.automl_examples = Gauge("streamtrain_automl_candidate_examples",
                                     "Examples each AutoML candidate learnt since it was born, by slot", ["slot"],
                                     registry=r)
        self.automl_champion = Gauge("streamtrain_automl_champion_slot", "The slot of the AutoML champion",
                                     registry=r)
        self.automl_served = Gauge("streamtrain_automl_served_slot",
                                   "The slot of the AutoML candidate that answers (automl.serve: the leader or the champion)",
                                   registry=r)
        self.automl_promotions = Counter("streamtrain_automl_promotions_total",
                                         "AutoML challengers promoted to champion", registry=r)
        self.automl_retired = Counter("streamtrain_automl_retirements_total",
                                      "AutoML candidates retired, by reason", ["reason"], registry=r)
        self.automl_born = Counter("streamtrain_automl_candidates_born_total",
                                   "AutoML candidates started (the first ones included)", registry=r)

    # ---- job hooks ---------------------------------------------------------------------------
    def attach(self, job) -> None:
        self.source, self.job = job.source, job

    def on_step(self, job, batch, result) -> None:
        with self.lock:
            self._on_step(job, batch, result)

    def _on_step(self, job, batch, result) -> None:
        self.source, self.job = job.source, job
        self.steps.step(result, batch.size)        # counts and phase seconds: folded in at a scrape
        if result.applied:
            if result.predictions is not None:     # a loss with progressive figures (any kind)
                if self.window.tracker is not type(job.trainer.progressive):
                    self.window = Window(self.window.size, type(job.trainer.progressive))
                self.window.update(batch.labels, result.predictions)
            self._freshness(job, batch)
        graph = getattr(job, "graph_input", None)
        if graph is not None:
            self.graph_sample_seconds.observe(graph.last_sample_s)
        if time.monotonic() >= self._next_refresh:
            self.refresh(job)

    def _freshness(self, job, batch) -> None:
        """Event time → update; a source without event times gives arrival → update instead."""
        now = time.time()
        if batch.timestamps is not None:
            self.freshness.observe_many(now - np.asarray(batch.timestamps, np.float64))
        elif getattr(job, "received_at", None) is not None:
            self.freshness.observe_same(now - job.received_at, batch.size)

    def on_checkpoint(self, job, path, ok: bool = True) -> None:
        if ok:
            self.checkpoint_ts.set_to_current_time()
        else:
            self.checkpoint_failures.inc()

    # ---- bookkeeping -------------------------------------------------------------------------
    def _delta(self, key, total) -> float:
        """How much a cumulative count grew since the last look (restarts of the source count from 0)."""
        total = float(total or 0)
        before = self._seen.get(key, 0.0)
        self._seen[key] = total
        return total - before if total >= before else total

    def _grow(self, counter, key, total) -> None:
        """``counter.inc`` by what ``total`` grew since the last look (no call when nothing did)."""
        delta = self._delta(key, total)
        if delta:
            counter.inc(delta)

    def _sync_job(self) -> None:
        """The counters kept from the job's own counts (store work, drift alarms, AutoML): synced
        at each scrape (before they are read) and each refresh, not after every step."""
        job = self.job
        if job is None:
            return
        with self._sync_lock:
            self._sync_counters(job)
            self._sync_drift(getattr(job, "drift", None))
            self._sync_automl(getattr(getattr(job, "trainer", None), "search", None))

    def _sync_counters(self, job) -> None:
        stats = getattr(job.store, "stats", None)
        if stats is not None:
            for name, counter in (("pulled", self.rows_pulled), ("pushed", self.rows_pushed)):
                self._grow(counter, name, getattr(stats, f"rows_{name}"))
            for name in ("flushes", "rows_flushed", "flush_conflicts", "flush_seconds", "nonfinite_rows",
                         "rows_vanished"):
                self._grow(getattr(self, name), name, getattr(stats, name))

    def _sync_drift(self, drift) -> None:
        if drift is None:
            return
        for kind, n in drift.alarms.items():
            if self._seen.get(("drift", kind)) != float(n):     # (nothing changed: no label lookups)
                self.drift_alarms.labels(kind).inc(self._delta(("drift", kind), n))
                self.drift_last.labels(kind).set(drift.last_alarm.get(kind, 0.0))

    def _sync_automl(self, search) -> None:
        if search is None:
            return
        self.automl_champion.set(search.champion)
        self.automl_served.set(search.served)
        self.automl_promotions.inc(self._delta("automl_promotions", search.promotions))
        self.automl_born.inc(self._delta("automl_born", search.next_epoch))
        for reason, n in search.retired.items():
            self.automl_retired.labels(reason).inc(self._delta(("automl_retired", reason), n))
        for i, slot in enumerate(search.slots):
            self.automl_loss.labels(str(i)).set(search.mean_loss(i))
            self.automl_examples.labels(str(i)).set(slot["examples"] if slot else 0)

    def refresh(self, job) -> None:
        """Recompute the gauges: window figures, table rows, layer states, source lag."""
        self._next_refresh = time.monotonic() + self.refresh_seconds
        scoring.scored(job)                  # the drift monitor has seen every batch trained
        self.steps.fold()
        self._sync_job()
        figures = self.window.figures()
        self.window_examples.set(figures.count)
        if figures.count:
            self.quality = {k: float(v) for k, v in figures.figures().items() if np.isfinite(v)}
        self._store_rows(job.store)
        graph = getattr(job, "graph_input", None)
        if graph is not None:
            stats = graph.stats()
            self.graph_nodes.set(stats["nodes"])
            self.graph_edges.set(stats["edges"])
            self.graph_fanout.set(stats["mean_fanout"])
        trainer = getattr(job, "trainer", None)
        if trainer is not None:
            for layer, status in trainer.ctx.status.items():
                self.layer_state.labels(layer).state(Status(status).name.lower())

    def _store_rows(self, store) -> None:
        """Live rows from the store's stats; admitted/expired from ``store.lifecycle()`` (a
        count that may scan the store) every ``lifecycle_seconds``, when the store has one."""
        lifecycle = getattr(store, "lifecycle", None)
        if callable(lifecycle) and time.monotonic() >= self._next_lifecycle:
            self._next_lifecycle = time.monotonic() + self.lifecycle_seconds
            try:
                lifecycle()
            except Exception as err:   # the store retries on its own; a count can wait
                log.warning("could not count the store's rows: %s", err)
        stats = getattr(store, "stats", None)
        self._table_rows(getattr(stats, "table_rows", None) or {})
        self._table_rows(getattr(stats, "lifecycle", None) or {})
        declared = getattr(store, "specs", None)
        for table, state in [k for k in self._row_labels if declared and k[0] not in declared]:
            self.embedding_rows.remove(table, state)     # a dropped table (a retired AutoML candidate's)
            self._row_labels.discard((table, state))

    def _table_rows(self, table_rows: dict) -> None:
        for table, rows in table_rows.items():
            by_state = rows if isinstance(rows, dict) else {"live": rows}
            for state, n in by_state.items():
                if state in ROW_STATES:
                    self.embedding_rows.labels(table, state).set(n)
                    self._row_labels.add((table, state))


SERVE_ERRORS = ("bad_request", "too_large", "store_unavailable", "not_ready", "nonfinite", "internal", "timeout",
                "too_many_connections")
LATENCY_BUCKETS = (.0005, .001, .002, .005, .01, .025, .05, .1, .25, .5, 1, 2.5)
RECORD_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
AGE_BUCKETS = (.01, .05, .1, .25, .5, .75, 1, 1.5, 2, 5, 10, 30, 60)


class ServeMetrics:
    """The prediction server's metrics (``streamtrain serve``, or beside a job's own)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        r = self.registry = registry if registry is not None else CollectorRegistry()
        if registry is None:             # a job's registry (serving beside it) has it already
            register_build_info(r)
        self.latency = Histogram("streamtrain_serve_request_seconds", "Seconds per prediction request",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.records = Histogram("streamtrain_serve_batch_records", "Records per prediction request",
                                 buckets=RECORD_BUCKETS, registry=r)
        self.predictions = Counter("streamtrain_serve_predictions_total", "Records predicted", registry=r)
        self.errors = Counter("streamtrain_serve_errors_total", "Requests answered with an error, by kind",
                              ["kind"], registry=r)
        self.age = Histogram("streamtrain_serve_param_age_seconds",
                             "Age of the oldest parameter a request used (since read from the store)",
                             buckets=AGE_BUCKETS, registry=r)
        self.cache = Counter("streamtrain_serve_cache_lookups_total", "Row lookups of the serving cache",
                             ["result"], registry=r)
        self.hit_ratio = Gauge("streamtrain_serve_cache_hit_ratio", "Cache hits / lookups since the start",
                               registry=r)
        self.step = Gauge("streamtrain_serve_model_step", "The served model's step (updates applied)", registry=r)
        self.replica_age = Gauge("streamtrain_serve_replica_age_seconds",
                                 "Seconds since the replica of the tables last read the change feed "
                                 "(NaN: no complete replica, the row cache answers)", registry=r)
        self.replica_copies = Gauge("streamtrain_serve_replica_copies",
                                    "Complete copies of the tables the replica has made (1 + restarts)", registry=r)
        self.replica_age.set(float("nan"))
        for kind in SERVE_ERRORS:
            self.errors.labels(kind)
        self._seen = {"hit": 0, "miss": 0}

    def watch_replica(self, replica) -> None:
        """``replica()``: the server's ``Replica`` or None; read at each scrape."""
        def age():
            r = replica()
            return r.age() if r is not None else float("nan")
        self.replica_age.set_function(age)
        self.replica_copies.set_function(lambda: getattr(replica(), "bootstraps", 0))

    def cache_counts(self, hits: int, misses: int) -> None:
        for result, total in (("hit", hits), ("miss", misses)):
            self.cache.labels(result).inc(total - self._seen[result])
            self._seen[result] = total
        if hits + misses:
            self.hit_ratio.set(hits / (hits + misses))
