"""The job's ``graph`` section: which fields of an ordinary record are an edge's endpoints, and
the per-batch work around a training step.

Before the step: rows with bad graph input (an endpoint field missing from the record or
empty, several values, a numeric id that is not an integer in [0, 2**24), a self-loop) are
counted as malformed (reason ``graph``) and dropped; the source node's features are stored;
the seeds are sampled into blocks (``batch.subgraph``). After the step was predicted and
learnt, and only then, the batch's own edges enter the graph store: the graph never holds
the edge of the example being predicted.

Serving and evaluation (``GraphInput.sample``) read the graph without writing to it: a
request's edge is never inserted, its features never stored.
"""
from __future__ import annotations

import time

import numpy as np

from streamtrain.errors import ConfigError, GraphInputError, StoreError
from streamtrain.schema import REQUIRED, Option, check_options, with_defaults

from . import GRAPH_STORES, make_graph_store
from .blocks import Subgraph, first_occurrence
from .nodes import ID_SPACES, id_space, node_ids
from .sampling import Sampler

ENDPOINTS = ("src", "dst")


def _fanouts(v):
    ok = isinstance(v, list) and v and all(isinstance(f, int) and not isinstance(f, bool) and f > 0 for f in v)
    return None if ok else f"expected a non-empty list of positive integers (one per layer), got {v!r}"


def _seeds(v):
    ok = isinstance(v, list) and v and all(e in ENDPOINTS for e in v) and len(set(v)) == len(v)
    return None if ok else f"expected a non-empty list of 'src' / 'dst', got {v!r}"


def _names(v):
    return None if all(isinstance(x, str) for x in v) else f"expected a list of field names, got {v!r}"


OPTIONS = {
    "src": Option(REQUIRED, (str,), doc="field holding an example's (source) node"),
    "dst": Option(None, (str, type(None)), doc="field holding the other endpoint of its edge (null: none)"),
    "seeds": Option(["src"], (list,), check=_seeds, doc="endpoints whose neighbourhoods are sampled"),
    "fanouts": Option([10, 5], (list,), check=_fanouts, doc="neighbours sampled per node, hop by hop"),
    "features": Option([], (list,), check=_names, doc="numeric fields: the source node's features"),
    "undirected": Option(True, (bool,), doc="an edge also enters the destination's neighbours"),
    "ids": Option("typed", (str,), ID_SPACES, doc="typed: each endpoint field is a node type (user 5 is "
                                                  "not item 5); shared: one id space (a follower graph)"),
    "seed": Option(0, (int,), doc="seed of the sampler"),
    "store": Option({"backend": "memory"}, kinds=GRAPH_STORES, tag="backend",
                    doc="graph store backend and its options"),
}


def problems(cfg) -> list[tuple[str, str]]:
    """Every problem of a ``graph`` section (null: none) as (path under ``graph``, message)."""
    if cfg is None:
        return []
    if not isinstance(cfg, dict):
        return [("", f"expected an object or null, got {cfg!r}")]
    found = check_options(OPTIONS, cfg, what="graph")
    if isinstance(cfg.get("seeds"), list) and "dst" in cfg["seeds"] and not cfg.get("dst"):
        found.append(("seeds", "'dst' is a seed but graph.dst names no field"))
    return found


