"""A synthetic click stream with a planted ground truth, so a learner can be graded.

Field ``f{i}`` takes values ``0..cardinality-1`` drawn Zipf(``zipf``) (value 0 is the most
common); each value's id is ``hash_values("f{i}", str(value))``, the same id a csv file with
that column and value would give. Dense columns ``d{j}`` are N(0, 1). The label is
Bernoulli(sigmoid(logit)) with

    logit = bias + sum_f w_f[value_f] + dense . w_dense  [+ sum_{f<g} <v_f[value_f], v_g[value_g]>]
            (+ the mean weight of the values of each multi-valued field ``m{k}``)

and every planted weight (and latent coordinate, divided by sqrt(fm_dim)) ~ N(0, weight_scale^2).
With ``drift`` > 0 the weights rotate: example t uses cos(drift*t) W_a + sin(drift*t) W_b.

The stream is generated in fixed blocks, so it is the same whatever ``batch_size`` is, and it
depends only on ``seed``. ``truth`` keeps the planted probability of every emitted example:
``truth.auc(start, stop)`` / ``truth.logloss(start, stop)`` grade the planted model itself.
"""
from __future__ import annotations

import math

import numpy as np

from streamtrain.batch import Batch
from streamtrain.progressive import Progressive
from streamtrain.schema import NUMBER, Option, check_options, non_negative, optional, positive, with_defaults
from streamtrain.scores import auc as exact_auc, logloss as exact_logloss

from .batching import field_from_column, field_from_rows
from .files import _Rebatcher
from .ids import hash_values
from .source import Reader, Source, register

def _finite(v) -> str | None:
    return None if math.isfinite(v) else f"expected a finite number, got {v!r}"


def _cardinality(v) -> str | None:
    ok = (isinstance(v, int) and not isinstance(v, bool) and v >= 1) or (
        isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v))
    return None if ok else f"expected an integer >= 1 or a list of them, got {v!r}"


OPTIONS = {
    "fields": Option(8, (int,), check=non_negative, doc="categorical fields f0, f1, …"),
    "cardinality": Option(1000, (int, list), check=_cardinality, doc="values per field (or one per field)"),
    "zipf": Option(1.1, NUMBER, check=non_negative, doc="Zipf exponent of the values' frequencies"),
    "dense": Option(4, (int,), check=non_negative, doc="dense columns d0, d1, …"),
    "model": Option("lr", (str,), ("lr", "fm"), doc="the planted model"),
    "fm_dim": Option(4, (int,), check=positive, doc="latent size of the planted FM"),
    "weight_scale": Option(1.0, NUMBER, check=_finite, doc="std of the planted weights"),
    "bias": Option(-1.0, NUMBER, check=_finite, doc="planted bias"),
    "drift": Option(0.0, NUMBER, check=_finite, doc="rotation of the weights per example"),
    "examples": Option(None, (int, type(None)), check=optional(non_negative),
                       doc="stop after this many (null = endless)"),
    "seed": Option(0, (int,), doc="the stream depends on this only"),
    "multivalue": Option(0, (int,), check=non_negative, doc="multi-valued fields m0, m1, …"),
    "multivalue_max": Option(4, (int,), check=positive, doc="most values of a multi-valued field"),
}
BLOCK = 4096


