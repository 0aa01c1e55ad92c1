"""A stream with a planted best configuration, and the AutoML job that searches for it."""
from __future__ import annotations

import numpy as np

from streamtrain import config as configmod
from streamtrain.batch import Batch, SparseField

FTRL = {"type": "ftrl", "alpha": 0.3, "beta": 1.0, "l1": 0.0, "l2": 0.0}


def planted_stream(seed: int = 0, fields: int = 4, cardinality: int = 8, size: int = 1000):
    """Batches whose label depends only on the *pair* (f1, f2): logit = T[f1, f2] - 0.5 with
    T = +-2 at random. Neither field alone says anything (each row and column of T is balanced
    in expectation), so a linear model must cross f1 with f2 to learn; any other pair is noise."""
    rng = np.random.default_rng(seed)
    table = rng.choice([-2.0, 2.0], size=(cardinality, cardinality))
    while True:
        x = rng.integers(0, cardinality, size=(size, fields))
        logit = table[x[:, 1], x[:, 2]] - 0.5
        y = (rng.random(size) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        offsets = np.arange(size + 1, dtype=np.int64)
        yield Batch(labels=y, sparse={f"f{i}": SparseField((x[:, i] + 1000 * (i + 1)).astype(np.uint64), offsets)
                                      for i in range(fields)})


def layers(alpha: float = 0.3, opt: dict | None = None) -> list[dict]:
    opt = opt or dict(FTRL, alpha=alpha)
    return [{"name": "sparse", "type": "sparse_input"},
            {"name": "crosses", "type": "feature_cross", "inputs": ["sparse"], "pairs": []},
            {"name": "wide", "type": "embedding", "inputs": ["crosses"], "dim": 1, "shared": True,
             "init": "zeros", "optimizer": opt},
            {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
            {"name": "bias", "type": "bias", "init": "zeros", "optimizer": dict(opt)},
            {"name": "logit", "type": "add", "inputs": ["wide_sum", "bias"]},
            {"name": "loss", "type": "logloss", "inputs": ["logit"], "sequential": True}]


def job_config(live: int = 4, grace: int = 1000, rates=(0.03, 0.1, 0.3, 1.0), sgd: bool = False,
               **automl) -> dict:
    """The planted stream's job: crosses and the rate of both layers searched (FTRL's alpha, or
    SGD's lr with ``sgd``)."""
    opt = {"type": "sgd", "lr": rates[0]} if sgd else None
    key = "lr" if sgd else "alpha"
    rate = {"name": "rate", "paths": [f"layers.wide.optimizer.{key}", f"layers.bias.optimizer.{key}"],
            "values": list(rates)}
    if sgd:
        rate["start"] = rates[0]
    cfg = {"batch_size": 1000, "layers": layers(opt=opt), "metrics": {"enabled": False},
           "automl": {"live": live, "grace": grace, **automl, "space": [
               {"name": "crosses", "cross": "crosses", "max_pairs": 2}, rate]}}
    return configmod.validate(configmod.with_defaults(configmod.SCHEMA, cfg))


def small_job(over: dict | None = None, **automl) -> dict:
    """LR (wide + bias) with an optional FM term, an optional dense-free deep part of its own
    batch size, and the deep part's rate (``over``: more of the job's keys)."""
    lay = layers()
    lay[-2:-2] = [{"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 4, "shared": True},
                  {"name": "fm", "type": "fm", "inputs": ["emb"], "reduce": True},
                  {"name": "products", "type": "inner_product", "inputs": ["emb"]},
                  {"name": "deep_in", "type": "concat", "inputs": ["emb", "products"]},
                  {"name": "deep_out", "type": "fc", "inputs": ["deep_in"], "dim": 1,
                   "optimizer": {"type": "adam", "lr": 0.001}}]
    space = [{"name": "terms", "path": "layers.logit.inputs", "always": ["wide_sum", "bias"],
              "optional": ["deep_out", "fm"]},
             {"name": "rate", "paths": ["layers.wide.optimizer.alpha"], "values": [0.1, 0.3, 1.0], "start": 0.3},
             {"name": "deep_rate", "paths": ["layers.deep_out.optimizer.lr"], "values": [0.001, 0.01]},
             {"name": "deep_batch", "paths": ["batch_size"], "values": [10, 100], "start": 10, "needs": "deep_out"}]
    cfg = {"batch_size": 1000, "layers": lay, "metrics": {"enabled": False},
           "automl": {"live": 4, "grace": 100, "explore": 0.0, **automl, "space": space}, **(over or {})}
    return configmod.validate(configmod.with_defaults(configmod.SCHEMA, cfg))


def redis_trainers(cfg: dict, first, redis_url: str, namespace: str, n: int = 2) -> list:
    """``n`` started AutoML trainers of ``cfg`` sharing one Redis namespace (each joins the
    search the first one wrote; ``write_back_s`` 0: every push reaches Redis, so the rows are
    shared). The caller closes their stores."""
    from streamtrain.automl.shared import SharedSearch
    from streamtrain.automl.trainer import AutoTrainer
    from streamtrain.graph import Schema
    from streamtrain.store import make_store
    trainers = []
    for _ in range(n):
        store = make_store({"backend": "redis", "urls": [redis_url], "namespace": namespace,
                            "write_back_s": 0})
        t = AutoTrainer(cfg, store, Schema.of(first), shared=SharedSearch(store))
        t.start()
        trainers.append(t)
    return trainers
