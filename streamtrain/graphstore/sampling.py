"""Uniform neighbour sampling with per-hop fanouts into message-flow blocks.

Each hop asks the graph store for the frontier's neighbour lists in one call, then picks
``fanout`` of each list uniformly without replacement (all of it when shorter), vectorised:
random keys per slot, invalid slots keyed past 1, ``argpartition`` keeps the ``fanout``
smallest. The same generator seeded once gives the same blocks for the same graph.
"""
from __future__ import annotations

import numpy as np

from .blocks import Block, first_occurrence


def sample_hop(lists: np.ndarray, counts: np.ndarray, fanout: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(destination row of every sampled edge, grouped by row; the sampled neighbour ids)."""
    n, k = lists.shape
    if fanout >= k or not n:
        valid = np.arange(k) < counts[:, None]
        return np.repeat(np.arange(n), valid.sum(axis=1)), lists[valid]
    keys = rng.random((n, k))
    keys[np.arange(k) >= counts[:, None]] = 2.0
    pick = np.argpartition(keys, fanout - 1, axis=1)[:, :fanout]
    chosen = np.take_along_axis(keys, pick, axis=1) < 2.0
    ids = np.take_along_axis(lists, pick, axis=1)
    return np.repeat(np.arange(n), chosen.sum(axis=1)), ids[chosen]


class Sampler:
    """Blocks for a set of seed nodes: ``fanouts[0]`` neighbours of each seed, ``fanouts[1]`` of
    each of those, …; the innermost block (the last) has the seeds as destinations."""

    def __init__(self, store, fanouts, seed: int = 0):
        self.store = store
        self.fanouts = [int(f) for f in fanouts]
        self.rng = np.random.default_rng(seed)
        self.edges = 0              # sampled edges so far
        self.dst_rows = 0           # destination rows they were sampled for

    def sample(self, seeds: np.ndarray, rng=None) -> tuple[list, np.ndarray]:
        """(blocks outermost first, the outermost source node ids); ``seeds`` unique. With
        ``rng`` (serving, evaluation: a generator of the caller's own) the sampler's generator
        and its counts are left alone, so predictions never move the training's samples."""
        nodes = np.asarray(seeds, np.uint64)
        blocks = []
        for fanout in self.fanouts:
            lists, counts = self.store.neighbours(nodes)
            dst, picked = sample_hop(lists, counts, fanout, self.rng if rng is None else rng)
            all_nodes, local = first_occurrence(np.concatenate([nodes, picked]))
            blocks.append(Block(len(all_nodes), len(nodes), local[len(nodes):], dst))
            if rng is None:
                self.edges += len(dst)
                self.dst_rows += len(nodes)
            nodes = all_nodes
        return blocks[::-1], nodes