class SyntheticTruth:
    """The planted probabilities and labels of the examples emitted since the last reset.

    The last ``keep`` examples are kept exactly (``arrays``/``auc``/``logloss`` over an index
    range inside them); all-time figures come from constant-size histograms, so an endless
    stream does not grow memory.
    """

    KEEP = 1 << 20

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self.reset()

    def reset(self) -> None:
        self._p, self._y = [], []
        self._first = 0        # absolute index of the first kept example
        self._stored = 0       # examples recorded (may run ahead of n by one block)
        self._counted = 0      # examples folded into the all-time histograms
        self._total = Progressive()
        self.n = 0             # examples emitted

    def _record(self, p: np.ndarray, y: np.ndarray) -> None:
        self._p.append(p.astype(np.float64))
        self._y.append(y.astype(np.float64))
        self._stored += len(p)
        self._fold()
        while len(self._p) > 1 and self._stored - self._first - len(self._p[0]) >= self.keep \
                and self._first + len(self._p[0]) <= self._counted:
            self._first += len(self._p.pop(0))
            self._y.pop(0)

    def _fold(self) -> None:
        """Add the emitted examples not yet counted to the all-time histograms."""
        if self._counted < self.n:
            p, y = self._slice(self._counted, self.n)
            self._total.update(y, p)
            self._counted = self.n

    def _slice(self, start: int, stop: int):
        """Examples ``start:stop`` (absolute) from the kept chunks, without merging them."""
        ps, ys, base = [], [], self._first
        for p, y in zip(self._p, self._y):
            a, b = max(start - base, 0), min(stop - base, len(p))
            if a < b:
                ps.append(p[a:b])
                ys.append(y[a:b])
            base += len(p)
        if not ps:
            return np.zeros(0), np.zeros(0)
        return (ps[0], ys[0]) if len(ps) == 1 else (np.concatenate(ps), np.concatenate(ys))

    def arrays(self, start: int | None = None, stop: int | None = None):
        """(planted probability, label) of emitted examples ``start:stop`` (0 = first emitted)."""
        start, stop, _ = slice(start, stop).indices(self.n)
        if start < self._first:
            raise ValueError(f"the synthetic truth keeps only the last {self.keep} examples "
                             f"(from #{self._first}); asked from #{start}")
        return self._slice(start, max(start, stop))

    def auc(self, start: int | None = None, stop: int | None = None) -> float:
        if start is None and stop is None and self._first > 0:
            self._fold()
            return self._total.auc
        return exact_auc(*reversed(self.arrays(start, stop)))

    def logloss(self, start: int | None = None, stop: int | None = None) -> float:
        if start is None and stop is None and self._first > 0:
            self._fold()
            return self._total.logloss
        return exact_logloss(*reversed(self.arrays(start, stop)))


