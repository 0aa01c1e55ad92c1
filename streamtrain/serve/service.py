"""What a prediction server does, apart from HTTP: build the model, read a request, predict.

Two sources of a model:

* ``StoreModel`` (``streamtrain serve``): the job config's layers on the fields given by
  ``serve.schema``, else on the fields the trainers published (``serve/publish.py``); the
  parameters read from the Redis store through the staleness-bounded cache. Built at the first
  request that can (a 503 until a trainer has published).
* ``JobModel`` (``streamtrain run`` with ``serve.enabled``): the job's own graph and store,
  read between steps; ready once the first batch has built the graph.

A graph model's request is sampled first (``sample``): the record's neighbourhood read from
the graph the trainer writes (``run``: its own graph store, between two steps; ``serve``: the
Redis graph store), with the job's fanouts, never inserting the record's own edge. A third
source, ``serve/saved.py``, answers from a checkpoint (``serve --restore``).

Each request has its own activations (a ``graph.context`` taken from a free list, whichever
thread answers it); graph and cache are shared. ``predict(..., may_read=False)`` answers only
what needs no waiting (the event loop's fast path) and raises ``MustWait`` otherwise.
"""
from __future__ import annotations

import functools
import logging
import threading
import time

import numpy as np

from streamtrain import __version__, label_units, layers_diff, task
from streamtrain.automl import attach as automl_attach
from streamtrain.errors import ConfigError, GraphInputError, StoreError
from streamtrain.graph import Graph, Schema
from streamtrain.reader_format import reader_reading, recorded, stream_format
from streamtrain.readers import make_parser
from streamtrain.store import make_store

from .cache import REFRESH_EVERY, CachedParams, LiveParams, MustWait, Refresher
from .inputs import BadRequest, decode_json, lines_batch, records_batch
from .publish import layers_digest, published_feed, published_schema, published_step, read_published
from .replica import Replica
from .serving_store import serving_graph_input, serving_store_config

log = logging.getLogger("streamtrain.serve")


class NotReady(RuntimeError):
    """503: the model cannot answer yet (no fields known, no batch trained)."""

    kind = "not_ready"


class NonFinite(NotReady):
    """503: the model's output for a request is NaN or infinite (never answered as ``null``)."""

    kind = "nonfinite"


class JobModel:
    def __init__(self, job, give_up_s: float = 2.0):
        self.job, self.params = job, LiveParams(job, give_up_s)

    def sample(self, batch, may_read: bool = True) -> None:
        """A graph model's blocks from the job's own graph store, read while no step runs."""
        graph_input = self.job.graph_input
        if graph_input is None:
            return
        if not may_read and graph_input.store.kind != "memory":    # a Redis graph: not on the event loop
            raise MustWait
        lock = self.job.step_lock
        if not lock.acquire(blocking=may_read):
            raise MustWait
        try:
            graph_input.sample(batch)
        finally:
            lock.release()

    def graph(self, may_read: bool = True) -> Graph:
        if self.job.graph is None:
            raise NotReady("the trainer has not built its model yet (no batch trained)")
        return self.job.graph

    def step(self, may_read: bool = True) -> int:
        return self.job.trainer.batches if self.job.trainer is not None else 0

    def store_name(self) -> str:
        return self.job.store.describe()

    def automl(self) -> dict | None:
        """The AutoML search whose served candidate (the leader) answers (None without one)."""
        return automl_attach.describe(self.job)

    def hit_counts(self):
        return 0, 0

    def close(self) -> None:
        pass


