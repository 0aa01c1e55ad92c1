"""A candidate: one configuration of the space as a model, in its own namespace of the store.

Every layer name of the candidate's job config gets the prefix ``a<slot>g<epoch>_`` (inputs and
shared ``param`` names too), so its parameters are named ``a<slot>g<epoch>_<layer>.<param>``:
the candidates of a job share one store (memory, or Redis: one key prefix each, inside the
job's namespace), one checkpoint and one write-back flush, and never each other's rows. A
retired candidate's parameters are dropped from the store (``ParamStore.drop``).
"""
from __future__ import annotations

import copy

import numpy as np

from streamtrain.graph import Graph
from streamtrain.progressive import Regression
from streamtrain.trainer import StepResult, Trainer

from .space import reachable


def prefix(slot: int, epoch: int) -> str:
    return f"a{slot}g{epoch}_"


def prefixed(layers: list[dict], pre: str) -> list[dict]:
    """The layer list with every layer, input and shared parameter name prefixed."""
    out = []
    for cfg in copy.deepcopy(reachable(layers)):
        cfg["name"] = pre + cfg["name"]
        inputs = cfg.get("inputs", [])
        cfg["inputs"] = [pre + x for x in ([inputs] if isinstance(inputs, str) else inputs)]
        if isinstance(cfg.get("param"), str):
            cfg["param"] = pre + cfg["param"]
        out.append(cfg)
    return out


def champion_config(config: dict, state: dict) -> dict:
    """The served candidate's job config of a saved search (``state``: ``Search.to_json``; its
    ``served`` slot, the champion in states saved before it existed), its layers named as its
    parameters are in the store: what ``streamtrain eval`` and ``serve --restore`` build from an
    AutoML job's checkpoint."""
    from streamtrain.schema import with_defaults
    from .space import AUTOML, Space
    served = state.get("served", state["champion"])
    slot = state["slots"][served]
    cfg = Space(with_defaults(AUTOML, config["automl"]), config).apply(config, slot["assign"])
    cfg["layers"] = prefixed(cfg["layers"], prefix(served, slot["epoch"]))
    return cfg


class Candidate:
    """A model of one assignment: its graph, its trainer on the shared store, its batch size."""

    def __init__(self, slot: int, epoch: int, assign: dict, config: dict, schema, store, seed: int = 0):
        self.slot, self.epoch, self.assign, self.config = slot, epoch, assign, config
        self.prefix = prefix(slot, epoch)
        self.graph = Graph.from_config(prefixed(config["layers"], self.prefix), schema)
        store.add(self.graph.params, config["default_optimizer"])
        self.trainer = Trainer(self.graph, store, seed=seed + epoch)
        # no rows found ahead (``MemoryStore.index_ahead``): a birth copies the champion's index,
        # and rows the parse thread had made by then would start with the champion's initial
        # values: a search's figures would depend on that thread's timing. Its occurrence grids
        # (``PerExample.prepare``) depend on the batch alone: they are made ahead, as a Trainer's
        self.trainer.rows_ahead = False
        self.trainer.say_skipped = False    # a non-finite candidate is retired, and the search says so
        if isinstance(self.trainer.progressive, Regression):
            # the search pairs candidates' losses of one example: in the same units (progressive.py)
            self.trainer.progressive = Regression(normalized=False)
        self.batch_size = int(config["batch_size"])

    @property
    def params(self) -> list[str]:
        return list(self.graph.params)

    def step(self, batch) -> StepResult:
        """Predict, then learn, the shared batch, in pieces of the candidate's own batch size."""
        if batch.size <= self.batch_size:
            return self.trainer.step(batch)
        parts = []
        for lo in range(0, batch.size, self.batch_size):
            r = self.trainer.step(batch.take(np.arange(lo, min(lo + self.batch_size, batch.size))))
            parts.append(r)
            if not r.applied:
                return StepResult(r.loss, None, False, reason=r.reason, seconds=r.seconds)
        seconds = {}
        for r in parts:
            for k, v in r.seconds.items():
                seconds[k] = seconds.get(k, 0.0) + v
        preds = np.concatenate([np.asarray(r.predictions) for r in parts])
        losses = None if any(r.losses is None for r in parts) else np.concatenate([r.losses for r in parts])
        loss = float(np.mean(losses)) if losses is not None else parts[-1].loss
        return StepResult(loss, preds, True, seconds=seconds, losses=losses)

    def describe(self) -> dict:
        return {"slot": self.slot, "epoch": self.epoch, "assign": self.assign, "prefix": self.prefix}