def model_problems(graph, cfg: dict | None) -> list[tuple[str, str]]:
    """What a built model asks of the batch's blocks that the ``graph`` section does not give:
    a block index past ``fanouts``, node features or a seed endpoint it does not provide."""
    found = []
    uses = [layer for layer in graph.order if getattr(layer, "reads_blocks", False)]
    if uses and cfg is None:
        return [("graph", f"layers {', '.join(x.name for x in uses)} read sampled blocks: the job needs a "
                          f"'graph' section naming the endpoint fields")]
    cfg = with_defaults(OPTIONS, cfg or {})
    n = len(cfg["fanouts"])
    for layer in uses:
        where = f"layers.{layer.name}"
        block = layer.opts.get("block")
        if block is not None and not -n <= block < n:
            found.append((f"{where}.block", f"block {block}, but graph.fanouts {cfg['fanouts']} gives {n} blocks"))
        if layer.kind == "node_input" and layer.opts["features"] != len(cfg["features"]):
            found.append((f"{where}.features", f"{layer.opts['features']} node features, but graph.features "
                                               f"names {len(cfg['features'])}"))
        if layer.kind == "seed_rows" and layer.opts["endpoint"] not in cfg["seeds"]:
            found.append((f"{where}.endpoint", f"endpoint {layer.opts['endpoint']!r} is not sampled "
                                               f"(graph.seeds: {cfg['seeds']})"))
    return found


def overlay_features(feats: np.ndarray, node_ids: np.ndarray, ids: np.ndarray, values: np.ndarray) -> None:
    """``feats[i] = values[j]`` where ``node_ids[i] == ids[j]`` (a repeated id: its last row)."""
    rev_ids, rev_first = np.unique(ids[::-1], return_index=True)
    last = len(ids) - 1 - rev_first
    pos = np.minimum(np.searchsorted(rev_ids, node_ids), len(rev_ids) - 1)
    hit = rev_ids[pos] == node_ids
    feats[hit] = values[last[pos[hit]]]


def open_graph_input(cfg, malformed=None, *, namespace: str = "default"):
    """The job's graph input, or None when the config has no ``graph`` section."""
    return None if cfg is None else GraphInput(cfg, malformed, namespace=namespace)


