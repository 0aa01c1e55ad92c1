"""Layers that join several inputs: ``concat`` (flatten and join) and ``add`` (elementwise sum)."""
from __future__ import annotations

import numpy as np

from streamtrain.errors import ShapeError

from .base import Layer, SparseShape, flat_dim, register


def _dense_shape(layer: Layer, src: str, shape) -> tuple:
    if isinstance(shape, SparseShape):
        raise ShapeError(f"layer '{layer.name}': input '{src}' is sparse (fields {list(shape.fields)}); "
                         f"put an embedding layer in between")
    return tuple(shape)


@register
class Concat(Layer):
    """Each input flattened to ``[B, -1]``, joined on axis 1: ``[B, sum of sizes]``."""

    kind = "concat"
    arity = (1, None)
    options = {}

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(2, 3), (4,), (1,)]},
            {"inputs": [(3, 2)], "tag": "one-input"},
        ], "bad": None}

    def build(self, input_shapes, schema):
        names = self.inputs or [f"input{i}" for i in range(len(input_shapes))]
        dims = [flat_dim(_dense_shape(self, n, s)) for n, s in zip(names, input_shapes)]
        self.bounds = np.cumsum([0, *dims])
        return (int(self.bounds[-1]),)

    def forward(self, ctx, xs):
        batch_size = len(xs[0])
        out = ctx.buffer((self.name, "out"), (batch_size, int(self.bounds[-1])), xs[0].dtype)
        for i, x in enumerate(xs):
            out[:, self.bounds[i]:self.bounds[i + 1]] = x.reshape(batch_size, -1)
        ctx.saved[self.name] = [x.shape for x in xs]
        return out

    def backward(self, ctx, gy):
        shapes = ctx.saved[self.name]
        return [gy[:, self.bounds[i]:self.bounds[i + 1]].reshape(shape) for i, shape in enumerate(shapes)]


@register
class Add(Layer):
    """Elementwise sum of one or more inputs of identical shape (e.g. wide + FM + deep logits)."""

    kind = "add"
    arity = (1, None)
    options = {}

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(2,), (2,), (2,)]},
            {"inputs": [(3, 2)], "tag": "one-input"},
        ], "bad": None}

    def build(self, input_shapes, schema):
        names = self.inputs or [f"input{i}" for i in range(len(input_shapes))]
        first = _dense_shape(self, names[0], input_shapes[0])
        for name, shape in zip(names[1:], input_shapes[1:]):
            if _dense_shape(self, name, shape) != first:
                raise ShapeError(f"layer '{self.name}': cannot add input '{name}' of shape {tuple(shape)} "
                                 f"to input '{names[0]}' of shape {first}")
        return first

    def forward(self, ctx, xs):
        out = ctx.buffer((self.name, "out"), xs[0].shape, xs[0].dtype)
        np.copyto(out, xs[0])
        for x in xs[1:]:
            out += x
        ctx.saved[self.name] = len(xs)
        return out

    def backward(self, ctx, gy):
        return [gy] * ctx.saved[self.name]
