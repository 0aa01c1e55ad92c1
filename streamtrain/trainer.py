"""One training step (docs/design.md, "The step"): feed, pull, forward, backward, push, update.

Predictions are made before the batch updates the parameters (progressive validation).
A batch whose loss or gradient is not finite is skipped: nothing is pushed, it is counted
(``nonfinite``, ``skipped_examples``), not among the batches and examples trained, and said
(``_say_skipped``). So is one whose gradients, squares or final rows the store could not keep
(``limit``): a value of 1e30 read as written gives finite float64 rows whose float32 copies,
or whose squares in an accumulator, are infinite; stored, they would stop every later batch.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from .graph import Graph
from .progressive import tracker_class
from .store.base import ParamStore

log = logging.getLogger("streamtrain")
#: per store precision, the magnitude a gradient, a square or a row must stay below: its square
#: is finite there too (Adagrad, FTRL and Adam accumulate squared gradients)
LIMIT = {np.dtype(np.float32): 2.0 ** 64, np.dtype(np.float64): 2.0 ** 512}
SAY_EVERY_S = 60.0


@dataclass
class StepResult:
    loss: float
    predictions: np.ndarray
    applied: bool                  # False: skipped (non-finite); its offsets may still be committed
    reason: str = ""
    seconds: dict = field(default_factory=dict)
    losses: np.ndarray | None = None   # each example's progressive loss (the drift monitor's); None: unscored


class Trainer:
    """Drives the graph's phases for one batch against a parameter store."""

    def __init__(self, graph: Graph, store: ParamStore, *, barrier=None, seed: int = 0,
                 dtype=np.float32, graph_input=None):
        self.graph = graph
        self.store = store
        self.graph_input = graph_input     # samples blocks before a step, adds its edges after
        # sync mode: callable(store) after the push; a store that stages pushes (the redis store
        # in sync mode) brings its own as ``store.barrier``
        self.barrier = barrier if barrier is not None else getattr(store, "barrier", None)
        self.ctx = graph.context(training=True, dtype=dtype, seed=seed)
        self.ctx.optimizers = store.optimizers
        self.engine = self._engine(graph, store)
        self.ctx.engine = self.engine if self.engine is not None and self.engine.layers else None
        # a store that lends its arrays (memory) to an engine that hands back final rows
        self._lends = self.ctx.engine is not None and self.engine.assign and getattr(store, "lends", False)
        self.progressive = tracker_class(graph.loss)()   # figures of the loss's kind (progressive.py)
        self.scorer = None        # a job's ``scoring.Scorer``: it updates ``progressive`` (in the parse thread)
        # ``prepare`` has the store find the batch's rows too (index_ahead) when this says the
        # reader's thread is ahead of the trainer (the job's: ``compose.Prepare.ahead``)
        self.ahead = lambda: True
        self.rows_ahead = True             # ... and whether it may (an AutoML candidate's may not)
        self.batches = 0                   # batches (and examples) whose update was applied
        self.examples = 0
        self.nonfinite = 0                 # batches (and examples) skipped: a loss or gradient not finite
        self.skipped_examples = 0
        self.limit = LIMIT.get(np.dtype(getattr(store, "dtype", dtype)), np.inf)
        self._said = (0, 0.0)              # skipped batches already said, and when
        self.say_skipped = True            # (an AutoML candidate's are said by the search: retired)
        self.binary = graph.loss.quality == "binary"
        self._ahead_ctx = None     # a context to find the next batch's rows in (read-ahead stores)
        self._ahead = None         # (dense, tables) the store reads while the next step computes

    @property
    def hits(self) -> int:
        """Multi-class losses: progressive top-1 hits (0 for other losses)."""
        return getattr(self.progressive, "hits", 0)

    @staticmethod
    def _engine(graph, store):
        """The per-example engine of a ``sequential`` loss (numba is imported only then)."""
        loss = graph.loss
        if not loss.opts.get("sequential"):
            return None
        from .online.engine import PerExample
        engine = PerExample(graph, store.optimizers, implicit=loss.opts.get("implicit", False), normalize=loss.opts["normalize"],
                            assign=getattr(store, "assigns", False), squared=loss.kind == "mse")
        if engine.layers:
            log.info("per-example terms (sequential loss '%s'): %s", loss.name,
                     ", ".join(layer.name for layer in engine.layers))
        else:
            log.warning("loss '%s' is sequential but no layer qualifies (an embedding, bias or linear fc with "
                        "one output per logit of the loss, or a reduced fm under a loss of one logit, reaching "
                        "it through add/sum_pooling, trained by sgd, adagrad or ftrl): every layer learns per "
                        "batch", loss.name)
        return engine

    def step(self, batch) -> StepResult:
        g, ctx, t = self.graph, self.ctx, {}
        clock = time.perf_counter
        if self.graph_input is not None:
            self.graph_input.attach(batch)
        tf = clock()
        g.feed(ctx, batch)
        t0 = clock()
        t["feed"] = t0 - tf            # unique ids per table, each layer's positions among them
        dense, tables = g.needs(ctx)
        if self._lends:        # the engine gathers its rows from the store's arrays itself
            ctx.values, ctx.lent = self.store.lend(dense, tables, ctx.engine.params)
        else:
            ctx.values = self.store.pull(dense, tables)
            if ctx.engine is not None:
                ctx.states = self.store.pull_states(ctx.engine.params)
        if self._ahead is not None:            # the next batch's rows, read while this one computes
            self.store.prefetch(*self._ahead)
            self._ahead = None
        t1 = clock()
        g.forward(ctx)
        t2 = clock()
        predictions = ctx.predictions
        t.update(pull=t1 - t0, forward=t2 - t1)
        if not np.isfinite(ctx.loss):
            return self._skip(batch, predictions, "loss", t)
        losses = None
        if predictions is not None:       # scored here, or handed to the job's scorer (scoring.py)
            if self.scorer is not None:
                self.scorer.submit(batch.labels, predictions)
            else:
                losses = self.progressive.update(batch.labels, predictions)
        g.backward(ctx)
        assigned = ctx.engine.push(ctx) if ctx.engine is not None else {}
        grads = g.gradients(ctx)
        grads.assigned = assigned
        t3 = clock()
        t["backward"] = t3 - t2
        if not grads.all_finite(self.limit):
            return self._skip(batch, predictions, "gradient", t)
        self.store.push(grads)
        t4 = clock()
        t["push"] = t4 - t3
        if self.barrier is not None:
            self.barrier(self.store)
        g.update(ctx)
        t["update"] = clock() - t4
        if self.graph_input is not None:
            self.graph_input.learnt(batch)
        self.batches += 1
        self.examples += batch.size
        return StepResult(ctx.loss, predictions, True, seconds=t, losses=losses)

    @property
    def stepped(self) -> int:
        """Examples stepped: trained, or skipped for a loss or gradient not finite."""
        return self.examples + self.skipped_examples

    def prepare(self, batch) -> None:
        """Each batch's work that depends on the batch alone, done ahead (the file reader's parse
        thread calls it) and kept on the batch for its step: ``Graph.prepare`` and, while that
        thread is ahead of the trainer (``ahead``), the per-example engine's occurrence grids
        (``PerExample.prepare``) and the memory store's rows of the ids (``index_ahead``)."""
        ctx = self.graph.prepare(batch)
        if not self.ahead():          # the reader's thread is the busier: the step does the rest
            return
        if self.ctx.engine is not None:
            self.ctx.engine.prepare(ctx)
        index_ahead = getattr(self.store, "index_ahead", None)    # the memory store: the ids' rows too
        if index_ahead is not None and self.rows_ahead:
            index_ahead(ctx.table_ids)

    def pace(self, turn) -> None:
        """Let the reader's thread work while each step's compiled per-example loop runs (it
        holds no GIL): ``turn()`` gives the function to call as the loop starts
        (``compose.Prepare.pace``). A model without a per-example engine is not paced."""
        if self.ctx.engine is not None:
            self.ctx.engine.before_loop = turn()

    def prefetch(self, next_batch) -> None:
        """Let the next ``step`` start reading ``next_batch``'s rows once its own are pulled (a
        store with ``prefetches``; others ignore it). The rows are found in a context of their
        own, so the current batch's is untouched. A graph model reads none ahead: the next
        batch's neighbourhoods are sampled only after this batch's edges entered the graph."""
        if not self.store.prefetches or self.graph_input is not None:
            return
        if self.graph.prepares_ahead:            # kept on the batch: its own step feeds from it
            if next_batch.prepared.of(self.graph) is None:
                self.prepare(next_batch)
            self._ahead = (list(self.graph.dense_params), dict(next_batch.prepared.of(self.graph).table_ids))
            return
        if self._ahead_ctx is None:
            self._ahead_ctx = self.graph.context(training=True, dtype=self.ctx.dtype)
        self.graph.feed(self._ahead_ctx, next_batch)
        dense, tables = self.graph.needs(self._ahead_ctx)
        self._ahead = (list(dense), dict(tables))

    def close(self) -> None:
        """Nothing to end (``AutoTrainer.close`` ends its candidates' threads)."""

    def _skip(self, batch, predictions, reason, t) -> StepResult:
        if self.graph_input is not None:
            self.graph_input.learnt(batch)
        self.nonfinite += 1
        self.skipped_examples += batch.size
        if self.say_skipped:
            self._say_skipped(batch, reason)
        return StepResult(float("nan"), predictions, False, reason=f"non-finite {reason}", seconds=t)

    def _say_skipped(self, batch, reason: str) -> None:
        """A WARNING at the first skipped batch, then at most every ``SAY_EVERY_S`` seconds with
        how many since, naming the largest numeric input of the batch when it is large (the
        usual cause: a number read as written, far beyond what the weights were learnt on)."""
        said, at = self._said
        now = time.monotonic()
        if said and now - at < SAY_EVERY_S:
            return
        self._said = (self.nonfinite, now)
        cause = ""
        dense = np.abs(batch.dense) if batch.dense.size else None
        if dense is not None and dense.max() > 1e6:
            col = int(dense.max(axis=0).argmax())
            cause = (f"; its numeric inputs reach {float(dense.max()):.3g} (column '{batch.dense_names[col]}'): "
                     f"read such columns through reader.numeric_transform log1p, or scale them")
        log.warning("%d batch(es), %d examples in all, skipped so far: a non-finite or too large %s (the parameters "
                    "are untouched)%s", self.nonfinite - said, self.skipped_examples, reason, cause)
