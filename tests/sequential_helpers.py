"""Shared by the per-example (sequential) engine's tests: the model, the stream, and training
one way and the other."""
from __future__ import annotations

import numpy as np

from streamtrain.batch import Batch
from streamtrain.graph import Graph, Schema
from streamtrain.store.memory import MemoryStore
from streamtrain.testing import random_batch
from streamtrain.trainer import Trainer

SCHEMA = Schema(sparse=("a", "b", "c"), dense=("d0", "d1", "d2"))
OPTIMIZERS = {
    "sgd": {"type": "sgd", "lr": 0.3},
    "adagrad": {"type": "adagrad", "lr": 0.5},
    "ftrl": {"type": "ftrl", "alpha": 0.5, "beta": 1.0, "l1": 0.0, "l2": 0.5},
    "ftrl-l1": {"type": "ftrl", "alpha": 0.5, "beta": 1.0, "l1": 0.4, "l2": 0.5},
}


def lr_layers(loss_opts: dict, optimizer: dict, *, cross=False, deep=False, fm=None, loss="logloss",
              classes=1) -> list:
    """A wide part, a linear term on the numeric fields and a bias; with ``fm`` (the FM
    embedding's optimizer) an FM of dim-3 embeddings; with ``deep`` an MLP over embeddings;
    ``loss``: its kind (``logloss``, ``mse``, ``softmax_ce``: ``classes`` logits, each term
    that many wide)."""
    wide_in = "cross" if cross else "sparse"
    layers = [
        {"name": "sparse", "type": "sparse_input"},
        {"name": "dense", "type": "dense_input"},
        {"name": "wide", "type": "embedding", "inputs": [wide_in], "dim": classes, "shared": True,
         "init": "zeros", "optimizer": optimizer},
        {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
        {"name": "linear", "type": "fc", "inputs": ["dense"], "dim": classes, "init": "zeros", "optimizer": optimizer},
        {"name": "bias", "type": "bias", "dim": classes, "optimizer": optimizer},
    ]
    logits = ["wide_sum", "linear", "bias"]
    if cross:
        layers.insert(1, {"name": "cross", "type": "feature_cross", "inputs": ["sparse"]})
    if fm is not None:
        layers += [{"name": "v", "type": "embedding", "inputs": ["sparse"], "dim": 3, "shared": True,
                    "init_scale": 0.3, "optimizer": fm},
                   {"name": "fm", "type": "fm", "inputs": ["v"], "reduce": True}]
        logits.append("fm")
    if deep:
        layers += [
            {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 3, "shared": True},
            {"name": "flat", "type": "sum_pooling", "inputs": ["emb"]},
            {"name": "hidden", "type": "fc", "inputs": ["flat"], "dim": 4, "activation": "tanh",
             "optimizer": {"type": "adam", "lr": 0.01}},
            {"name": "deep_out", "type": "fc", "inputs": ["hidden"], "dim": classes,
             "optimizer": {"type": "adam", "lr": 0.01}},
        ]
        logits.append("deep_out")
    layers += [{"name": "logit", "type": "add", "inputs": logits},
               {"name": "loss", "type": loss, "inputs": ["logit"], **loss_opts}]
    return layers


def stream(n=96, seed=3, regression=False, classes=None, **kw) -> Batch:
    """Few distinct values per field, so examples of a batch share many rows (strong coupling);
    ``regression``: labels spread around 3 (a rating, a price) instead of clicks; ``classes``:
    class indices 0..classes−1 (the click and the first numeric field's sign, then wrapped)."""
    batch = random_batch(n, cardinality=4, missing=0.1, seed=seed, **kw)
    batch.dense = np.where(batch.dense < 0, -1.0, 2.0).astype(np.float32)
    if regression:
        batch.labels = (3.0 + 4.0 * batch.labels - batch.dense[:, 0]).astype(np.float32)
    if classes:
        batch.labels = ((batch.labels + 2 * (batch.dense[:, 0] > 0)) % classes).astype(np.float32)
    return batch


def train(layers, data: Batch, batch_size: int, dtype=np.float64, store=None):
    graph = Graph.from_config(layers, SCHEMA)
    store = store if store is not None else MemoryStore(dtype=dtype)
    store.declare(graph.params, {"type": "adagrad", "lr": 0.1})
    trainer = Trainer(graph, store, dtype=dtype)
    preds = []
    for start in range(0, data.size, batch_size):
        part = data.take(np.arange(start, min(start + batch_size, data.size)))
        preds.append(np.array(trainer.step(part).predictions, np.float64).reshape(-1))
    return np.concatenate(preds), store.snapshot(), trainer


def arrays(snap) -> dict:
    """Every parameter's value and optimizer slots, table rows in id order."""
    out = {}
    for name, slots in snap.dense.items():
        out.update({f"{name}.{k}": v for k, v in slots.items()})
    for name, slots in snap.tables.items():
        order = np.argsort(slots["ids"])
        out.update({f"{name}.{k}": v[order] for k, v in slots.items() if k != "ids"})
    return out


def assert_same_training(layers, data, batch_size, atol, rtol=0.0, **kw):
    p1, snap1, _ = train(layers, data, 1, **kw.get("one", {}))
    pb, snapb, trainer = train(layers, data, batch_size, **kw.get("batch", {}))
    np.testing.assert_allclose(pb, p1, rtol=rtol, atol=atol)
    a1, ab = arrays(snap1), arrays(snapb)
    assert sorted(a1) == sorted(ab)
    for name in a1:          # weights and the accumulators (n, z): each example's own squares
        np.testing.assert_allclose(ab[name], a1[name], rtol=rtol, atol=atol, err_msg=name)
    return trainer
