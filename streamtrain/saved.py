"""A saved model, loaded to be used without learning (Paddle's ``model.load``): the job's layers
with a checkpoint's parameters in a memory store of this process, and its graph (when the job
has a ``graph`` section) in a memory graph store. ``streamtrain eval`` and
``streamtrain serve --restore`` use it; nothing is ever written back to the checkpoint.

The fields the model was built on come from the checkpoint (written there since this version)
or, for an older checkpoint, from a schema the caller gives (``serve.schema``); ``eval`` builds
the model on its stream's first batch, as ``run`` does.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from . import checkpoint, label_units, layers_diff, reader_format, task
from .automl.candidates import champion_config
from .errors import CheckpointError, ConfigError
from .graph import Graph, Schema
from .graphstore.stream import GraphInput, model_problems
from .store.memory import MemoryStore

log = logging.getLogger("streamtrain")


@dataclass
class Saved:
    """A checkpoint read from disk (``read``), ready to build the model on a schema (``build``)."""

    path: str
    snapshot: object
    meta: dict

    @property
    def step(self) -> int:
        return int(self.meta.get("step", 0))

    @property
    def schema(self) -> Schema | None:
        fields = self.meta.get("schema")
        return None if fields is None else Schema(tuple(fields["sparse"]), tuple(fields["dense"]))

    def build(self, config: dict, schema: Schema, serving: bool = False) -> tuple[Graph, MemoryStore]:
        """The job's layers on ``schema`` and a memory store holding the checkpoint's values; a
        parameter the layers declare and the checkpoint lacks is a ``ConfigError``, and so is a
        reader that reads numbers otherwise than the model was trained on (``serving``: a reader
        that names no format takes the checkpoint's way). An AutoML job's checkpoint gives its
        champion."""
        config = self.as_trained(config)
        changed = layers_diff.say(self.meta.get("layers"), config["layers"])
        if changed:
            log.warning("checkpoint %s: %s", self.path, changed)
        found = self.problems(config, serving)
        if config.get("automl") is not None and self.meta.get("automl"):
            config = champion_config(config, self.meta["automl"])
        graph = Graph.from_config(config["layers"], schema)
        found += model_problems(graph, config.get("graph"))
        missing = sorted(set(graph.params) - set(self.snapshot.specs))
        found += [("layers", f"checkpoint {self.path} has no parameter {name!r} (written by another model?)")
                  for name in missing]
        found += [("layers", f"checkpoint {self.path}: {msg}") for msg in checkpoint.shape_problems(self.snapshot,
                                                                                                   graph.params)]
        if found:
            raise ConfigError(found)
        store = MemoryStore()
        store.declare(graph.params, config["default_optimizer"])
        store.restore(self.snapshot)
        return graph, store

    def as_trained(self, config: dict) -> dict:
        """The job's config with its "auto" settings as the checkpoint was trained: the task
        (``task.py``), then the label units."""
        return label_units.for_checkpoint(task.for_checkpoint(config, self.meta), self.meta)

    def problems(self, config: dict, serving: bool = False) -> list[tuple[str, str]]:
        """What makes the checkpoint's answers wrong under the job's config, known before any
        batch (``eval`` says them before reading its stream): a loss of another type, other label
        units, a reader that reads numbers otherwise. Named as the job's layers are (an AutoML
        job's champion has its candidate's names)."""
        config = self.as_trained(config)
        found = [("layers", p) for p in (layers_diff.loss_problem(self.meta.get("layers"), config["layers"], self.path),
                                         label_units.mismatch(config["layers"], self.meta, self.path)) if p]
        return found + [("reader", f"checkpoint {self.path}: {p}")
                        for p in reader_format.problems(self.meta, config, adopt=serving)]

    def graph_input(self, config: dict, malformed=None) -> GraphInput | None:
        """The job's graph input over a memory graph store holding the checkpoint's graph (None
        without a ``graph`` section). The store keeps the checkpoint's neighbours per node."""
        cfg = config.get("graph")
        if cfg is None:
            return None
        arrays = self.meta["arrays"].get("graph")
        if arrays is None:
            log.warning("checkpoint %s holds no graph: every node reads as one without neighbours", self.path)
        k = arrays["neighbours"].shape[1] if arrays is not None else cfg.get("store", {}).get("neighbours", 32)
        gi = GraphInput({**cfg, "store": {"backend": "memory", "neighbours": int(max(k, 1))}}, malformed)
        if arrays is not None:
            gi.store.restore(arrays)
        return gi


def read(where: str) -> Saved:
    """The checkpoint directory ``where`` (or a ``checkpoint.dir``: its latest)."""
    try:
        path = checkpoint.resolve(where)
        snapshot, meta = checkpoint.read(path)
    except (OSError, ValueError, CheckpointError) as err:
        raise ConfigError([("--restore", f"cannot read checkpoint {where}: {err}")]) from None
    return Saved(str(path), snapshot, meta)


def schema_json(schema: Schema) -> dict:
    """How a checkpoint records the fields a model was built on."""
    return {"sparse": list(schema.sparse), "dense": list(schema.dense)}
