"""Message passing over a batch's sampled blocks (GraphSAGE written layer by layer, as in
sam_backend): ``scatter_gather``, ``indegree_norm``, ``partial_linear`` and ``bias_act``.

A block's rows: ``num_src`` source rows, the first ``num_dst`` of them its destination rows.
The GraphSAGE layer is ``partial_linear(h) + linear(indegree_norm(scatter_gather(h)))``, then
``bias_act``; ``h`` feeds two layers and the engine sums their gradients.
"""
from __future__ import annotations

import numpy as np

from streamtrain.errors import ShapeError

from .base import INIT_OPTIONS, REQUIRED, Layer, Option, flat_dim, positive, register
from .dense import ACTIVATIONS, activate, activation_grad

BLOCK = Option(-1, (int,), doc="which sampled block (0 = outermost, -1 = innermost)")


def subgraph_of(layer: Layer, ctx):
    sub = getattr(ctx.batch, "subgraph", None)
    if sub is None:
        raise ValueError(f"layer '{layer.name}' ({layer.kind}): the batch carries no sampled blocks "
                         f"(give the job a 'graph' section naming the endpoint fields)")
    return sub


def block_of(layer: Layer, ctx):
    return subgraph_of(layer, ctx).block(layer.opts["block"], f"layer '{layer.name}'")


def expect_rows(layer: Layer, x, rows: int, what: str) -> None:
    if len(x) != rows:
        raise ShapeError(f"layer '{layer.name}' ({layer.kind}): input has {len(x)} rows, the block has "
                         f"{rows} {what} rows (block {layer.opts['block']})")


def _rowwise(layer: Layer, input_shapes) -> tuple:
    (shape,) = input_shapes
    return (flat_dim(shape),)


@register
class ScatterGather(Layer):
    """Sum (or mean) of the source rows into their destination rows over the block's edges:
    ``[num_src, d] → [num_dst, d]``; a destination without edges gets zeros."""

    kind = "scatter_gather"
    reads_blocks = True          # needs the batch's sampled blocks (the job's graph section)
    options = {"block": BLOCK, "reduce": Option("sum", (str,), ("sum", "mean"), doc="sum or mean of the sources")}

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(4,)], "batch": {"blocks": 2}},
            {"options": {"reduce": "mean", "block": 0}, "inputs": [(2, 3)], "batch": {"blocks": 2}, "tag": "mean"},
        ], "bad": ("reduce", "max")}

    def build(self, input_shapes, schema):
        return _rowwise(self, input_shapes)

    def forward(self, ctx, xs):
        (x,) = xs
        block = block_of(self, ctx)
        expect_rows(self, x, block.num_src, "source")
        x2 = np.ascontiguousarray(x.reshape(len(x), -1))
        scale = None
        if self.opts["reduce"] == "mean":
            deg = block.indegree()
            scale = (1.0 / np.maximum(deg, 1)).astype(ctx.dtype)[:, None]
        out = ctx.rows((self.name, "out"), (block.num_dst, x2.shape[1]), x.dtype)
        from ._graph_kernels import gather_sum     # numba: imported by the first graph model only
        gather_sum(block.indptr(), block.src, x2, out)
        if scale is not None:
            out *= scale
        ctx.saved[self.name] = (block, x.shape, scale)
        return out

    def backward(self, ctx, gy):
        block, shape, scale = ctx.saved[self.name]
        g = np.ascontiguousarray(gy if scale is None else gy * scale)
        gx = ctx.rows((self.name, "gx"), (shape[0], g.shape[1]), g.dtype)
        from ._graph_kernels import scatter_sum
        scatter_sum(block.dst, block.src, g, gx)
        return [gx.reshape(shape)]


@register
class IndegreeNorm(Layer):
    """Each destination row divided by its in-degree in the block; 0 edges → a zero row."""

    kind = "indegree_norm"
    reads_blocks = True          # needs the batch's sampled blocks (the job's graph section)
    options = {"block": BLOCK}

    @classmethod
    def test_params(cls):
        return {"cases": [{"inputs": [(3,)], "batch": {"blocks": 1}}], "bad": ("block", "0")}

    def build(self, input_shapes, schema):
        return _rowwise(self, input_shapes)

    def forward(self, ctx, xs):
        (x,) = xs
        block = block_of(self, ctx)
        expect_rows(self, x, block.num_dst, "destination")
        deg = block.indegree()
        inv = np.divide(1.0, deg, out=np.zeros(len(deg)), where=deg > 0).astype(ctx.dtype)[:, None]
        x2 = x.reshape(len(x), -1)
        out = ctx.rows((self.name, "out"), x2.shape, x.dtype)
        np.multiply(x2, inv, out=out)
        ctx.saved[self.name] = (inv, x.shape)
        return out

    def backward(self, ctx, gy):
        inv, shape = ctx.saved[self.name]
        return [(gy * inv).reshape(shape)]


