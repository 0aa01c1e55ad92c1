"""The training job: reader → batches → trainer → store, until the stream ends or a stop is asked.

The graph is built from the first batch's schema (the model file names no data columns).
Offsets of a batch are committed only after its update was applied to the store; with a store
that writes back (the redis store's ``write_back_s``) only after the flush that wrote it.
"""
from __future__ import annotations

import itertools
import logging
import shutil
import threading
import time
from pathlib import Path

import numpy as np

from . import checkpoint, report
from .backoff import STOPPED, Backoff
from .drift import DriftMonitor
from .graph import Graph, Schema
from .graphstore.nodes import reader_config
from .graphstore.stream import model_problems, open_graph_input
from .saved import schema_json
from .errors import CheckpointError, ConfigError, StoreAccessError, StoreError, StoreInterrupted
from .store import make_store
from .trainer import Trainer

log = logging.getLogger("streamtrain")
# after the store itself gave up (``store.retry.give_up_s``): pause 1, 2, 4 … 30 s, never give up
STORE_BACKOFF = Backoff(initial_s=1.0, max_s=30.0, give_up_s=None)


class Job:
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
        self.store.watch(lambda: self.stop_requested, self._store_waits)
        self.graph_input = open_graph_input(config.get("graph"), self.malformed,
                                            namespace=config.get("name") or "default")
        self.graph: Graph | None = None
        self.trainer: Trainer | None = None
        self.stop_requested = False
        self.sought = False      # restore() moved the reader back to a checkpoint's offsets
        self.started = time.monotonic()
        self.offsets: dict = {}
        self.held: list = []     # offsets of batches trained but not yet flushed (write-back store)
        self.flying: list = []   # ... of batches whose rows a background flush is writing
        self.writes_back = self.store.writes_back
        if self.writes_back:
            self.store.auto_flush = False       # the job flushes, then commits what was flushed
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
        self._ckpt_batches = 0
        self._ckpt_time = time.monotonic()

    @property
    def waiting_for_store(self) -> str | None:
        """What waits for an unreachable store now (the job's retry of a step, or the store's
        own retries of an operation), or None."""
        return self._waiting or self._store_waiting

    def _store_waits(self, what: str | None) -> None:
        self._store_waiting = what

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
        self.graph = Graph.from_config(self.config["layers"], schema)
        found = model_problems(self.graph, self.config.get("graph"))
        if found:
            raise ConfigError(found)
        declared = self._until_store_answers(
            "declare the model's parameters",
            lambda: self.store.declare(self.graph.params, self.config["default_optimizer"]))
        if declared is STOPPED:
            return
        self.trainer = Trainer(self.graph, self.store, seed=self.config.get("seed", 0),
                               graph_input=self.graph_input)
        prepare = getattr(self.source, "prepare", None)
        if prepare is not None and self.graph_input is None and self.graph.prepares_ahead:
            prepare.fn = self.trainer.prepare    # the parse thread works out each batch's ids ahead
        log.info("model built: %d layers, %d parameters (%d tables) on fields %s; store %s",
                 len(self.graph.layers), len(self.graph.params), len(self.graph.table_params),
                 ",".join(schema.sparse) or "-", self.store.describe())
        if self.graph.loss.opts.get("sequential"):
            learnt = [layer.name for layer in self.trainer.engine.layers]
            if learnt:
                log.info("per-example terms (sequential loss '%s'): %s",
                         self.graph.loss.name, ", ".join(learnt))
            else:
                log.warning("loss '%s' is sequential but no layer qualifies (a dim-1 embedding, bias, "
                            "linear fc or reduced fm reaching it through add/sum_pooling, trained by sgd, "
                            "adagrad or ftrl): every layer learns per batch", self.graph.loss.name)
        if self.restore_from:
            try:
                self._until_store_answers("restore the checkpoint", lambda: self.restore(self.restore_from))
            except CheckpointError:
                self.trainer = None          # nothing trained: no final checkpoint over the good ones
                raise

    def restore(self, where) -> dict:
        snap, meta = checkpoint.read(where)
        checkpoint.check_fits(snap, self.graph.params, checkpoint.resolve(where))
        self.store.restore(snap)
        if self.graph_input is not None and "graph" in meta["arrays"]:
            self.graph_input.store.restore(meta["arrays"]["graph"])
        self.trainer.batches = meta.get("step", 0)
        self.trainer.examples = self.restored_examples = meta.get("examples", 0)
        if meta.get("offsets") and hasattr(self.source, "seek") \
                and self.source.seek(meta["offsets"]) is not False:     # False: nothing to seek
            self.sought = True
        log.info("restored checkpoint %s (step %d)", checkpoint.resolve(where), meta.get("step", 0))
        return meta

    # ---- the loop --------------------------------------------------------------------------
    def run(self) -> dict:
        every = float(self.config.get("log", {}).get("every_seconds", 10.0))
        next_log = time.monotonic() + every
        try:
            # a source that waits for data calls the idle hook in this thread (Source's contract)
            waits = getattr(self.source, "waits_for_data", False)
            batches = self._read_ahead(self.source.batches(idle=self._before_poll) if waits
                                       else self.source.batches())
            for batch, ahead in batches:
                self.received_at = time.time()      # freshness fallback when a batch has no event times
                if self.graph_input is not None:
                    batch = self.graph_input.clean(batch)
                    if not batch.size:             # every row was bad graph input (counted)
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
                result = self._until_store_answers("step", lambda: self._step(batch))
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
                self._maybe_checkpoint()
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
        """A batch's update was applied: commit its offsets, or, with a write-back store, hold
        them until the flush that writes its rows (made here when due)."""
        if not self.writes_back:
            self.source.commit(offsets)
            self.offsets.update(offsets)
            return
        self.held.append(offsets)
        if self.store.flushes_in_background:
            if self._background_flush() is not STOPPED:
                return
        elif not self.store.flush_due() or self._flush() is not STOPPED:
            return
        self.store_down = True
        self.stop_requested = True

    def _background_flush(self):
        """A flush that runs while training goes on: commit the offsets of the batches it wrote
        once it is done; start the next one when due. A failed one is redone in the foreground
        (``_flush``: retried while the store is down)."""
        try:
            done = self.store.flush_poll()
        except StoreError as err:
            if isinstance(err, StoreAccessError):
                raise
            self.store_failures += 1        # the store gave up on it: counted as a step would be
            log.error("background flush failed (nothing committed), flushing again: %s", err)
            self.held[:0], self.flying = self.flying, []
            return self._flush()
        if done is not None:
            flying, self.flying = self.flying, []
            self._commit(flying)
        if not self.flying and self.store.flush_due() and self.store.flush_begin():
            self.flying, self.held = self.held, []
        return None

    def _flush(self):
        """Flush the write-back store (retried like a step while the store is down: the local
        changes stay), then commit the offsets of every batch it wrote. ``STOPPED`` if asked to
        stop while the store was unreachable (nothing committed)."""
        if self._until_store_answers("flush the store", self.store.flush) is STOPPED:
            return STOPPED
        held, self.flying, self.held = self.flying + self.held, [], []
        self._commit(held)
        return None

    def _commit(self, held: list) -> None:
        """Commit the offsets of these flushed batches, in order."""
        newest = dict(self.offsets)
        for offsets in held:                # each batch's own dict (the Kafka source tracks them), in order
            for key, off in offsets.items():
                # a batch's other partitions carry their last *committed* position (Kafka's
                # _with_owned), older than batches trained since: a commit never goes back
                newest[key] = offsets[key] = max(off, newest.get(key, off))
            self.source.commit(offsets)
            self.offsets.update(offsets)
        return None

    def _before_poll(self, due_only: bool) -> None:
        """The idle hook of a source that waits for data (``Source.batches(idle=...)``), called in
        this thread while no batch is ready: flush what was trained (when due, or now before the
        stream ends or partitions are revoked) and commit it."""
        if (self.held or self.flying) and self.trainer is not None and (not due_only or self.store.flush_due()) \
                and self._flush() is STOPPED:
            self.store_down = True

    def _read_ahead(self, batches):
        """(batch, ahead) pairs: ``ahead()`` reads the next batch now, so that a store that reads
        ahead (``store.prefetches``: redis) fetches its rows while this batch trains. Only for
        sources that never wait for data (not Kafka: a quiet topic would hold this batch back);
        else ``ahead()`` is None. Offsets are untouched: a batch read ahead but not trained
        (stop, limit) is not committed."""
        it = iter(batches)
        waits = getattr(self.source, "waits_for_data", False)     # Kafka: may wait for data
        eager = getattr(self.store, "prefetches", False) and not waits
        pending = []

        def ahead():
            if eager and self.graph is not None and not pending:
                pending.extend(itertools.islice(it, 1))
            return pending[0] if pending else None

        while True:
            batch = pending.pop() if pending else next(it, None)
            if batch is None:
                return
            yield batch, ahead

    def _step(self, batch):
        with self.step_lock:            # a server reading this job's store waits for a whole step
            return self.trainer.step(batch)

    def _until_store_answers(self, what: str, fn):
        """``fn()``; when the store gives up (it already retried for ``retry.give_up_s``), log it
        and run ``fn`` again after a pause (``STORE_BACKOFF``), without committing anything: the
        daemon outlives a long outage, at start-up (declare) as mid-run (step), instead of
        crashing. A refusal (``StoreAccessError``: wrong password…) is raised at once. ``STOPPED``
        if a stop was asked meanwhile."""
        def failed(err, attempt, pause):
            self.store_failures += 1
            self._waiting = what
            log.error("%s failed (nothing applied, no offset committed); retrying in %.0f s: %s",
                      what, pause, err)
        try:
            return STORE_BACKOFF.retry(
                fn, transient=lambda err: isinstance(err, StoreError) and not isinstance(
                    err, (StoreAccessError, StoreInterrupted)),
                on_retry=failed, stopped=lambda: self.stop_requested,
                on_recovered=lambda n: log.warning("%s succeeded after %d failures", what, n))
        except StoreInterrupted as err:         # the store's own retries ended by the stop
            log.warning("%s: %s", what, err)
            return STOPPED
        finally:
            self._waiting = None

    def _reached_limit(self, coming: int = 0) -> bool:
        """The example limit is reached (or will be, after ``coming`` more examples; skipped
        non-finite ones count: they were read)."""
        return self.max_examples is not None and self.trainer is not None \
            and self.trainer.stepped + coming >= self.max_examples

    def _limit(self, batch):
        """Cut the batch at ``max_examples``; a cut batch is trained but its offsets not committed."""
        if self.max_examples is None:
            return batch, True
        left = self.max_examples - self.trainer.stepped
        if left <= 0:
            return None, False
        if batch.size <= left:
            return batch, True
        return batch.take(np.arange(left)), False

    def finish(self) -> None:
        """Teardown: final checkpoint when configured (not when stopped during a store outage: it
        could only fail after the store's retries; the previous one stays), then close reader and
        store. A final checkpoint that fails (disk full, read-only) is logged and kept in
        ``checkpoint_error`` (``streamtrain run`` exits 3); the previous one stays."""
        try:
            if self.writes_back and self.trainer is not None and not self.store_down \
                    and self._flush() is STOPPED:       # drain: the rows, then their offsets
                self.store_down = True
            if self.trainer is not None and self.config.get("checkpoint", {}).get("dir") and not self.store_down:
                self._final_checkpoint()
            if self.store_down:
                log.warning("stopped while the store was unreachable: no final checkpoint (the previous one stays)")
        finally:
            try:
                self.source.close()
            finally:
                self.store.close()
                if self.graph_input is not None:
                    self.graph_input.close()

    def _final_checkpoint(self) -> None:
        try:
            self.write_checkpoint()
        except StoreInterrupted:
            self.store_down = True
        except (OSError, StoreError) as err:
            self.checkpoint_error = f"{type(err).__name__}: {err}"
            try:
                kept = checkpoint.resolve(self.config["checkpoint"]["dir"])
            except (OSError, CheckpointError):
                kept = "none"
            log.error("final checkpoint failed: %s; the newest checkpoint stays %s (exit code 3)",
                      self.checkpoint_error, kept)

    def _maybe_checkpoint(self) -> None:
        """Periodic checkpoints (every N batches / N seconds) and SIGHUP's; a failure is logged
        and counted, the previous checkpoint stays, and training goes on."""
        cfg = self.config.get("checkpoint", {})
        self._ckpt_batches += 1
        every_b, every_s = cfg.get("every_batches") or 0, cfg.get("every_seconds") or 0
        due = (self.checkpoint_requested or (every_b and self._ckpt_batches >= every_b)
               or (every_s and time.monotonic() - self._ckpt_time >= every_s))
        if not due or not cfg.get("dir"):
            self.checkpoint_requested = False
            return
        try:
            self.write_checkpoint()
        except OSError as err:
            log.error("checkpoint failed, keeping the previous one: %s", err)

    def write_checkpoint(self):
        cfg = self.config["checkpoint"]
        self.checkpoint_requested = False
        if self.last_checkpoint is None:            # a kill -9 mid-write leaves a temp dir behind
            for stale in Path(cfg["dir"]).glob(".ckpt-*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
        self._ckpt_batches, self._ckpt_time = 0, time.monotonic()
        if self.writes_back and self._flush() is STOPPED:   # the snapshot sees every update
            raise OSError("stopped while the store was unreachable: checkpoint not written")
        try:
            path = checkpoint.write(cfg["dir"], self.store.snapshot(), step=self.trainer.batches,
                                    examples=self.trainer.examples, offsets=self.offsets,
                                    keep=cfg.get("keep") or None, extra={"schema": schema_json(self.graph.schema)},
                                    more_arrays=self._graph_state())
        except BaseException:
            for hook in self.checkpoint_hooks:
                hook(self, None, False)
            raise
        self.last_checkpoint = str(path)
        log.info("checkpoint written: %s", path)
        for hook in self.checkpoint_hooks:
            hook(self, path, True)
        return path

    def _graph_state(self) -> dict | None:
        """The graph store's arrays for a checkpoint (None without a graph section)."""
        return {"graph": self.graph_input.store.snapshot()} if self.graph_input is not None else None

    # ---- reporting (report.py) ---------------------------------------------------------------
    def progress(self, whole_run: bool = False) -> dict:
        return report.progress(self, whole_run)

    def progress_line(self, fields: dict | None = None) -> str:
        names = self.trainer.progressive.names if self.trainer is not None else ()
        return report.progress_line(fields if fields is not None else self.progress(), names)

    def summary(self) -> dict:
        return report.summary(self)
