"""Fill numba's cache with the per-example kernels ahead of time:

    python -m streamtrain.online.warm

trains two small batches of a model with linear and FM terms, one with its loss squared error
(the loop is compiled per loss) and one of its linear terms under a softmax over 3 logits (the
multi-class loop), which compiles every kernel for the argument types the engine
passes (they do not depend on the model otherwise) and the progressive
figures' pass, steps a dense Adam parameter in the memory store (an MLP's: the fused Adam pass,
one signature whatever the model), and runs the id index's and the drift detectors' kernels once
(a job runs them on its first batch). The Dockerfile runs it
at build time, while the installed package's directory is still writable: a container then
loads the kernels instead of compiling them (numba's cache is next to ``kernels.py``).
"""
from __future__ import annotations

import numpy as np

from streamtrain.context import Gradients
from streamtrain.drift import DriftMonitor
from streamtrain.graph import Graph, Schema
from streamtrain.params import ParamSpec
from streamtrain.readers.synthetic import SyntheticStream
from streamtrain.store.idindex import IdIndex
from streamtrain.store.memory import MemoryStore
from streamtrain.trainer import Trainer

LAYERS = [
    {"name": "sparse", "type": "sparse_input"},
    {"name": "dense", "type": "dense_input"},
    {"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 1, "shared": True, "init": "zeros",
     "optimizer": {"type": "ftrl", "l1": 0.1}},
    {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
    {"name": "linear", "type": "fc", "inputs": ["dense"], "dim": 1, "optimizer": {"type": "sgd"}},
    {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 2, "shared": True},
    {"name": "fm", "type": "fm", "inputs": ["emb"], "reduce": True},
    {"name": "logit", "type": "add", "inputs": ["wide_sum", "linear", "fm"]},
    {"name": "loss", "type": "logloss", "inputs": ["logit"], "sequential": True},
]


def main() -> int:
    batch = next(SyntheticStream({"fields": 3, "dense": 3, "cardinality": 10, "examples": 16}, 16).reader()())
    graph = Graph.from_config(LAYERS, Schema.of(batch))
    store = MemoryStore()
    store.declare(graph.params, {"type": "adagrad"})
    trainer = Trainer(graph, store)
    for _ in range(2):
        trainer.step(batch)
    squared = [{**layer, "type": "mse"} if layer["name"] == "loss" else layer for layer in LAYERS]
    regression = Graph.from_config(squared, Schema.of(batch))     # the loop compiled per loss
    rstore = MemoryStore()
    rstore.declare(regression.params, {"type": "adagrad"})
    Trainer(regression, rstore).step(batch)
    classes = [{**layer, "dim": 3} if layer["name"] in ("wide", "linear") else
               {**layer, "type": "softmax_ce"} if layer["name"] == "loss" else
               {**layer, "inputs": ["wide_sum", "linear"]} if layer["name"] == "logit" else layer
               for layer in LAYERS if layer["name"] not in ("emb", "fm")]
    softmax = Graph.from_config(classes, Schema.of(batch))      # (labels 0 / 1: classes of the 3)
    sstore = MemoryStore()
    sstore.declare(softmax.params, {"type": "adagrad"})
    Trainer(softmax, sstore).step(batch)
    mlp = MemoryStore()
    mlp.declare({"w": ParamSpec("w", (4, 2))}, {"type": "adam"})
    mlp.push(Gradients(dense={"w": np.ones((4, 2), np.float32)}))
    index = IdIndex(capacity=1)
    index.find_or_add(np.arange(64, dtype=np.uint64))         # grows: the rehash kernel
    index.lookup(np.arange(8, dtype=np.uint64))
    DriftMonitor.from_config(None).update(np.ones(4))
    print(f"per-example kernels compiled and cached; logloss {trainer.progressive.logloss:.4f}")
    return 0 if np.isfinite(trainer.progressive.logloss) else 1


if __name__ == "__main__":
    raise SystemExit(main())
