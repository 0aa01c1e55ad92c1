"""Where a graph model meets the batch: ``node_input`` (the rows of block 0's source nodes:
embeddings pulled from the parameter store like any embedding rows, plus numeric node
features) and ``seed_rows`` (each example's own node among the innermost block's rows)."""
from __future__ import annotations

import numpy as np

from streamtrain.errors import ShapeError

from .base import INIT_OPTIONS, Layer, Option, flat_dim, non_negative, register
from .graph_conv import expect_rows, subgraph_of


def scatter_rows(index: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """``out[index[i]] += rows[i]`` for an ``[n, d]`` output, in one ``bincount``."""
    d = rows.shape[1]
    flat = (index[:, None] * d + np.arange(d)).reshape(-1)
    return np.bincount(flat, weights=rows.reshape(-1), minlength=n * d).reshape(n, d).astype(rows.dtype)


@register
class NodeInput(Layer):
    """``[num_src of block 0, dim + features]``: a learnt embedding of each node id (``dim`` 0:
    none) followed by the ``features`` numeric features the graph store holds for the node."""

    kind = "node_input"
    reads_blocks = True          # needs the batch's sampled blocks (the job's graph section)
    arity = (0, 0)
    reads_batch = True
    options = {
        "dim": Option(16, (int,), check=non_negative, doc="embedding size (0: features only)"),
        "features": Option(0, (int,), check=non_negative, doc="numeric node features (graph.features)"),
        **INIT_OPTIONS,
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"options": {"dim": 3}, "inputs": [], "batch": {"blocks": 2}},
            {"options": {"dim": 2, "features": 3}, "inputs": [], "batch": {"blocks": 1, "node_features": 3},
             "tag": "features"},
        ], "bad": ("dim", -1)}

    def build(self, input_shapes, schema):
        if self.opts["dim"] + self.opts["features"] == 0:
            raise ShapeError(f"layer '{self.name}': dim and features are both 0: nothing to output")
        if self.opts["dim"]:
            self.table = self.declare("table", (self.opts["dim"],), table=True).name
        return (self.opts["dim"] + self.opts["features"],)

    def table_ids(self, ctx):
        return {self.table: subgraph_of(self, ctx).node_ids} if self.opts["dim"] else {}

    def forward(self, ctx, xs):
        sub = subgraph_of(self, ctx)
        dim, nf = self.opts["dim"], self.opts["features"]
        feats = sub.features
        if nf and (feats.ndim != 2 or feats.shape[1] != nf):
            raise ShapeError(f"layer '{self.name}' (node_input): {nf} node features configured, the "
                             f"graph input gives {feats.shape[1] if feats.ndim == 2 else 0} (graph.features)")
        n = len(sub.node_ids)
        if not dim and feats.dtype == ctx.dtype:
            return feats                                  # features only: no copy
        out = ctx.rows((self.name, "out"), (n, dim + nf))
        if dim:
            pos = ctx.table_pos[(self.name, self.table)]
            out[:, :dim] = ctx.value(self.table)[pos]
            ctx.saved[self.name] = pos
        if nf:
            out[:, dim:] = feats
        return out

    def backward(self, ctx, gy):
        dim = self.opts["dim"]
        if dim:
            pos = ctx.saved[self.name]
            g = np.ascontiguousarray(gy[:, :dim])
            rows = len(ctx.table_ids[self.table])
            squares = scatter_rows(pos, g * g, rows) if ctx.wants_squares(self.table) else None
            ctx.add_param_grad(self.table, scatter_rows(pos, g, rows), squares)
        return []


@register
class SeedRows(Layer):
    """``[B, d]``: for each example, the row of its ``endpoint`` node (a field named in
    ``graph.seeds``) among the destination rows of the innermost block; two examples about the
    same node share its row (and add their gradients into it)."""

    kind = "seed_rows"
    reads_blocks = True          # needs the batch's sampled blocks (the job's graph section)
    options = {
        "endpoint": Option("src", (str,), ("src", "dst"), doc="which endpoint of the example"),
        "block": Option(-1, (int,), doc="the block whose destination rows are the seeds"),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(3,)], "batch": {"blocks": 2}},
            {"options": {"endpoint": "dst"}, "inputs": [(2, 2)], "batch": {"blocks": 1, "endpoints": ("src", "dst")},
             "tag": "dst"},
        ], "bad": ("endpoint", 3)}

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        return (flat_dim(shape),)

    def forward(self, ctx, xs):
        (x,) = xs
        sub = subgraph_of(self, ctx)
        block = sub.block(self.opts["block"], f"layer '{self.name}'")
        expect_rows(self, x, block.num_dst, "destination")
        pos = sub.seeds.get(self.opts["endpoint"])
        if pos is None:
            raise ValueError(f"layer '{self.name}' (seed_rows): endpoint {self.opts['endpoint']!r} is not "
                             f"sampled (graph.seeds gives: {', '.join(sub.seeds) or 'none'})")
        x2 = x.reshape(len(x), -1)
        ctx.saved[self.name] = (pos, x.shape)
        return x2[pos]

    def backward(self, ctx, gy):
        pos, shape = ctx.saved[self.name]
        return [scatter_rows(pos, gy, shape[0]).reshape(shape)]