class SyntheticStream:
    """The planted model and the reader over it: ``stream.reader()`` is a reader function."""

    def __init__(self, cfg: dict, batch_size: int = 1024):
        self.cfg = with_defaults(OPTIONS, {k: v for k, v in cfg.items() if k != "type"})
        self.batch_size = batch_size
        c = self.cfg
        n = c["fields"]
        card = c["cardinality"]
        self.cards = list(card) if isinstance(card, list) else [card] * n
        self.names = [f"f{i}" for i in range(n)]
        self.mv_names = [f"m{k}" for k in range(c["multivalue"])]
        self.mv_card = max(self.cards) if self.cards else 1000
        self.dense_names = tuple(f"d{j}" for j in range(c["dense"]))
        rng = np.random.default_rng([c["seed"], 0])
        s, fm = c["weight_scale"], c["model"] == "fm"
        k = c["fm_dim"]
        cards = self.cards + [self.mv_card] * len(self.mv_names)
        # two weight sets (a, b) for drift; b is only used when drift != 0
        self.w = [[rng.normal(0, s, size=m) for m in cards] for _ in range(2)]
        self.wd = [rng.normal(0, s, size=c["dense"]) for _ in range(2)]
        self.v = [[rng.normal(0, s / math.sqrt(k), size=(m, k)) for m in self.cards]
                  for _ in range(2)] if fm else None
        self.cdfs = {m: _zipf_cdf(m, c["zipf"]) for m in set(cards)}
        self.ids = [hash_values(name, np.arange(m)) for name, m in
                    zip(self.names + self.mv_names, cards)]
        self.truth = SyntheticTruth()

    def describe(self) -> str:
        c = self.cfg
        return (f"synthetic {c['model']} fields={c['fields']} dense={c['dense']} "
                f"zipf={c['zipf']} drift={c['drift']} seed={c['seed']} "
                f"examples={c['examples'] if c['examples'] is not None else 'inf'}")

    def _block(self, rng, t0: int, size: int):
        """One block: (Batch, planted probability)."""
        c = self.cfg
        values = [np.searchsorted(self.cdfs[m], rng.random(size), side="right")
                  for m in self.cards]
        dense = rng.standard_normal((size, c["dense"]))
        mv = []
        for _ in self.mv_names:
            counts = rng.integers(1, c["multivalue_max"] + 1, size=size)
            vals = np.searchsorted(self.cdfs[self.mv_card], rng.random(counts.sum()), side="right")
            mv.append((counts, vals))
        u = rng.random(size)
        logit = np.full(size, float(c["bias"]))
        sets = (0, 1) if c["drift"] else (0,)
        angle = c["drift"] * (t0 + np.arange(size))
        mix = {0: np.cos(angle) if c["drift"] else 1.0, 1: np.sin(angle)}
        for a in sets:
            part = dense @ self.wd[a]
            for f, vals in enumerate(values):
                part += self.w[a][f][vals]
            for k, (counts, vals) in enumerate(mv):
                rows = np.repeat(np.arange(size), counts)
                part += np.bincount(rows, self.w[a][len(values) + k][vals], size) / counts
            logit += mix[a] * part
        if self.v is not None and values:
            vecs = []                                   # each field's latent vector, per example
            for f, vals in enumerate(values):
                vf = self.v[0][f][vals]
                if c["drift"]:
                    vf = mix[0][:, None] * vf + mix[1][:, None] * self.v[1][f][vals]
                vecs.append(vf)
            vsum, vsq = sum(vecs), sum(v * v for v in vecs)
            logit += 0.5 * ((vsum ** 2).sum(axis=1) - vsq.sum(axis=1))
        p = 1.0 / (1.0 + np.exp(-logit))
        labels = (u < p).astype(np.float32)
        sparse = {name: field_from_column(self.ids[f][vals], np.ones(size, bool))
                  for f, (name, vals) in enumerate(zip(self.names, values))}
        for k, (name, (counts, vals)) in enumerate(zip(self.mv_names, mv)):
            sparse[name] = field_from_rows(self.ids[len(values) + k][vals],
                                           np.repeat(np.arange(size), counts), size)
        batch = Batch(labels=labels, sparse=sparse, dense=dense.astype(np.float32),
                      dense_names=self.dense_names)
        return batch, p

    def reader(self):
        """A reader function; every call restarts the same stream and resets ``truth``."""
        def gen():
            self.truth.reset()
            rng = np.random.default_rng([self.cfg["seed"], 1])
            total = self.cfg["examples"]
            out = _Rebatcher(self.batch_size)
            t = 0
            while total is None or t < total:
                size = BLOCK if total is None else min(BLOCK, total - t)
                batch, p = self._block(rng, t, size)
                self.truth._record(p, batch.labels)
                out.add(batch)
                t += size
                while out.rows >= self.batch_size:
                    yield self._emit(out, self.batch_size)
            if out.rows:
                yield self._emit(out, out.rows)
        return gen

    def _emit(self, out, n):
        batch = out.take(n, {"synthetic": self.truth.n + n})
        self.truth.n += n
        return batch


def _zipf_cdf(m: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, m + 1, dtype=np.float64) ** s
    cdf = np.cumsum(w)
    cdf /= cdf[-1]
    cdf[-1] = 1.0 + 1e-12   # rng.random() < 1, so searchsorted never returns m
    return cdf


@register
class SyntheticReader(Reader):
    """``reader.type: synthetic``: the stream above, with its planted model."""

    kind = "synthetic"
    options = OPTIONS

    @classmethod
    def check_config(cls, cfg):
        problems = check_options(OPTIONS, cfg, what="reader type 'synthetic'")
        c = with_defaults(OPTIONS, cfg)
        if isinstance(c["cardinality"], list) and isinstance(c["fields"], int) and len(c["cardinality"]) != c["fields"]:
            problems.append(("cardinality", f"expected one integer >= 1 per field ({c['fields']}), "
                                            f"got {len(c['cardinality'])}"))
        return problems

    @classmethod
    def open(cls, cfg, batch_size, malformed):
        stream = SyntheticStream(cfg, batch_size)
        src = Source(stream.reader(), malformed, stream.describe())
        src.truth = stream.truth
        src.stream = stream
        return src

    @classmethod
    def test_params(cls):
        return {"fields": 3, "cardinality": 50, "examples": 100}
