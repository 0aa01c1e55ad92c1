"""A shadow term: a term of the space learnt beside the champion from the first example,
without a slot, so that a challenger with it starts warm.

A term born mid-stream does not catch up: a richer model learns slower at first, and a cold
newborn is compared once it learnt what the champion had learnt at its birth, by when the
champion has learnt more (docs/automl.md, *A cross term once the others are decided*). A term
of a set listed in the dimension's ``shadow`` (``auto.json``: ``emb_out``, a 1-unit fc over a
field embedding of its own) is learnt all along as a **residual** on the champion: its graph is
the term's layers (those no other term reaches) plus the champion's logit as an input,

    p_t = sigmoid(champion_logit_t + term_t),

the champion's logit being its progressive prediction of example ``t`` (before it learnt it),
so the shadow learns what the champion plus the term would, the term's gradient being the one
the joint model's would be on the champion's point of its curve. Its predictions are never
served nor scored. A challenger with the term (the champion with it added) starts from the
champion's parameters and the shadow's ones for the term (``AutoTrainer._warm``): it starts
where champion plus term is, and is compared from its birth like any warm newborn
(``Space.cold`` does not count a shadowed layer as new).

The budget: the shadow is the term's layers alone, learnt per batch (no per-example core), and
only while the champion lacks the term; its parameters live under the prefix ``shadow_``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from streamtrain.batch import Prepared
from streamtrain.graph import Graph, Schema
from streamtrain.trainer import Trainer

from .candidates import prefixed

PREFIX = "shadow_"
BASE = "base"           # the shadow's one numeric input: the champion's logit


def reach(layers: list[dict], names) -> set:
    """The names of ``names`` and of every layer they read from (through ``inputs``)."""
    by_name = {c["name"]: c for c in layers}
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        inputs = by_name[name].get("inputs", [])
        todo += [inputs] if isinstance(inputs, str) else list(inputs)
    return seen


def shadowed(config: dict, dims) -> set:
    """The layers only the shadowed terms of the space reach (none other reads them)."""
    layers = [c for c in config["layers"] if isinstance(c, dict)]
    mine = {m for d in dims if d.shadow for m in d.shadow}
    if not mine:
        return set()
    other = [c["name"] for c in layers if c["name"] not in reach(layers, mine)]
    return reach(layers, mine) - reach(layers, other)


def members(dims) -> list[tuple[str, str]]:
    """(dimension, term) of every shadowed term."""
    return [(d.name, m) for d in dims if d.shadow for m in d.shadow]


class Shadow:
    """The shadowed terms' layers learnt as a residual on the champion's logit."""

    def __init__(self, config: dict, space, schema, store, seed: int = 0):
        self.terms = members(space.dims)
        own = shadowed(config, space.dims)
        layers = [c for c in config["layers"] if isinstance(c, dict)]
        used = reach(layers, [m for _, m in self.terms])
        body = [c for c in layers if c["name"] in used and (c["name"] in own or c["type"] == "sparse_input")]
        body += [{"name": BASE, "type": "dense_input"},
                 {"name": "logit", "type": "add", "inputs": [m for _, m in self.terms] + [BASE]},
                 {"name": "loss", "type": "logloss", "inputs": ["logit"]}]
        self.graph = Graph.from_config(prefixed(body, PREFIX), Schema(tuple(schema.sparse), (BASE,)))
        store.add(self.graph.params, config["default_optimizer"])
        self.trainer = Trainer(self.graph, store, seed=seed)
        self.examples = 0

    def wanted(self, assign: dict) -> bool:
        """Whether the champion of ``assign`` lacks a shadowed term (else the shadow rests)."""
        return any(m not in assign[d] for d, m in self.terms)

    def step(self, batch, predictions) -> None:
        """Learn the batch on top of the champion's progressive predictions of it."""
        p = np.clip(np.asarray(predictions, np.float64).reshape(-1), 1e-7, 1 - 1e-7)
        logit = (np.log(p) - np.log1p(-p)).astype(np.float32)[:, None]
        own = dataclasses.replace(batch, dense=logit, dense_names=(BASE,), prepared=Prepared(), offsets={})
        if self.trainer.step(own).applied:
            self.examples += batch.size

    def source(self, name: str, prefix: str) -> str:
        """The shadow's parameter for a candidate's parameter ``name`` (candidate ``prefix``)."""
        return PREFIX + name[len(prefix):]
