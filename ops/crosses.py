"""Crossed categorical features (the cross-product transformation of Wide & Deep's wide part).

A cross of fields ``a`` and ``b`` is a new categorical field whose value, per example, is
each pair of an ``a`` id with a ``b`` id (a multi-valued field gives every pair); its id is a
stable 64-bit hash of the two ids, so it is its own feature: a wide embedding learns one
weight per (user, genre) or (app, channel) pair, as Vowpal Wabbit's ``-q`` does.
"""
from __future__ import annotations

from itertools import combinations

import numpy as np

from streamtrain.batch import once_per_batch
from streamtrain.errors import ShapeError
from streamtrain.hashing import hash_str, splitmix64

from .base import SPARSE, Layer, Option, SparseShape, register
from .inputs import memo_fields


def cross_field(a, b, salt: np.uint64):
    """The CSR field of every (a id, b id) pair per example; ids hashed with ``salt``."""
    from streamtrain.batch import SparseField
    ca = a.offsets[1:] - a.offsets[:-1]
    cb = b.offsets[1:] - b.offsets[:-1]
    n = ca * cb
    offsets = np.zeros(len(n) + 1, np.int64)
    np.cumsum(n, out=offsets[1:])
    total = int(offsets[-1])
    if total == int((n > 0).sum()):                          # at most one pair per example
        ex = np.flatnonzero(n)
        ia, ib = a.offsets[ex], b.offsets[ex]
    else:
        ex = np.repeat(np.arange(len(n)), n)
        local = np.arange(total) - offsets[ex]
        ia = a.offsets[ex] + local // cb[ex]
        ib = b.offsets[ex] + local % cb[ex]
    with np.errstate(over="ignore"):
        ids = splitmix64(a.ids[ia] ^ splitmix64(b.ids[ib] ^ salt))
    values = None
    if a.values is not None or b.values is not None:
        va = a.values[ia] if a.values is not None else 1.0
        vb = b.values[ib] if b.values is not None else 1.0
        values = (np.asarray(va, np.float32) * np.asarray(vb, np.float32)).astype(np.float32)
    return SparseField(ids, offsets, values)


def _pairs_check(value):
    if value is None:
        return None
    ok = isinstance(value, list) and all(
        isinstance(p, list) and len(p) == 2 and all(isinstance(f, str) for f in p) for p in value)
    return None if ok else f"expected a list of [field, field] pairs or null, got {value!r}"


@register
class FeatureCross(Layer):
    """Sparse in, sparse out: the input's fields (``keep: true``) plus one crossed field per
    pair of fields, named ``<a>_x_<b>``. ``pairs`` lists the pairs; by default every pair of
    the input's fields, at most ``max_fields`` of them (a 26-field stream would give 325
    crosses per example, mostly noise for a linear model)."""

    kind = "feature_cross"
    options = {
        "pairs": Option(None, check=_pairs_check, doc="pairs of fields to cross (default: all pairs)"),
        "keep": Option(True, (bool,), doc="also pass the input's own fields through"),
        "max_fields": Option(8, (int,), check=lambda v: None if v >= 2 else f"must be >= 2, got {v!r}",
                             doc="without pairs: cross all pairs only when the input has at most this many fields"),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [SPARSE]},
            {"options": {"pairs": [["a", "c"]], "keep": False}, "inputs": [SPARSE],
             "batch": {"multivalue": ("a",), "values": True}, "tag": "pairs-multi-values"},
        ], "bad": ("max_fields", 1)}

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        if not isinstance(shape, SparseShape):
            raise ShapeError(f"layer '{self.name}': input must be sparse (a sparse_input), got shape {shape}")
        self.upstream = shape
        fields = list(shape.fields)
        if self.opts["pairs"] is not None:
            pairs = [tuple(p) for p in self.opts["pairs"]]
            missing = sorted({f for p in pairs for f in p} - set(fields))
            if missing:
                raise ShapeError(f"layer '{self.name}': pairs name fields {missing} its input does not "
                                 f"carry (it carries: {', '.join(fields)})")
        elif len(fields) <= self.opts["max_fields"]:
            pairs = list(combinations(fields, 2))
        else:
            pairs = []
        self.pairs = pairs
        self.crossed = {f"{a}_x_{b}": (a, b, np.uint64(hash_str(f"cross:{a}:{b}"))) for a, b in pairs}
        clash = sorted(set(self.crossed) & set(fields))
        if clash:
            raise ShapeError(f"layer '{self.name}': crossed field names {clash} clash with input fields")
        out = (tuple(fields) if self.opts["keep"] else ()) + tuple(self.crossed)
        if not out:
            raise ShapeError(f"layer '{self.name}': no fields out (keep is false and nothing to cross: "
                             f"{len(fields)} fields > max_fields {self.opts['max_fields']})")
        self.out_fields = out
        return SparseShape(out, source=self.fields_of)

    def _upstream(self, ctx, names):
        if self.upstream.source is not None:
            return self.upstream.source(ctx, names)
        return memo_fields(ctx, names)

    def fields_of(self, ctx, names) -> list:
        """The batch's fields of ``names`` (input fields and crosses), computed once per batch."""
        if not self.crossed:                     # nothing crossed (too many fields): a pass-through
            return self._upstream(ctx, names)
        key = ("feature_cross", self.name)
        got = ctx.memo.get(key)
        if got is None:
            got = ctx.memo[key] = {}
        missing = [n for n in names if n not in got]
        if missing:
            wanted = [n for n in missing if n not in self.crossed]
            needed = sorted({f for n in missing if n in self.crossed for f in self.crossed[n][:2]} | set(wanted))
            base = dict(zip(needed, self._upstream(ctx, needed)))
            for n in missing:
                if n in self.crossed:
                    a, b, salt = self.crossed[n]
                    fa, fb = base[a], base[b]       # (an AutoML job's candidates cross the same pairs)
                    got[n] = once_per_batch(ctx.batch, ("cross", int(salt)), (fa, fb),
                                            lambda fa=fa, fb=fb, salt=salt: cross_field(fa, fb, salt))
                else:
                    got[n] = base[n]
        return [got[n] for n in names]

    def forward(self, ctx, xs):
        return dict(zip(self.out_fields, self.fields_of(ctx, self.out_fields)))

    def backward(self, ctx, gy):
        return [None]
