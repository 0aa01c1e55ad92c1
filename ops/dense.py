"""Fully connected layer with an activation."""
from __future__ import annotations

import numpy as np

from streamtrain import lazy
from streamtrain.online.terms import Term, bias_grid, index_grid

from .base import INIT_OPTIONS, REQUIRED, Layer, Option, flat_dim, positive, register

ACTIVATIONS = ("identity", "relu", "sigmoid", "tanh")


def activate(kind: str, z: np.ndarray) -> np.ndarray:
    if kind == "identity":
        return z
    if kind == "relu":
        return np.maximum(z, 0)
    if kind == "sigmoid":
        return sigmoid(z)
    if kind == "tanh":
        return np.tanh(z)
    raise ValueError(kind)


def activation_grad(kind: str, y: np.ndarray, gy: np.ndarray) -> np.ndarray:
    """Gradient through the activation, from its output ``y``."""
    if kind == "identity":
        return gy
    if kind == "relu":
        return gy * (y > 0)
    if kind == "sigmoid":
        return gy * y * (1 - y)
    if kind == "tanh":
        return gy * (1 - y * y)
    raise ValueError(kind)


def sigmoid(z: np.ndarray) -> np.ndarray:
    """Overflow-free logistic function: ``1 / (1 + exp(-z))`` for ``z >= 0``, ``exp(z) / (1 +
    exp(z))`` below; ``exp(-|z|)`` is either exponential, so both sides come from one pass."""
    e = np.exp(-np.abs(z))
    d = 1.0 + e
    return np.where(z >= 0, 1.0 / d, e / d)

_kernels = lazy.module("streamtrain.ops._dense_kernels")     # numba: imported by the first batch


@register
class FC(Layer):
    """``y = act(x W + b)`` on the flattened input ``[B, n]`` → ``[B, dim]``."""

    kind = "fc"
    options = {
        "dim": Option(REQUIRED, (int,), check=positive, doc="output size"),
        "activation": Option("identity", (str,), ACTIVATIONS),
        "bias": Option(True, (bool,)),
        **INIT_OPTIONS,
        "init": Option("xavier", (str,), ("zeros", "normal", "uniform", "xavier", "ones")),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            *[{"options": {"dim": 3, "activation": act}, "inputs": [(2, 3)], "tag": act}
              for act in ("identity", "relu", "sigmoid", "tanh")],
            {"options": {"dim": 2, "bias": False, "init": "normal"}, "tag": "nobias-param",
             "extra": {"param": "shared_fc", "optimizer": {"type": "adam", "lr": 0.01}}},
        ], "bad": ("activation", "gelu")}

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        self.n_in = flat_dim(shape)
        dim = self.opts["dim"]
        self._w_name = self.declare("W", (self.n_in, dim)).name
        self._b_name = self.declare("b", (dim,), init="zeros").name if self.opts["bias"] else None
        return (dim,)

    def linear_width(self):
        return self.opts["dim"] if self.opts["activation"] == "identity" else None

    def linear_terms(self, ctx):
        x = ctx.outputs[self.inputs[0]]         # the engine elides this layer's forward pass
        x2 = x.reshape(len(x), -1)
        B, n = x2.shape
        terms = [Term(self._w_name, index_grid(B, n), x2, n)]     # (grids made once per shape)
        if self.opts["bias"]:
            terms.append(Term(self._b_name, *bias_grid(B), 1))
        return terms

    def forward(self, ctx, xs):
        (x,) = xs
        x2 = x.reshape(len(x), -1)
        W = ctx.value(self._w_name)
        # into buffers reused across batches, bias and activation in place: the same numbers
        # as ``act(x2 @ W + b)`` without a temporary per operation
        dtype = x2.dtype if x2.dtype == W.dtype else np.result_type(x2, W)
        z = np.matmul(x2, W, out=ctx.buffer((self.name, "z"), (len(x2), W.shape[1]), dtype))
        b = ctx.value(self._b_name) if self._b_name else None
        act = self.opts["activation"]
        if act == "relu" and len(z) and _compiled(z, b):
            _kernels().bias_relu(z, _EMPTY[z.dtype] if b is None else b, _ZERO_ONE[z.dtype])
            y = z
        else:
            if b is not None:
                z += b
            y = np.maximum(z, 0, out=z) if act == "relu" else activate(act, z)
        ctx.saved[self.name] = (x, x2, y)
        return y

    def backward(self, ctx, gy):
        x, x2, y = ctx.saved[self.name]
        act = self.opts["activation"]
        b_name = self._b_name
        gb = None
        if act == "relu" and len(y) and gy.shape == y.shape and _compiled(y, gy):
            gz = ctx.buffer((self.name, "gz"), y.shape, y.dtype)
            gb = ctx.buffer((self.name, "gb"), (y.shape[1] if b_name else 0,), y.dtype)
            _kernels().relu_backward(y, gy, gz, gb, _ZERO_ONE[y.dtype])
        elif act == "relu":
            gz = gy * (y > 0)
        else:
            gz = activation_grad(act, y, gy)
        W = ctx.value(self._w_name)
        x2t = x2.T
        dtype = gz.dtype if x2t.dtype == gz.dtype else np.result_type(x2t, gz)
        ctx.add_param_grad(self._w_name, np.matmul(x2t, gz, out=ctx.buffer((self.name, "gW"), W.shape, dtype)))
        if b_name:
            if gb is None:            # numpy's row sum, into a buffer kept across batches
                gb = np.sum(gz, axis=0, out=ctx.buffer((self.name, "gb"), (gz.shape[1],), gz.dtype))
            ctx.add_param_grad(b_name, gb)
        if not ctx.needs_grad.get(self.inputs[0], True):
            return [None]
        Wt = W.T
        dtype = gz.dtype if gz.dtype == Wt.dtype else np.result_type(gz, Wt)
        gx = ctx.buffer((self.name, "gx"), (len(gz), Wt.shape[1]), dtype)
        if Wt.shape[0] == 1:            # one output: an outer product (the same products; BLAS is slow at k = 1)
            np.multiply(gz, Wt, out=gx)
        else:
            np.matmul(gz, Wt, out=gx)
        return [gx if gx.shape == x.shape else gx.reshape(x.shape)]


_ZERO_ONE = {np.dtype(t): np.array([0, 1], t) for t in (np.float32, np.float64)}
_EMPTY = {np.dtype(t): np.zeros(0, t) for t in (np.float32, np.float64)}


def _compiled(a: np.ndarray, other: np.ndarray | None) -> bool:
    """Whether the compiled ReLU kernels take ``a`` and ``other`` (a bias or an output gradient):
    C-ordered, of one float dtype."""
    return a.dtype in _ZERO_ONE and a.flags.c_contiguous and (
        other is None or (other.dtype == a.dtype and other.flags.c_contiguous))
