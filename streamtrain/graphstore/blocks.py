"""Sampled message-flow blocks (sam_backend's per-layer graphs) that a batch carries.

For an L-layer model a batch holds L blocks; block 0 is the outermost (its source nodes are
the node ids whose embeddings / features the model pulls), block L-1 the innermost (its
destination nodes are the batch's seed nodes). In every block the destination nodes come
first among the source nodes (``partial_linear`` relies on it), and the edges (source row →
destination row) are grouped by destination.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Block:
    """One layer's bipartite graph: ``num_src`` source rows, ``num_dst`` destination rows (the
    first ``num_dst`` source rows), edges ``src[e] → dst[e]`` with ``dst`` non-decreasing."""

    num_src: int
    num_dst: int
    src: np.ndarray            # int64 [E], rows among the sources
    dst: np.ndarray            # int64 [E], rows among the destinations, sorted

    def __post_init__(self):
        self._indptr = None

    @property
    def num_edges(self) -> int:
        return len(self.src)

    def indegree(self) -> np.ndarray:
        return np.bincount(self.dst, minlength=self.num_dst)

    def indptr(self) -> np.ndarray:
        """Where each destination's edges start (CSR row pointer, ``[num_dst + 1]``), built once."""
        if self._indptr is None:
            self._indptr = np.zeros(self.num_dst + 1, np.int64)
            np.cumsum(self.indegree(), out=self._indptr[1:])
        return self._indptr


@dataclass
class Subgraph:
    """What the sampler attaches to a batch (``batch.subgraph``).

    ``node_ids``: the ids of block 0's source rows (uint64); ``features``: their numeric
    features ``[num_src, F]`` (F may be 0); ``seeds[endpoint]``: for each example, the row of
    its ``endpoint`` node among the last block's destination rows."""

    blocks: list
    node_ids: np.ndarray
    features: np.ndarray
    seeds: dict

    def block(self, index: int, where: str) -> Block:
        try:
            return self.blocks[index]
        except IndexError:
            raise IndexError(f"{where}: block {index} asked, the batch carries {len(self.blocks)} "
                             f"(one per fanout of graph.fanouts)") from None


def first_occurrence(nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(unique ids in order of first appearance, row of every input id among them)."""
    uniq, first, inverse = np.unique(nodes, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    local = np.empty(len(uniq), np.int64)
    local[order] = np.arange(len(uniq))
    return uniq[order], local[inverse.reshape(-1)]


def random_subgraph(num_nodes: int = 5, layers: int = 2, *, batch_size: int = 5, features: int = 0,
                    endpoints=("src",), seed: int = 0) -> Subgraph:
    """A small subgraph for tests: every block has ``num_nodes`` source and destination rows
    (so any op's input has ``num_nodes`` rows) and a few random edges, some rows with none."""
    rng = np.random.default_rng(seed)
    blocks = []
    for _ in range(layers):
        e = 3 * num_nodes
        dst = np.sort(rng.integers(0, num_nodes - 1, e))          # the last row has no edge
        blocks.append(Block(num_nodes, num_nodes, rng.integers(0, num_nodes, e), dst))
    ids = rng.integers(1, 2**63, num_nodes).astype(np.uint64)
    feats = rng.standard_normal((num_nodes, features)).astype(np.float32)
    seeds = {name: rng.integers(0, num_nodes, batch_size) for name in endpoints}
    return Subgraph(blocks, ids, feats, seeds)
