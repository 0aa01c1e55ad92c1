"""The graph store beside the parameter store: adjacency grown from the stream, sampled per batch.

Backends register in ``GRAPH_STORES`` (``base.py``); the built-in ones are imported here.
"""
from __future__ import annotations

from . import memory, redis_graph  # noqa: F401  (register the built-in backends)
from .base import GRAPH_STORES, GraphStore


def make_graph_store(cfg: dict) -> GraphStore:
    """A graph store from its config section (``backend`` plus the backend's options)."""
    cls = GRAPH_STORES.get(cfg.get("backend", "memory"), where="graph.store.backend")
    return cls(**{k: v for k, v in cfg.items() if k != "backend"})


__all__ = ["GRAPH_STORES", "GraphStore", "make_graph_store"]
