"""``streamtrain eval CONFIG --restore CKPT``: score a stream with a saved model, learning nothing
(Paddle's ``Evaluator.test``).

The checkpoint's parameters (and graph) are loaded into this process (``saved.py``); each batch
of the job's reader is predicted by an ``Evaluator`` (dropout off, no per-example learning, a
graph model's neighbourhoods sampled from the checkpoint's graph, whose edges the stream does
not grow) and scored by the loss kind's progressive tracker. Nothing is written: not the
checkpoint, not a store, not a Kafka offset. Bad records are counted as in ``run``; a batch
whose loss is not finite is counted (``nonfinite_batches``) and not scored. The summary has
the keys of ``run``'s (``report.py``).
"""
from __future__ import annotations

import logging
import time

import numpy as np

from . import report, saved, task
from .errors import ConfigError, ReaderError
from .evaluator import Evaluator
from .graph import Schema
from .graphstore.nodes import reader_config
from .progressive import tracker_class
from .store.memory import MemoryStore

log = logging.getLogger("streamtrain")


class Scored:
    """The counts ``report.py`` reads from a trainer, for an evaluation."""

    def __init__(self, loss_layer):
        self.progressive = tracker_class(loss_layer)()
        self.examples = self.batches = self.nonfinite = 0


class Evaluation(report.Reporting):
    def __init__(self, config: dict, restore: str, *, max_examples: int | None = None):
        from streamtrain import limit_blas_threads
        from streamtrain.readers import Malformed, open_reader

        limit_blas_threads()
        self.config, self.max_examples = config, max_examples
        self.saved = saved.read(restore)
        config = self.config = self.saved.as_trained(config)     # "auto" settings as trained
        self.binary_labels = config.get("task") == task.CLICK
        found = self.saved.problems(config)
        if found:                               # before the stream: one of bad lines only would hide them
            raise ConfigError(found)
        self.malformed = Malformed()
        self.graph_input = self.saved.graph_input(config, self.malformed)
        self.source = open_reader(reader_config(config["reader"], config.get("graph")), config["batch_size"],
                                  self.malformed)
        self.store = MemoryStore()               # the checkpoint's values once the model is built
        self.evaluator: Evaluator | None = None
        self.trainer: Scored | None = None
        self.started, self.first_step = time.monotonic(), None
        self.last_checkpoint, self.store_failures, self.drift = self.saved.path, 0, None
        self.stop_requested = self.checkpoint_requested = False     # set by daemon.Signals
        self.final: dict | None = None           # the summary, made once when the run ends

    def run(self) -> dict:
        every = float(self.config.get("log", {}).get("every_seconds", 10.0))
        next_log = time.monotonic() + every
        try:
            for batch in self.source.batches():
                if self.graph_input is not None:
                    batch = self.graph_input.clean(batch)      # bad graph input: counted, as in run
                if self.binary_labels:                         # task auto, decided a click's (task.py)
                    batch = task.keep_binary(batch, self.malformed)
                if not batch.size:
                    continue
                if self.trainer is None:
                    self._build(batch)
                if self.max_examples is not None:
                    batch = batch.take(np.arange(min(batch.size, self.max_examples - self.trainer.examples)))
                self._score(batch)
                if time.monotonic() >= next_log:
                    fields = self.progress()
                    log.info("%s", self.progress_line(fields), extra={"fields": fields})
                    next_log = time.monotonic() + every
                if self.stop_requested or (self.max_examples is not None
                                           and self.trainer.examples >= self.max_examples):
                    break
        finally:
            self.source.close()
        self.final = self.summary()        # the `done` line's figures too (report.progress)
        return self.final

    def _build(self, batch) -> None:
        graph, self.store = self.saved.build(self.config, self.saved.schema or Schema.of(batch))
        self.evaluator = Evaluator(graph, self.store, graph_input=self.graph_input)
        self.trainer = Scored(graph.loss)
        log.info("evaluating checkpoint %s (step %d): %d layers, %d parameters; nothing is learnt",
                 self.saved.path, self.saved.step, len(graph.layers), len(graph.params))

    def _score(self, batch) -> None:
        t = self.trainer
        predictions = self.evaluator.forward(batch)
        t.batches += 1
        t.examples += batch.size
        if self.first_step is None:
            self.first_step = (time.monotonic(), t.examples)
        if not np.isfinite(self.evaluator.ctx.loss):
            t.nonfinite += 1
            return
        t.progressive.update(batch.labels, predictions)

    def summary(self) -> dict:
        return {**super().summary(), "step": self.saved.step}


def run_eval(config: dict, args) -> int:
    """The ``eval`` command: log setup, SIGTERM/SIGINT stop after the current batch, the ``done``
    line and ``--summary`` as ``run`` writes them."""
    from .daemon import Signals
    from .logs import log_start, setup_logging

    logcfg = config.get("log", {})
    setup_logging(args.log_format or logcfg.get("format", "text"), args.log_level or logcfg.get("level", "INFO"))
    log_start(log, f"evaluating job {config.get('name', '')!r} with the checkpoint {args.restore}")
    report.check_summary_path(args.summary)
    evaluation = Evaluation(config, args.restore, max_examples=args.max_examples)
    signals = Signals(evaluation, notify=lambda _: None).install()
    try:
        summary = evaluation.run()
    finally:
        signals.restore()
    fields = evaluation.progress(whole_run=True)
    log.info("done: %s elapsed=%.3fs", evaluation.progress_line(fields) if fields else "nothing scored",
             fields.get("elapsed_s", 0.0), extra={"fields": fields})
    report.write_summary(args.summary, summary)
    _skipped(evaluation)
    return 0


def _skipped(evaluation: Evaluation) -> None:
    """Say which lines were skipped, and why; a stream whose every line was skipped scored
    nothing: a ``ReaderError`` (exit 1), and a file of no line at all a warning, as ``run`` says
    both ("nothing was trained")."""
    from streamtrain.readers.malformed import describe
    bad = evaluation.malformed.snapshot()
    total, why = sum(bad.values()), describe(bad)
    nothing = evaluation.trainer is None and not evaluation.stop_requested
    reader = evaluation.config.get("reader") or {}
    if not total:
        if nothing and reader.get("type") == "file" and evaluation.max_examples != 0:
            log.warning("nothing was scored: %s holds no example line (it is empty%s)", reader.get("path"),
                        ", or a header alone" if reader.get("format") == "csv" else "")
        return
    log.warning("%d lines skipped as malformed: %s", total, why)
    if nothing:
        raise ReaderError(f"nothing was scored: every one of the {total} lines of the stream was malformed: {why}")
