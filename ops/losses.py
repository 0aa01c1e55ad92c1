"""Loss layers. Each writes ``ctx.loss`` (mean per example) and ``ctx.predictions``; its output
is the predictions, so ``activation("<loss>")`` returns what a server would serve."""
from __future__ import annotations

import numpy as np

from .base import Layer, Option, flat_dim, register
from .dense import sigmoid
from streamtrain.errors import ShapeError

REDUCTION = Option("sum", (str,), ("sum", "mean"),
                   doc="gradient of the sum over the batch (online-learning steps) or of the mean")


def _scale(layer, n: int) -> float:
    return 1.0 if layer.opts["reduction"] == "sum" else 1.0 / max(n, 1)


@register
class LogLoss(Layer):
    """Sigmoid cross-entropy on one logit per example; labels in {0, 1}."""

    kind = "logloss"
    is_loss = True
    options = {"reduction": REDUCTION}

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        if flat_dim(shape) != 1:
            raise ShapeError(f"layer '{self.name}': expects one logit per example, got shape {tuple(shape)}")
        return (1,)

    def forward(self, ctx, xs):
        (z,) = xs
        z = z.reshape(-1)
        y = ctx.batch.labels.astype(z.dtype, copy=False)
        p = sigmoid(z)
        # log(1 + exp(-|z|)) + max(z, 0) - y z, stable for any z
        losses = np.logaddexp(0, -np.abs(z)) + np.maximum(z, 0) - y * z
        ctx.loss = float(losses.mean()) if len(z) else 0.0
        ctx.predictions = p
        ctx.saved[self.name] = (xs[0].shape, p, y)
        return p

    def backward(self, ctx, gy):
        shape, p, y = ctx.saved[self.name]
        return [((p - y) * _scale(self, len(p))).reshape(shape)]
