"""Regularising layers: inverted dropout."""
from __future__ import annotations

from .base import Layer, Option, probability, register


@register
class Dropout(Layer):
    """Inverted dropout: while training, zero each entry with probability ``rate`` and scale the
    kept ones by ``1 / (1 - rate)``, so evaluation (``ctx.training`` False) is the identity.

    The mask comes from ``ctx.rng`` (one generator per evaluator), never from the layer.
    """

    kind = "dropout"
    options = {"rate": Option(0.5, (int, float), check=probability, doc="probability of dropping an entry")}

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"options": {"rate": 0.3}, "inputs": [(2, 3)]},
            {"options": {"rate": 0.0}, "tag": "rate0"},
        ], "bad": ("rate", 1.0)}

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        return tuple(shape)

    def forward(self, ctx, xs):
        (x,) = xs
        rate = self.opts["rate"]
        if not ctx.training or rate == 0:
            ctx.saved[self.name] = None
            return x
        keep = ctx.rng.random(x.shape) >= rate
        mask = keep.astype(x.dtype) * x.dtype.type(1.0 / (1.0 - rate))
        ctx.saved[self.name] = mask
        return x * mask

    def backward(self, ctx, gy):
        mask = ctx.saved[self.name]
        return [gy if mask is None else gy * mask]
