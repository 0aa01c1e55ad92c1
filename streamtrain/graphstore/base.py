"""The graph-store interface both backends implement, and their registry.

A graph store keeps, per node, its most recent ``neighbours`` neighbours (bounded memory per
node) and the node's latest numeric features. The sampler asks it for the neighbour lists
of a whole frontier at once (one call, one Redis round trip, per hop) and samples them itself
(``sampling.py``), so both backends sample the same way. A checkpoint holds a store's
``snapshot()``: the same arrays for both backends, so one restores into the other.
"""
from __future__ import annotations

import numpy as np

from streamtrain.registry import Registry
from streamtrain.schema import Option, positive

GRAPH_STORES = Registry("graph store backend", group="streamtrain.graph_stores")
register = GRAPH_STORES.register

COMMON_OPTIONS = {
    "backend": Option("memory", (str,), doc="memory | redis"),
    "neighbours": Option(32, (int,), check=positive, doc="most recent neighbours kept per node"),
}


class GraphStore:
    """Adjacency (recent-K neighbours per node) and node features, looked up a frontier at a time."""

    kind = ""
    options: dict = COMMON_OPTIONS

    def __init__(self, neighbours: int = 32, **_):
        self.k = int(neighbours)

    def neighbours(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(``uint64 [n, K]`` neighbour ids, ``int64 [n]`` how many of each row are valid)."""
        raise NotImplementedError

    def insert(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Add ``dst[i]`` to ``src[i]``'s neighbours, in stream order (the oldest fall out)."""
        raise NotImplementedError

    def set_features(self, ids: np.ndarray, features: np.ndarray) -> None:
        raise NotImplementedError

    def features(self, ids: np.ndarray, width: int) -> np.ndarray:
        """``float32 [n, width]``: each node's latest features, zeros for a node never seen."""
        raise NotImplementedError

    def stats(self) -> dict:
        """``{"nodes": ..., "edges": ...}``: nodes with neighbours, neighbour entries held."""
        raise NotImplementedError

    def snapshot(self) -> dict:
        """``{"ids", "neighbours" [n, K], "counts", "feature_ids", "features"}`` arrays."""
        raise NotImplementedError

    def restore(self, arrays: dict) -> None:
        """Replace the whole graph by a snapshot's (the backend empties itself, then ``fill``)."""
        raise NotImplementedError

    def fill(self, arrays: dict) -> None:
        """Insert a snapshot's lists and features."""
        counts = np.asarray(arrays["counts"], np.int64)
        nbr = np.asarray(arrays["neighbours"], np.uint64)
        valid = np.arange(nbr.shape[1]) < counts[:, None]
        self.insert(np.repeat(np.asarray(arrays["ids"], np.uint64), counts), nbr[valid])
        if len(arrays["feature_ids"]):
            self.set_features(arrays["feature_ids"], arrays["features"])

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return f"{self.kind} (recent {self.k} distinct neighbours per node)"


def empty_snapshot(k: int) -> dict:
    return {"ids": np.zeros(0, np.uint64), "neighbours": np.zeros((0, k), np.uint64),
            "counts": np.zeros(0, np.int64), "feature_ids": np.zeros(0, np.uint64),
            "features": np.zeros((0, 0), np.float32)}