@register
class PartialLinear(Layer):
    """``x[:num_dst] W`` (+ ``b``): the self term of GraphSAGE on the destination rows, which are
    the first rows of the source tensor, without copying them out. Gradient rows past
    ``num_dst`` are zero."""

    kind = "partial_linear"
    reads_blocks = True          # needs the batch's sampled blocks (the job's graph section)
    options = {
        "dim": Option(REQUIRED, (int,), check=positive, doc="output size"),
        "block": BLOCK,
        "bias": Option(False, (bool,)),
        **INIT_OPTIONS,
        "init": Option("xavier", (str,), ("zeros", "normal", "uniform", "xavier", "ones")),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"options": {"dim": 3}, "inputs": [(4,)], "batch": {"blocks": 2}},
            {"options": {"dim": 2, "bias": True, "block": 0}, "inputs": [(2, 2)], "batch": {"blocks": 2},
             "tag": "bias"},
        ], "bad": ("dim", 0)}

    def build(self, input_shapes, schema):
        (n_in,) = _rowwise(self, input_shapes)
        self.declare("W", (n_in, self.opts["dim"]))
        if self.opts["bias"]:
            self.declare("b", (self.opts["dim"],), init="zeros")
        return (self.opts["dim"],)

    def forward(self, ctx, xs):
        (x,) = xs
        block = block_of(self, ctx)
        expect_rows(self, x, block.num_src, "source")
        xd = x.reshape(len(x), -1)[:block.num_dst]
        out = ctx.rows((self.name, "out"), (block.num_dst, self.opts["dim"]), x.dtype)
        np.matmul(xd, ctx.value(self.param_name("W")), out=out)
        if self.opts["bias"]:
            out += ctx.value(self.param_name("b"))
        ctx.saved[self.name] = (xd, x.shape)
        return out

    def backward(self, ctx, gy):
        xd, shape = ctx.saved[self.name]
        ctx.add_param_grad(self.param_name("W"), xd.T @ gy)
        if self.opts["bias"]:
            ctx.add_param_grad(self.param_name("b"), gy.sum(axis=0))
        if not ctx.input_needs_grad(self)[0]:
            return [None]
        gx = ctx.rows((self.name, "gx"), (shape[0], xd.shape[1]), gy.dtype)
        gx[len(xd):] = 0
        np.matmul(gy, ctx.value(self.param_name("W")).T, out=gx[:len(xd)])
        return [gx.reshape(shape)]


@register
class BiasAct(Layer):
    """``act(x + b)`` row by row, for any number of rows (the ``bias`` kind makes one row per
    example instead): GraphSAGE's bias, optionally with its ReLU."""

    kind = "bias_act"
    options = {
        "activation": Option("identity", (str,), ACTIVATIONS),
        **INIT_OPTIONS,
        "init": Option("zeros", (str,), ("zeros", "normal", "uniform", "xavier", "ones")),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(3,)]}, {"options": {"activation": "relu"}, "inputs": [(2, 2)], "tag": "relu"},
            {"options": {"activation": "tanh"}, "inputs": [(3,)], "tag": "tanh"},
        ], "bad": ("activation", "gelu")}

    def build(self, input_shapes, schema):
        (n,) = _rowwise(self, input_shapes)
        self.declare("b", (n,))
        return (n,)

    def forward(self, ctx, xs):
        (x,) = xs
        x2 = x.reshape(len(x), -1)
        y = activate(self.opts["activation"], x2 + ctx.value(self.param_name("b")))
        ctx.saved[self.name] = (y, x.shape)
        return y

    def backward(self, ctx, gy):
        y, shape = ctx.saved[self.name]
        gz = activation_grad(self.opts["activation"], y, gy)
        ctx.add_param_grad(self.param_name("b"), gz.sum(axis=0))
        return [gz.reshape(shape)]