class GraphInput:
    """Owns the graph store and the sampler of a job; see the module docstring."""

    def __init__(self, cfg: dict, malformed=None, *, namespace: str = "default"):
        found = problems(cfg)
        if found:
            raise ConfigError([(f"graph.{k}" if k else "graph", m) for k, m in found])
        self.cfg = with_defaults(OPTIONS, cfg)
        store_cfg = dict(self.cfg["store"])
        if store_cfg.get("backend") == "redis":
            store_cfg.setdefault("namespace", namespace)
        self.store = make_graph_store(store_cfg)
        self.sampler = Sampler(self.store, self.cfg["fanouts"], self.cfg["seed"])
        self.malformed = malformed
        self.columns = None
        self.last_sample_s = 0.0                    # of the last batch (the metrics histogram)
        self._stats = {"nodes": 0, "edges": 0}

    def mean_fanout(self) -> float:
        s = self.sampler
        return s.edges / s.dst_rows if s.dst_rows else 0.0

    def _endpoint(self, batch, which: str):
        """(uint64 node id per example, usable) of endpoint ``which`` (``src`` / ``dst``): the one
        place where a record's field becomes a node id (``nodes.py``), for training, ``graph
        load``, serving and evaluation."""
        return node_ids(batch, self.cfg[which], id_space(self.cfg, which))

    def endpoints(self, batch):
        """(src node ids, dst node ids or None, whether each example's graph input is usable)."""
        src, ok = self._endpoint(batch, "src")
        dst = None
        if self.cfg["dst"]:
            dst, ok_dst = self._endpoint(batch, "dst")
            ok &= ok_dst & (src != dst)
        return src, dst, ok

    def clean(self, batch):
        """The batch without its rows of bad graph input (counted as malformed, reason graph)."""
        _, _, ok = self.endpoints(batch)
        if ok.all():
            return batch
        if self.malformed is not None:
            self.malformed.add("graph", int((~ok).sum()))
        kept = batch.take(np.flatnonzero(ok))
        kept.offsets = batch.offsets
        return kept

    def attach(self, batch) -> None:
        """Store the source nodes' features, sample the seeds' blocks into ``batch.subgraph``."""
        t0 = time.perf_counter()
        src, dst, _ = self.endpoints(batch)
        self.store_features(batch, src)
        self._sample(batch, {"src": src, "dst": dst})
        self.last_sample_s = time.perf_counter() - t0

    def sample(self, batch) -> None:
        """Serving and evaluation: the seeds' blocks into ``batch.subgraph`` from the graph as it
        is, writing nothing (no edge, no feature). A record's own numeric features stand for its
        source node's stored ones, as in training (where they are stored before sampling). The
        generator is a new one seeded with ``graph.seed`` per call: the same records on the same
        graph get the same blocks, and the training's own samples are not moved. Raises
        ``GraphInputError`` naming the first record whose seed endpoint is unusable."""
        ends = {}
        for which in self.cfg["seeds"]:
            ids, ok = self._endpoint(batch, which)
            if not ok.all():
                row = int(np.flatnonzero(~ok)[0])
                raise GraphInputError(row, self.cfg[which], f"the graph's {which} endpoint: expected one "
                                      f"node id (a categorical value, or an integer in [0, 2**24))")
            ends[which] = ids
        own = None
        if self.cfg["features"] and batch.size:
            src, ok = (ends["src"], np.ones(batch.size, bool)) if "src" in ends else self._endpoint(batch, "src")
            own = (src[ok], batch.dense[ok][:, self._feature_columns(batch)])
        self._sample(batch, ends, np.random.default_rng(self.cfg["seed"]), own)

    def store_features(self, batch, src) -> None:
        """The source nodes' numeric features (``graph.features``) into the graph store."""
        if self.cfg["features"] and batch.size:
            self.store.set_features(src, batch.dense[:, self._feature_columns(batch)])

    def _feature_columns(self, batch) -> np.ndarray:
        names = self.cfg["features"]
        if self.columns is None:
            missing = [f for f in names if f not in batch.dense_names]
            if missing:
                known = ", ".join(batch.dense_names) or "none"
                raise ConfigError([("graph.features", f"fields {missing} are not numeric fields of the data "
                                                      f"(the reader reports: {known})")])
            self.columns = np.array([batch.dense_names.index(f) for f in names], np.int64)
        return self.columns

    def _sample(self, batch, ends: dict, rng=None, own=None) -> None:
        seeds = np.concatenate([ends[e] for e in self.cfg["seeds"]])
        uniq, local = first_occurrence(seeds)
        blocks, node_ids = self.sampler.sample(uniq, rng)
        feats = self.store.features(node_ids, len(self.cfg["features"]))
        if own is not None and len(own[0]):
            overlay_features(feats, node_ids, *own)
        n = batch.size
        rows = {e: local[i * n:(i + 1) * n] for i, e in enumerate(self.cfg["seeds"])}
        batch.subgraph = Subgraph(blocks, node_ids, feats, rows)

    def learnt(self, batch) -> None:
        """The batch was predicted and learnt: its edges enter the graph now."""
        if self.cfg["dst"] and batch.size:
            self._insert(*self.endpoints(batch)[:2])

    def add(self, batch) -> None:
        """What training leaves in the graph store for a (clean) batch, without sampling or
        learning: its source nodes' features and its edges (``streamtrain graph load``)."""
        if batch.size:
            src, dst, _ = self.endpoints(batch)
            self.store_features(batch, src)
            if dst is not None:
                self._insert(src, dst)

    def _insert(self, src, dst) -> None:
        if self.cfg["undirected"]:             # both directions, each edge's in stream order
            src, dst = np.stack([src, dst], axis=1).reshape(-1), np.stack([dst, src], axis=1).reshape(-1)
        self.store.insert(src, dst)

    def stats(self) -> dict:
        """Nodes, edges, mean sampled fanout; the last figures while the store is unreachable."""
        try:
            self._stats = self.store.stats()
        except StoreError:
            pass
        return {**self._stats, "mean_fanout": self.mean_fanout()}

    def close(self) -> None:
        self.store.close()

    def describe(self) -> str:
        return f"graph {self.cfg['src']}-{self.cfg['dst']} fanouts={self.cfg['fanouts']} store {self.store.describe()}"
