"""The graph store beside the parameter store: adjacency grown from the stream, sampled per batch.

Backends register in ``GRAPH_STORES`` (``base.py``); every module of the package is imported
here so they do (``stream.py``, the job's side, imports this package and is left out). The
redis backend needs redis-py: it is imported on the first lookup of ``redis``, so a run that
uses no graph or the memory graph store starts without it.
"""
from __future__ import annotations

from streamtrain.registry import import_modules

from .base import GRAPH_STORES, GraphStore


def make_graph_store(cfg: dict) -> GraphStore:
    """A graph store from its config section (``backend`` plus the backend's options)."""
    cls = GRAPH_STORES.get(cfg.get("backend", "memory"), where="graph.store.backend")
    return cls(**{k: v for k, v in cfg.items() if k != "backend"})


import_modules(__name__, __path__, skip=("stream", "redis_graph"))
GRAPH_STORES.lazy("redis", f"{__name__}.redis_graph")

__all__ = ["GRAPH_STORES", "GraphStore", "make_graph_store"]
