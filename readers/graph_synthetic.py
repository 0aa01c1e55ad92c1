"""A synthetic graph stream with a planted truth (``reader.type: graph``): a stochastic block
model whose community is the label.

``nodes`` nodes, each in one of ``communities`` communities (uniformly), each with fixed noisy
features ``f0..f{D-1}`` = its community's centre (N(0, ``separation``²) per coordinate) plus
N(0, 1) noise. Every record is one edge arriving in time: a node ``node`` drawn uniformly and
a partner ``peer`` from its own community with probability ``intra`` (else from any other),
with ``node``'s features and label = ``node``'s community. Both fields carry the same id for
the same node (``hash_values("node", index)``). The stream depends only on ``seed``; it is
generated in fixed blocks, so it is the same whatever ``batch_size`` is. ``planted`` holds the
communities and centres, so a learner can be graded against them.

Use with ``graph: {"src": "node", "dst": "peer", "features": ["f0", ...]}``.
"""
from __future__ import annotations

import numpy as np

from streamtrain.batch import Batch

from streamtrain.schema import NUMBER, Option, non_negative, positive, with_defaults

from .batching import field_from_column
from .ids import hash_values
from .source import Reader, Source, register

def _probability(v) -> str | None:
    return None if 0 <= v <= 1 else f"expected a probability in [0, 1], got {v!r}"


OPTIONS = {
    "nodes": Option(2000, (int,), check=positive, doc="nodes of the graph"),
    "communities": Option(4, (int,), check=positive, doc="planted communities (the labels 0..k-1)"),
    "features": Option(8, (int,), check=non_negative, doc="noisy numeric node features f0, f1, …"),
    "separation": Option(0.5, NUMBER, check=non_negative, doc="std of the community centres"),
    "intra": Option(0.8, NUMBER, check=_probability, doc="share of edges within a community"),
    "examples": Option(100_000, (int,), check=non_negative, doc="edges (records) in the stream"),
    "seed": Option(0, (int,), doc="the stream depends on this only"),
}
BLOCK = 4096


class GraphStream:
    """The planted graph and the reader over it: ``stream.reader()`` is a reader function."""

    def __init__(self, cfg: dict, batch_size: int = 512):
        self.cfg = c = with_defaults(OPTIONS, {k: v for k, v in cfg.items() if k != "type"})
        self.batch_size = batch_size
        rng = np.random.default_rng([c["seed"], 0])
        n, k = c["nodes"], c["communities"]
        self.community = rng.integers(0, k, n)
        self.centres = rng.normal(0, c["separation"], (k, c["features"]))
        self.node_features = (self.centres[self.community] + rng.standard_normal((n, c["features"]))).astype(np.float32)
        self.members = [np.flatnonzero(self.community == j) for j in range(k)]
        self.ids = hash_values("node", np.arange(n))
        self.feature_names = tuple(f"f{j}" for j in range(c["features"]))

    def describe(self) -> str:
        c = self.cfg
        return (f"graph sbm nodes={c['nodes']} communities={c['communities']} intra={c['intra']} "
                f"features={c['features']} examples={c['examples']} seed={c['seed']}")

    def events(self):
        """Blocks of (node, peer) index arrays, in stream order."""
        c = self.cfg
        total, t, b = c["examples"], 0, 0
        k = c["communities"]
        while t < total:
            size = min(BLOCK, total - t)
            rng = np.random.default_rng([c["seed"], 1, b])
            u = rng.integers(0, c["nodes"], size)
            same = rng.random(size) < c["intra"]
            other = (self.community[u] + rng.integers(1, k, size)) % k
            target = np.where(same, self.community[u], other)
            sizes = np.array([len(m) for m in self.members])
            pick = (rng.random(size) * sizes[target]).astype(np.int64)
            v = _pick(self.members, target, pick)
            loop = u == v                                # no self-loops: the next member instead
            v[loop] = _pick(self.members, target[loop], (pick[loop] + 1) % sizes[target[loop]])
            ok = u != v                                  # (a community of one node has no partner)
            yield u[ok], v[ok]
            t += size
            b += 1

    def batch(self, u: np.ndarray, v: np.ndarray, offset: int) -> Batch:
        ones = np.ones(len(u), bool)
        return Batch(labels=self.community[u].astype(np.float32),
                     sparse={"node": field_from_column(self.ids[u], ones),
                             "peer": field_from_column(self.ids[v], ones)},
                     dense=self.node_features[u], dense_names=self.feature_names,
                     offsets={"graph": offset})

    def reader(self):
        def gen():
            us, vs, done = [], [], 0
            for u, v in self.events():
                us.append(u)
                vs.append(v)
                u, v = np.concatenate(us), np.concatenate(vs)
                while len(u) >= self.batch_size:
                    n = self.batch_size
                    done += n
                    yield self.batch(u[:n], v[:n], done)
                    u, v = u[n:], v[n:]
                us, vs = [u], [v]
            u = np.concatenate(us)
            if len(u):
                yield self.batch(u, np.concatenate(vs), done + len(u))
        return gen


def _pick(members: list, community: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``members[community[i]][index[i]]`` for every i, without a per-row loop."""
    flat = np.concatenate(members)
    starts = np.cumsum([0, *[len(m) for m in members]])[:-1]
    return flat[starts[community] + index]


@register
class GraphReader(Reader):
    """``reader.type: graph``: the stochastic block model stream above."""

    kind = "graph"
    options = OPTIONS

    @classmethod
    def open(cls, cfg, batch_size, malformed):
        stream = GraphStream(cfg, batch_size)
        src = Source(stream.reader(), malformed, stream.describe())
        src.stream = stream
        return src

    @classmethod
    def test_params(cls):
        return {"nodes": 50, "examples": 100}