class StoreModel:
    def __init__(self, config: dict, settings: dict, store=None):
        self.config, self.settings = config, settings
        self.own_store = store is None
        self.store = store if store is not None else make_store(serving_store_config(config, settings))
        self.refresh_store = None           # the background refresher's own client (see cache.py)
        self._graph: Graph | None = None
        self.params: CachedParams | None = None
        self._lock = threading.Lock()
        self._step, self._step_at = 0, -np.inf
        self.digest = layers_digest(config["layers"])
        self.published_digest = None
        self.reading: dict = {}          # the trainers' reader's (reader_format.recorded), once published
        self.refresher: Refresher | None = None
        self.replica: Replica | None = None
        self.replicator: Refresher | None = None
        self.built: list = []                # called once the model is built, and after each copy of
                                             # the replica (serve/run.py: gc.freeze)
        self.graph_input = serving_graph_input(config, settings)

    def _settle(self) -> None:
        """The config takes the task the trainers decided on this store and the label units they
        settled ("auto")."""
        if task.auto(self.config):
            decided = task.agreed(self.store)
            if decided is None:
                raise NotReady("no trainer has decided the task (\"auto\") on this store yet")
            self.config = task.decided(self.config, decided)
        if label_units.auto(self.config["layers"]):
            units = label_units.agreed(self.store)
            if units is None:
                raise NotReady("no trainer has settled the label units (\"auto\") on this store yet")
            self.config = label_units.with_units(self.config, units)
            self.digest = layers_digest(self.config["layers"])

    def sample(self, batch, may_read: bool = True) -> None:
        """A graph model's blocks from the Redis graph store: a read, so never on the event loop."""
        if self.graph_input is None:
            return
        if not may_read:
            raise MustWait
        self.graph_input.sample(batch)

    def graph(self, may_read: bool = True) -> Graph:
        if self._graph is not None:
            return self._graph
        if not may_read:
            raise MustWait
        with self._lock:
            if self._graph is None:
                self._settle()
                schema = self.settings.get("schema")
                if schema is not None:
                    schema = Schema(tuple(schema.get("sparse", ())), tuple(schema.get("dense", ())))
                else:
                    docs = read_published(self.store)
                    schema = published_schema(docs)
                    if schema is None:
                        raise NotReady("no trainer has published the model's fields yet "
                                       "(start one on this store, or set serve.schema)")
                    self.published_digest = docs[0].get("layers")
                    self.reading = recorded(docs[0])     # how a JSON record's numbers and strings are read
                    if self.published_digest != self.digest:
                        said = layers_diff.say(docs[0].get("layer_configs"), self.config["layers"], "theirs") \
                            or f"digest {self.published_digest}, this config's {self.digest}"
                        log.warning("the trainers publishing to this store train other layers (%s): predictions "
                                    "will not match theirs", said)
                graph = Graph.from_config(self.config["layers"], schema)
                self.store.declare(graph.params, self.config["default_optimizer"])
                max_age, window = self.settings["max_staleness_s"], self.settings["refresh_window_s"]
                background = max_age > 0 and window > 0
                if background and self.refresh_store is None and self.own_store:
                    self.refresh_store = make_store(serving_store_config(self.config, self.settings))
                    self.refresh_store.declare(graph.params, self.config["default_optimizer"])
                self.params = CachedParams(self.store, max_age, refresh_window_s=window,
                                           refresh_store=self.refresh_store)
                if background and self.settings["replica"] and self.own_store:
                    replica_store = make_store(serving_store_config(self.config, self.settings))
                    replica_store.declare(graph.params, self.config["default_optimizer"])
                    self.replica = self.params.replica = Replica(replica_store, self.settings["replica_max_rows"])
                    self.replica.copied += self.built
                self._read_step(self.store, self.params.io_lock)
                self._graph = graph
                if background:
                    self.refresher = Refresher(self._refresh, max_age * REFRESH_EVERY)
                if self.replica is not None:
                    self.replicator = Refresher(self.replica.sync, max_age * REFRESH_EVERY, name="serve-replica")
                for hook in self.built:
                    hook()
        return self._graph

    def _refresh(self) -> None:
        self.params.refresh()
        self._read_step(self.refresh_store or self.store, self.params.refresh_lock
                        if self.refresh_store is not None else self.params.io_lock)

    def step(self, may_read: bool = True) -> int:
        """The trainers' step, re-read on the staleness bound (a store outage keeps the last);
        with a background refresher, by it only."""
        if may_read and self.refresher is None:
            self._read_step(self.store, self.params.io_lock if self.params is not None else self._lock)
        return self._step

    def _read_step(self, store, lock) -> None:
        now = time.monotonic()
        if now - self._step_at > self.settings["max_staleness_s"]:
            self._step_at = now
            try:
                with lock:
                    docs = read_published(store)
                self._step = published_step(docs)
                if self.replica is not None:
                    self.replica.set_feed(published_feed(docs))
            except StoreError:
                pass

    def store_name(self) -> str:
        return self.store.describe()

    def hit_counts(self):
        return (self.params.hits, self.params.misses) if self.params else (0, 0)

    def close(self) -> None:
        if self.replicator is not None:
            self.replicator.stop()
        if self.replica is not None:
            self.replica.store.close()
        if self.refresher is not None:
            self.refresher.stop()
        if self.refresh_store is not None:
            self.refresh_store.close()
        if self.graph_input is not None:
            self.graph_input.close()
        self.store.close()


