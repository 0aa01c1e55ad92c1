"""Pooling over one per-example axis: ``sum_pooling`` and ``mean_pooling``.

``axis`` counts the batch axis as 0, as numpy does on the batch array; the default 1 pools the
field axis of an embedding output, ``[B, F, d] → [B, d]``. When nothing but the batch axis
would be left (``[B, n] → [B]``) the output keeps one column, ``[B, 1]``, so a sum-pooled
``dim: 1`` embedding or a pooled vector is a logit a loss layer accepts.
"""
from __future__ import annotations

import numpy as np

from streamtrain.errors import ShapeError

from .base import Layer, Option, SparseShape, register


def _axis_check(value) -> str | None:
    return None if value >= 1 else f"must be >= 1 (axis 0 is the batch), got {value!r}"


class _Pooling(Layer):
    mean = False
    options = {"axis": Option(1, (int,), check=_axis_check, doc="per-example axis to pool (batch is 0)")}

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        axis = self.opts["axis"]
        if isinstance(shape, SparseShape) or axis > len(shape):
            got = "sparse" if isinstance(shape, SparseShape) else f"per-example shape {tuple(shape)}"
            raise ShapeError(f"layer '{self.name}': cannot pool axis {axis} of its input ({got})")
        out = tuple(shape[:axis - 1]) + tuple(shape[axis:])
        return out or (1,)

    def forward(self, ctx, xs):
        (x,) = xs
        axis = self.opts["axis"]
        y = x.sum(axis=axis)
        if self.mean:
            y *= x.dtype.type(1.0 / x.shape[axis])
        ctx.saved[self.name] = x.shape
        return y.reshape(len(x), -1) if y.ndim == 1 else y

    def backward(self, ctx, gy):
        shape = ctx.saved[self.name]
        axis = self.opts["axis"]
        g = gy.reshape(shape[:axis] + (1,) + shape[axis + 1:])
        if self.mean:
            g = g * g.dtype.type(1.0 / shape[axis])
        return [np.broadcast_to(g, shape)]


@register
class SumPooling(_Pooling):
    """Sum over ``axis``: ``[B, F, d] → [B, d]``; ``[B, n] → [B, 1]``."""

    kind = "sum_pooling"

    @classmethod
    def test_params(cls):
        return {"cases": [{"inputs": [(4, 3)]}, {"inputs": [(5,)], "tag": "vector"}], "bad": ("axis", 0)}


@register
class MeanPooling(_Pooling):
    """Mean over ``axis`` (a missing field's zero row counts): ``[B, F, d] → [B, d]``."""

    kind = "mean_pooling"
    mean = True

    @classmethod
    def test_params(cls):
        return {"cases": [{"inputs": [(4, 3)]}, {"options": {"axis": 2}, "inputs": [(4, 3)], "tag": "axis2"}],
                "bad": ("axis", "1")}
