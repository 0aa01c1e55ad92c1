"""A model on a stream without categorical fields: the layers that read only them left out.

Every example model reads the categorical fields (``sparse_input`` → crosses, embeddings, FM,
products) and the numeric ones (``dense_input`` → a linear term, the MLP's input). On a stream
with numeric columns only (sensor readings, a CSV of measurements) the categorical half has
nothing to read: ``left_out`` names the ``sparse_input`` layers that take every field the
stream has (no ``fields`` option) and, repeatedly, each layer all of whose inputs are left out;
``pruned`` drops them and takes them out of the inputs of the layers that keep others (``add``,
``concat``). ``lr.json`` becomes a linear model of the numeric columns and a bias, learnt
example by example; ``deepfm.json`` that and an MLP on the numeric columns.
"""
from __future__ import annotations

import logging

log = logging.getLogger("streamtrain")


def _inputs(cfg: dict) -> list[str]:
    inputs = cfg.get("inputs", [])
    return [inputs] if isinstance(inputs, str) else list(inputs)


def left_out(layer_configs: list[dict], schema) -> list[str]:
    """The names of the layers that read only categorical fields, on a stream that has none
    (empty when it has some, or when no ``sparse_input`` takes all fields)."""
    if schema.sparse:
        return []
    gone = {c["name"] for c in layer_configs if c.get("type") == "sparse_input" and c.get("fields") is None}
    grew = bool(gone)
    while grew:
        grew = False
        for c in layer_configs:
            inputs = _inputs(c)
            if c["name"] not in gone and inputs and all(i in gone for i in inputs):
                gone.add(c["name"])
                grew = True
    return [c["name"] for c in layer_configs if c["name"] in gone]


def pruned(layer_configs: list[dict], gone: list[str]) -> list[dict]:
    """The configs without the layers ``gone``, and without them among the others' inputs."""
    gone_set, out = set(gone), []
    for c in layer_configs:
        if c["name"] in gone_set:
            continue
        inputs = _inputs(c)
        if any(i in gone_set for i in inputs):
            c = {**c, "inputs": [i for i in inputs if i not in gone_set]}
        out.append(c)
    return out


def say(gone: list[str], schema) -> None:
    """The log line of a model built without the layers ``gone``."""
    if gone:
        log.info("the stream has no categorical field: layers %s left out (they read only categorical fields); "
                 "the model reads the numeric ones: %s", ", ".join(gone), ", ".join(schema.dense) or "none")
