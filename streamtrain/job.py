"""The training job: reader → batches → trainer → store, until the stream ends or a stop is asked.

The graph is built from the first batch's schema (the model file names no data columns).
Offsets of a batch are committed only once its update is durable in the store: the store says
which (``ParamStore.applied`` / ``durable_offsets``); with a store that writes back (the redis
store's ``write_back_s``) only after the flush that wrote it.
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

from . import checkpoint, job_checkpoints, label_units, numeric_only, outage, readahead, report, scoring, task
from .backoff import STOPPED, Backoff
from .automl import attach as automl_attach
from .drift import DriftMonitor
from .graph import Graph, Schema
from .graphstore.nodes import reader_config
from .graphstore.stream import model_problems, open_graph_input
from .errors import CheckpointError, ConfigError, StoreAccessError, StoreError
from .store import make_store
from .store.durable import committed
from .trainer import Trainer

log = logging.getLogger("streamtrain")
# after the store itself gave up (``store.retry.give_up_s``): pause 1, 2, 4 … 30 s, never give up
STORE_BACKOFF = Backoff(initial_s=1.0, max_s=30.0, give_up_s=None)


class Job(report.Reporting):
    def __init__(self, config: dict, *, max_examples: int | None = None, restore: str | None = None):
        from streamtrain import limit_blas_threads
        from streamtrain.readers import Malformed, open_reader

        limit_blas_threads()
        self.config = config
        self.max_examples = max_examples
        self.restore_from = restore
        self.malformed = Malformed()
        self.source = open_reader(reader_config(config["reader"], config.get("graph")), config["batch_size"],
                                  self.malformed)
        store_cfg = dict(config["store"])
        if store_cfg.get("backend") == "redis":     # several models can share one Redis
            store_cfg.setdefault("namespace", config.get("name") or "default")
        self.store = make_store(store_cfg)
        # a stop ends the store's own retries at once; what they wait for shows as store_waiting
        self.store.watch(lambda: self.stop_requested, lambda what: setattr(self, "_store_waiting", what))
        self.graph_input = open_graph_input(config.get("graph"), self.malformed,
                                            namespace=config.get("name") or "default")
        self.graph: Graph | None = None
        self.trainer: Trainer | None = None
        self.stop_requested = False
        self.sought = False      # restore() moved the reader back to a checkpoint's offsets
        self.binary_labels = self.config.get("task") == "click"     # (task.py: "auto" decides it)
        self.started = time.monotonic()
        self.offsets, self.offset_epochs = {}, {}   # committed (not the store's undurable) and their epochs
        self.writes_back = self.store.writes_back
        self.store.auto_flush = not self.writes_back    # writing back: the job flushes, then commits
        self.last_checkpoint: str | None = None
        self.checkpoint_error: str | None = None   # why the final checkpoint failed (exit 3)
        self.store_failures = 0     # steps that failed because the store gave up (then retried)
        self._waiting: str | None = None        # what the job retries while the store is unreachable
        self._store_waiting: str | None = None  # ... what the store itself retries (``watch``)
        self.store_down = False     # stopped while the store was unreachable: no final checkpoint
        self.received_at = None
        self.first_step = None   # (monotonic time, examples) once the first batch is applied
        self.restored_examples = 0  # examples a restored checkpoint had trained (not this run's)
        self.final: dict | None = None   # the summary, made once when the run ends
        self.drift = DriftMonitor.from_config(config.get("drift"))    # alarms over the progressive loss
        self.hooks = [self.drift.on_step] if self.drift else []   # callables(job, batch, result) after every step
        self.step_lock = threading.Lock()   # held for a whole step: a server reads between steps
        self.checkpoint_hooks = []   # callables(job, path, ok) after every checkpoint attempt
        self.checkpoint_requested = False   # set by SIGHUP: write one at the next safe point
        self._ckpt_batches, self._ckpt_time = 0, time.monotonic()

    @property
    def waiting_for_store(self) -> str | None:
        """What waits for an unreachable store now (the job's retry of a step, or the store's own), or None."""
        return self._waiting or self._store_waiting

    @property
    def stop_requested(self) -> bool:
        return self._stop_requested

    @stop_requested.setter
    def stop_requested(self, value: bool) -> None:
        """Asking to stop also wakes a reader that waits for data (Kafka on a quiet topic)."""
        self._stop_requested = bool(value)
        request_stop = getattr(self.source, "request_stop", None)
        if value and request_stop is not None:
            request_stop()

    # ---- building ------------------------------------------------------------------------
    def _build(self, batch) -> None:
        schema = Schema.of(batch)
        if task.auto(self.config) and task.settle_job(self, batch.labels) is STOPPED:    # what the label is
            return
        if label_units.regression(self.config["layers"]):    # "auto" units settled, numbers checked
            auto = label_units.auto(self.config["layers"]) and self.restore_from
            restoring = checkpoint.read_meta(self.restore_from)[1] if auto else None
            if self._until_store_answers("agree on the label units",
                                         lambda: label_units.settle(self, batch.labels, restoring)) is STOPPED:
                return
        if self.config.get("automl") is not None:      # candidates of a search (automl/)
            saved = checkpoint.read_meta(self.restore_from)[1].get("automl") if self.restore_from else None
            built = self._until_store_answers("declare the candidates' parameters",
                                              lambda: automl_attach.build(self, schema, saved))
            ahead = True
        else:
            built = self._build_model(schema)
            ahead = built is not STOPPED and self.graph.prepares_ahead
        if built is STOPPED:
            return
        self.trainer = built
        prepare = getattr(self.source, "prepare", None)
        if prepare is not None and self.graph_input is None and ahead:
            prepare.fn = self.trainer.prepare    # the parse thread works out each batch's ids ahead
            self.trainer.pace(prepare.pace)      # ... in turns the trainer's compiled loop gives
            self.trainer.ahead = lambda: prepare.ahead    # ... finding rows only when it has time to spare
            scoring.attach(self, prepare)        # ... and scores the batches trained meanwhile
        if self.restore_from:
            try:
                self._until_store_answers("restore the checkpoint", lambda: self.restore(self.restore_from))
            except CheckpointError:
                self.trainer = None          # nothing trained: no final checkpoint over the good ones
                raise

    def _build_model(self, schema):
        """The job's model: its graph, its parameters declared in the store; its Trainer (or STOPPED)."""
        self.graph = Graph.from_config(self.config["layers"], schema)
        found = model_problems(self.graph, self.config.get("graph"))
        if found:
            raise ConfigError(found)
        declared = self._until_store_answers(
            "declare the model's parameters",
            lambda: self.store.declare(self.graph.params, self.config["default_optimizer"]))
        if declared is STOPPED:
            return STOPPED
        numeric_only.say(self.graph.left_out, schema)
        log.info("model built: %d layers, %d parameters (%d tables) on fields %s; store %s",
                 len(self.graph.layers), len(self.graph.params), len(self.graph.table_params),
                 ",".join(schema.sparse) or "-", self.store.describe())
        return Trainer(self.graph, self.store, seed=self.config.get("seed", 0), graph_input=self.graph_input)

    def restore(self, where) -> dict:
        """Restore a checkpoint and seek the reader to its offsets (job_checkpoints.py)."""
        return job_checkpoints.restore(self, where)

    # ---- the loop --------------------------------------------------------------------------
    def run(self) -> dict:
        every = float(self.config.get("log", {}).get("every_seconds", 10.0))
        next_log = 0.0                      # a first progress line once the first batch is trained
        try:
            # a source that waits for data calls the idle hook in this thread (Source's contract)
            waits = getattr(self.source, "waits_for_data", False)
            batches = self._read_ahead(self.source.batches(idle=self._before_poll) if waits
                                       else self.source.batches())
            for batch, ahead in batches:
                self.received_at = time.time()      # freshness fallback when a batch has no event times
                if self.graph_input is not None:
                    batch = self.graph_input.clean(batch)
                if self.binary_labels:          # a task decided a click's: rows read before are checked
                    batch = task.keep_binary(batch, self.malformed)
                if not batch.size:      # every line was bad (counted): committed once those before are durable
                    self._applied(batch.offsets)
                    continue
                if self.trainer is None:
                    self._build(batch)
                    if self.trainer is None:        # asked to stop while the store was unreachable
                        break
                    if self.sought:      # read before the reader was sought back: it comes again
                        continue
                batch, complete = self._limit(batch)
                if batch is None:
                    break
                nxt = ahead() if complete and not self._reached_limit(batch.size) else None
                if nxt is not None:
                    self.trainer.prefetch(nxt)
                result = self._until_store_answers("step", lambda b=batch: self._step(b))
                if result is STOPPED:       # asked to stop while the store was unreachable
                    self.store_down = True
                    break
                if self.first_step is None:
                    self.first_step = (time.monotonic(), self.trainer.examples)
                if complete:
                    t0 = time.perf_counter()
                    self._applied(batch.offsets)
                    result.seconds["commit"] = time.perf_counter() - t0
                elif self.writes_back and self._flush() is STOPPED:    # a cut batch ends the run
                    self.store_down = True
                    break
                for hook in self.hooks:
                    hook(self, batch, result)
                job_checkpoints.maybe_write(self)
                if time.monotonic() >= next_log:
                    fields = self.progress()
                    log.info("%s", self.progress_line(fields), extra={"fields": fields})
                    next_log = time.monotonic() + every
                if self.stop_requested or not complete or self._reached_limit():
                    break
        finally:
            self.finish()
        self.final = self.summary()      # the figures of the summary and of the `done` line
        return self.final

    def _applied(self, offsets) -> None:
        """A batch's update was applied: the store holds its offsets until it has written it
        (``ParamStore.applied``); commit what is durable now."""
        due = self.store.applied(offsets)
        if (self._flush() if due else self._commit_durable()) is STOPPED:
            self.store_down = True
            self.stop_requested = True

    def _commit_durable(self):
        """Commit what the store made durable; a failed background flush is redone (``_flush``)."""
        try:
            self._commit(self.store.durable_offsets())
        except StoreError as err:
            if isinstance(err, StoreAccessError):
                raise
            self.store_failures += 1        # the store gave up on it: counted as a step would be
            log.error("background flush failed (nothing committed), flushing again: %s", err)
            return self._flush()
        return None

    def _flush(self):
        """Flush the store (retried like a step while it is down: the local changes stay), then commit
        every batch's offsets; ``STOPPED`` if asked to stop while it was unreachable (nothing committed)."""
        if self._until_store_answers("flush the store", self.store.flush) is STOPPED:
            return STOPPED
        return self._commit_durable()

    def _commit(self, durable) -> None:
        """Commit these durable batches' offsets in order, at once (one flush makes many durable)."""
        durable = list(durable)             # each batch's own dict (the Kafka source tracks them)
        self.source.commit_many(durable)
        for offsets in durable:
            committed(self.offsets, self.offset_epochs, offsets)

    def _before_poll(self, due_only: bool) -> None:
        """The idle hook of a source that waits for data (``Source.batches(idle=...)``), called in
        this thread while no batch is ready: flush what was trained (when due, or now before the
        stream ends or partitions are revoked) and commit it."""
        if self.store.undurable and self.trainer is not None and (not due_only or self.store.flush_due()) \
                and self._flush() is STOPPED:
            self.store_down = True

    def _read_ahead(self, batches):
        """(batch, ahead) pairs (readahead.py): reading ahead only into a store that prefetches,
        from a source that never waits for data, once the model is built."""
        eager = getattr(self.store, "prefetches", False) and not getattr(self.source, "waits_for_data", False)
        return readahead.pairs(batches, lambda: eager and self.graph is not None)

    def _step(self, batch):
        with self.step_lock:            # a server reading this job's store waits for a whole step
            return self.trainer.step(batch)

    def _until_store_answers(self, what: str, fn):
        """``fn()``, run again while the store is unreachable (outage.py); ``STOPPED`` if a stop came."""
        return outage.until_store_answers(self, what, fn, STORE_BACKOFF)

    def _reached_limit(self, coming: int = 0) -> bool:
        """The example limit is reached (or will be, after ``coming`` more; skipped ones count)."""
        return self.max_examples is not None and self.trainer is not None \
            and self.trainer.stepped + coming >= self.max_examples

    def _limit(self, batch):
        """Cut the batch at ``max_examples``; a cut batch is trained but its offsets not committed."""
        left = None if self.max_examples is None else self.max_examples - self.trainer.stepped
        if left is None or batch.size <= left:
            return batch, True
        return (batch.take(np.arange(left)), False) if left > 0 else (None, False)

    def finish(self) -> None:
        """Teardown: drain, final checkpoint when configured (not when stopped during a store
        outage: it could only fail; the previous one stays), then close reader and store."""
        try:
            if self.writes_back and self.trainer is not None and not self.store_down \
                    and self._flush() is STOPPED:       # drain: the rows, then their offsets
                self.store_down = True
            if self.trainer is not None and self.config.get("checkpoint", {}).get("dir") and not self.store_down:
                job_checkpoints.write_final(self)
            if self.store_down:
                log.warning("stopped while the store was unreachable: no final checkpoint (the previous one stays)")
        finally:
            try:
                if self.trainer is not None:     # its threads (an AutoML job's candidates)
                    self.trainer.close()
                self.source.close()
            finally:
                self.store.close()
                if self.graph_input is not None:
                    self.graph_input.close()

    def write_checkpoint(self):
        """Flush, commit what that made durable, write a checkpoint (job_checkpoints.py)."""
        return job_checkpoints.write(self)
