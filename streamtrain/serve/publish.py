"""Trainers tell servers what they train: the model's fields and their step, in the store.

A model file names no data columns (the graph is built on the fields of the first batch), so
a server that reads the parameters from Redis learns the fields from the trainers: each trainer
writes ``{"sparse", "dense", "layers", "batches", "examples", "time", "feed_s",
"numeric_transform", "separators"}`` into the hash
``st:{<ns>/meta}:serving`` under its own ``host:pid`` at most once a second. A server sums the
``batches`` of the trainers heard from in the last ``LIVE_S`` seconds: the model's step.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time

from streamtrain import layers_diff
from streamtrain.errors import StoreError
from streamtrain.graph import Schema
from streamtrain.reader_format import reading
from streamtrain.store import redis_keys

log = logging.getLogger("streamtrain.serve")
LIVE_S = 60.0


def layers_digest(layers: list) -> str:
    return hashlib.sha1(json.dumps(layers, sort_keys=True).encode()).hexdigest()[:12]


def meta_key(store) -> bytes:
    return redis_keys.meta_key(store.ns, "serving")


class Publisher:
    """A job hook (redis store only): publish the schema and step every ``every_s`` seconds."""

    def __init__(self, every_s: float = 1.0):
        self.every_s = every_s
        self.field = f"{socket.gethostname()}:{os.getpid()}"
        self._next = 0.0
        self.model: dict | None = None  # what does not change once the model is built: its layers and
                                        # how its reader makes features (servers read requests so)

    def __call__(self, job, batch, result) -> None:
        now = time.monotonic()
        if now < self._next or job.graph is None:
            return
        self._next = now + self.every_s
        schema, t = job.graph.schema, job.trainer
        if self.model is None:          # the first publication: compared with the other live trainers'
            features = reading(job.config)
            self.model = {"layers": layers_digest(job.config["layers"]), "layer_configs": job.config["layers"],
                          **features}
            _say_other_models(job, self.field, self.model, features)
        doc = {"sparse": list(schema.sparse), "dense": list(schema.dense), **self.model, "batches": t.batches,
               "examples": t.examples, "time": time.time(), "feed_s": job.store.cfg.feed_s}
        try:
            job.store.io.meta("HSET", meta_key(job.store), self.field, json.dumps(doc), what="publish the model")
        except StoreError as err:          # serving learns it at the next publication
            log.warning("could not publish the model for serving: %s", err)


def _say_other_models(job, field: str, ours: dict, features: dict) -> None:
    """A warning per live trainer on this store that trains other layers or reads its input
    otherwise (a rolling change of the config, or two jobs given one namespace): their updates
    meet in one store. ``ours``: this trainer's ``Publisher.model``; ``features``: its reading."""
    try:
        docs = read_published(job.store, with_fields=True)
    except StoreError:
        return
    now = time.time()
    for other, doc in docs:
        if other == field or now - doc.get("time", 0) > LIVE_S:
            continue
        if doc.get("layers") != ours["layers"]:
            said = layers_diff.say(doc.get("layer_configs"), ours["layer_configs"], there="its config") \
                or f"digest {doc.get('layers')}, this job's {ours['layers']}"
            log.warning("trainer %s on this store trains other layers (%s); their updates meet in one store",
                        other, said)
        read = [f"{k} {json.dumps(doc[k])} there, {json.dumps(v)} here" for k, v in features.items()
                if k in doc and doc[k] != v]
        if read:
            log.warning("trainer %s on this store reads its input otherwise (%s); their updates meet in one store",
                        other, "; ".join(read))


def read_published(store, with_fields: bool = False) -> list:
    """What the trainers published, newest first (raises ``StoreError`` when the store is down);
    ``with_fields``: (trainer, document) pairs."""
    raw = store.io.meta_hash(meta_key(store), what="read the published model")
    docs = []
    for field, value in raw.items():
        try:
            docs.append((field.decode() if isinstance(field, bytes) else field, json.loads(value)))
        except ValueError:
            continue
    docs.sort(key=lambda fd: -fd[1].get("time", 0))
    return docs if with_fields else [d for _, d in docs]


def published_schema(docs: list[dict]) -> Schema | None:
    return Schema(tuple(docs[0]["sparse"]), tuple(docs[0]["dense"])) if docs else None


def published_feed(docs: list[dict]) -> float:
    """The shortest change feed retention of the live trainers (0: one of them keeps none);
    with none live, the newest one's (``docs`` is newest first)."""
    now = time.time()
    live = [float(d.get("feed_s", 0.0)) for d in docs if now - d.get("time", 0) <= LIVE_S]
    return min(live) if live else float(docs[0].get("feed_s", 0.0)) if docs else 0.0


def published_step(docs: list[dict]) -> int:
    now = time.time()
    return sum(int(d.get("batches", 0)) for d in docs if now - d.get("time", 0) <= LIVE_S)