class Service:
    """Predictions and descriptions, called from the HTTP layer's worker threads."""

    def __init__(self, source, settings: dict, reader_cfg: dict):
        self.source, self.settings = source, settings
        self.reader_cfg = reader_cfg or {}
        self._free: list = []           # (graph, context) pairs no request is using

    def _context(self, graph):
        while self._free:
            try:
                owner, ctx = self._free.pop()
            except IndexError:          # another thread took the last one
                break
            if owner is graph:
                return ctx
        return graph.context(training=False)

    def batch(self, body: bytes, content_type: str, schema: Schema):
        limit = self.settings["max_records"]
        if content_type.startswith("text/plain"):
            fmt, options = self.stream
            if fmt is None:
                raise BadRequest("Content-Type", f"text/plain needs a stream format, and a "
                                                 f"{self.reader_cfg.get('type')!r} reader has none: "
                                                 "send application/json records")
            return lines_batch(body, fmt, options, schema, limit)
        # hashed as the reader hashes (a csv reader's hash_as: a graph's shared ids), numbers
        # transformed as it transforms them
        return records_batch(decode_json(body), schema, limit, self.hash_as, self.numeric_transform, self.separators,
                             self.numbers_as_text)

    @functools.cached_property
    def stream(self) -> tuple[str | None, dict]:
        """The job's line format and its options (``stream_format``), worked out once, not per request."""
        return stream_format(self.reader_cfg)

    @property
    def separators(self) -> dict:
        """The trainer's csv reader's ``multivalue`` ``{column: separator}``: a record's string in
        such a column is split as the reader split the column (``"a|b"``: two ids)."""
        return self._as_trained("separators")

    @property
    def hash_as(self) -> dict:
        """The trainer's csv reader's ``hash_as`` ``{column: other}`` (a graph's shared ids
        applied): a record's value in such a column gets the ids ``other``'s values have."""
        return self._as_trained("hash_as")

    @property
    def numeric_transform(self) -> str:
        """What the trainer's reader did to a number (``log1p`` for csv, criteo and jsonl unless
        their ``numeric_transform`` is ``none``; plug-in records: nothing): a JSON record's
        numbers get the same, so the model sees them as it was trained on them."""
        return self._as_trained("numeric_transform")

    def _as_trained(self, key: str):
        """How the trainers' reader made features (``reader_format.READING``), as the checkpoint
        or the trainers on the store record it, else as this config's reader does."""
        trained = getattr(self.source, "reading", {}).get(key)
        return trained if trained is not None else self._own_reading[key]

    @functools.cached_property
    def _own_reading(self) -> dict:
        return reader_reading(self.reader_cfg)

    @functools.cached_property
    def numbers_as_text(self) -> bool:
        """Whether the job's reader takes a number written as text or a boolean (jsonl, plug-in
        records): a record's numeric field may be written so too."""
        return self.stream[0] == "jsonl" or self.reader_cfg.get("type") == "plugin"

    def predict(self, body: bytes, content_type: str, may_read: bool = True) -> dict:
        """The answer to one request; ``may_read=False``: ``MustWait`` instead of waiting for
        the store (or a trainer's step), with ``resume``, the rest of the work (the body already
        read), when it got that far."""
        graph = self.source.graph(may_read)
        where = self._line_name if content_type.startswith("text/plain") else _record_name
        return self._answer(graph, self.batch(body, content_type, graph.schema), may_read, where)

    def _line_name(self, row: int, field: str) -> str:
        fmt, options = self.stream
        return f"line {row + 1 + int(make_parser(fmt, options).needs_header)}"

    def _answer(self, graph, batch, may_read: bool, where=None) -> dict:
        ctx = self._context(graph)
        try:
            try:
                self.source.sample(batch, may_read)   # a graph model's neighbourhoods
            except GraphInputError as err:
                raise BadRequest((where or _record_name)(err.row, err.field), err.message) from None
            graph.feed(ctx, batch)
            dense, tables = graph.needs(ctx)
            ctx.values, fetched = self.source.params.pull(dense, tables, may_read)
            graph.forward(ctx)
            age = max(0.0, time.monotonic() - fetched)
            preds = np.asarray(ctx.predictions, np.float64)
            _check_finite(preds, where or _record_name)
        except MustWait as wait:
            wait.resume = functools.partial(self._answer, graph, batch, True, where)
            raise
        finally:
            self._free.append((graph, ctx))
        return {"predictions": preds.round(7).tolist(), "step": self.source.step(may_read),
                "max_param_age_s": round(age, 4)}

    def describe(self) -> dict:
        graph = self.source.graph()
        return {
            "version": __version__,
            "layers": [{"name": layer.name, "type": layer.kind, "inputs": list(layer.inputs)}
                       for layer in graph.order],
            "parameters": {name: {"table": spec.table, "dim" if spec.table else "shape":
                                  spec.dim if spec.table else list(spec.shape)}
                           for name, spec in graph.params.items()},
            "fields": {"sparse": list(graph.schema.sparse), "dense": list(graph.schema.dense)},
            "loss": graph.loss.kind,
            "step": self.source.step(),
            "store": self.source.store_name(),
            "max_staleness_s": self.settings["max_staleness_s"],
            **({"replica": replica.stats()} if (replica := getattr(self.source, "replica", None)) else {}),
            **({"automl": search} if (search := getattr(self.source, "automl", lambda: None)()) else {}),
        }

    def ready(self) -> tuple[bool, str]:
        try:
            self.source.graph()
        except (NotReady, StoreError, ConfigError) as err:
            return False, str(err)
        store = getattr(self.source, "store", None)
        if store is not None and not store.ready():
            return False, "parameter store not reachable"
        return True, "ok"


def _check_finite(preds: np.ndarray, name) -> None:
    """``NonFinite`` naming the records (``name(row, "")``) whose prediction is NaN or infinite."""
    bad = np.flatnonzero(~np.isfinite(preds.reshape(len(preds), -1)).all(axis=1))
    if len(bad):
        where = ", ".join(name(int(i), "").rstrip(".") for i in bad[:5]) + \
            (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise NonFinite(f"the model's output for {where} is not finite (NaN or infinite): "
                        f"the parameters it used are not, or the input overflows the model")


def _record_name(row: int, field: str) -> str:
    return f"records[{row}].{field}"
