"""A free-standing bias: one trainable scalar per output unit, broadcast over the batch."""
from __future__ import annotations

import numpy as np

from streamtrain.online.terms import Term, bias_grid

from .base import INIT_OPTIONS, Layer, Option, positive, register


@register
class Bias(Layer):
    """No inputs; ``[B, dim]`` whose every row is the parameter ``b`` (shape ``[dim]``).

    Add it to a logit to give the global bias (the base rate) its own parameter and its own
    optimizer, apart from the weights of the numeric fields: on a rare-positive stream the bias
    must travel far (logit −6 at 0.25 % positives) and wants a larger step than those weights.
    """

    kind = "bias"
    arity = (0, 0)
    options = {
        "dim": Option(1, (int,), check=positive, doc="output size"),
        **INIT_OPTIONS,
        "init": Option("zeros", (str,), ("zeros", "normal", "uniform", "xavier", "ones")),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": []},
            {"options": {"dim": 3, "init": "normal", "init_scale": 0.5}, "inputs": [],
             "extra": {"optimizer": {"type": "adagrad", "lr": 0.5}}, "tag": "dim3-optimizer"},
        ], "bad": ("dim", 0)}

    def build(self, input_shapes, schema):
        self.declare("b", (self.opts["dim"],))
        return (self.opts["dim"],)

    def linear_width(self):
        return self.opts["dim"]

    def linear_terms(self, ctx):
        return [Term(self.param_name("b"), *bias_grid(ctx.batch.size), 1)]     # (made once per size)

    def forward(self, ctx, xs):
        b = ctx.value(self.param_name("b"))
        n = ctx.batch.size
        out = ctx.buffer((self.name, "out"), (n, self.opts["dim"]), b.dtype)
        out[...] = b
        return out

    def backward(self, ctx, gy):
        ctx.add_param_grad(self.param_name("b"), np.asarray(gy).sum(axis=0))
        return []
