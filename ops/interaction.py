"""Feature-intersection layers (Angel): FM / bi-interaction, PNN inner products, DCN cross
network, cosine similarity. FM is a compiled pass over the batch, the others one vectorised
expression each."""
from __future__ import annotations

import numpy as np

from streamtrain import lazy
from streamtrain.errors import ShapeError

from .base import INIT_OPTIONS, Layer, Option, SparseShape, flat_dim, positive, register


def _fields_shape(layer: Layer, shape) -> tuple[int, int]:
    """``(F, d)`` of a ``[B, F, d]`` input (an embedding output), or a ShapeError."""
    if isinstance(shape, SparseShape) or len(shape) != 2:
        got = "sparse" if isinstance(shape, SparseShape) else f"per-example shape {tuple(shape)}"
        raise ShapeError(f"layer '{layer.name}' ({layer.kind}): expects [B, F, d] (an embedding output), got {got}")
    return int(shape[0]), int(shape[1])

_kernels = lazy.module("streamtrain.ops._fm_kernels")


@register
class FM(Layer):
    """FM second order / NFM bi-interaction: ``0.5 * ((Σ_f v_f)² − Σ_f v_f²)``, ``[B, F, d] → [B, d]``;
    with ``reduce: true`` summed over ``d``, ``[B, 1]``: the classic FM pairwise term. Both
    passes are compiled loops (``_fm_kernels``)."""

    kind = "fm"
    options = {"reduce": Option(False, (bool,), doc="sum over d: [B, 1] instead of [B, d]")}

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(4, 3)]},
            {"options": {"reduce": True}, "inputs": [(4, 3)], "tag": "reduce"},
        ], "bad": ("reduce", 1)}

    def build(self, input_shapes, schema):
        _, dim = _fields_shape(self, input_shapes[0])
        return (1,) if self.opts["reduce"] else (dim,)

    def pairwise_input(self):
        return self.inputs[0] if self.opts["reduce"] else None

    def forward(self, ctx, xs):
        (v,) = xs
        v = np.ascontiguousarray(v)
        s = ctx.buffer((self.name, "sum"), (len(v), v.shape[2]), v.dtype)      # [B, d]: Σ_f v_f
        y = ctx.buffer((self.name, "out"), (len(v), 1 if self.opts["reduce"] else v.shape[2]), v.dtype)
        _kernels().fm_forward(v, s, y)
        ctx.saved[self.name] = (v, s)
        return y

    def backward(self, ctx, gy):
        v, s = ctx.saved[self.name]
        # d/dv_f 0.5((Σv)² − Σv²) = Σv − v_f; a reduced output broadcasts over d
        gx = ctx.buffer((self.name, "gx"), v.shape, v.dtype)
        _kernels().fm_backward(v, s, np.ascontiguousarray(gy, v.dtype).reshape(len(v), -1), gx)
        return [gx]


@register
class InnerProduct(Layer):
    """PNN's inner products of every pair of fields, ``[B, F, d] → [B, F(F−1)/2]``, pairs in
    row-major order (0,1), (0,2), …, (1,2), …; one batched Gram matrix, no per-pair loop."""

    kind = "inner_product"
    options = {}

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(4, 3)]},
            {"inputs": [(2, 5)], "tag": "two-fields"},
        ], "bad": None}

    def build(self, input_shapes, schema):
        n_fields, _ = _fields_shape(self, input_shapes[0])
        if n_fields < 2:
            raise ShapeError(f"layer '{self.name}' (inner_product): needs at least 2 fields, got {n_fields}")
        self.pairs = np.triu_indices(n_fields, 1)
        return (len(self.pairs[0]),)

    def forward(self, ctx, xs):
        (v,) = xs
        gram = np.matmul(v, v.transpose(0, 2, 1))                # [B, F, F]
        ctx.saved[self.name] = v
        return gram[:, self.pairs[0], self.pairs[1]]

    def backward(self, ctx, gy):
        v = ctx.saved[self.name]
        n_fields = v.shape[1]
        g = np.zeros((len(v), n_fields, n_fields), v.dtype)
        i, j = self.pairs
        g[:, i, j] = gy
        g[:, j, i] = gy                                          # symmetric: p_ij = v_i·v_j
        return [np.matmul(g, v)]


@register
class Cross(Layer):
    """DCN cross network on the flattened input ``x0`` ``[B, n]``, ``layers`` times:
    ``x_{l+1} = x0 * (x_l · w_l) + b_l + x_l``; parameters ``w`` and ``b`` ``[layers, n]``."""

    kind = "cross"
    options = {
        "layers": Option(3, (int,), check=positive, doc="number of cross layers"),
        **INIT_OPTIONS,
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"options": {"layers": 1}, "inputs": [(5,)], "tag": "1layer"},
            {"options": {"layers": 3, "init_scale": 0.3}, "inputs": [(2, 3)], "tag": "3layers"},
        ], "bad": ("layers", 0)}

    def build(self, input_shapes, schema):
        n = flat_dim(input_shapes[0])
        self.declare("w", (self.opts["layers"], n))
        self.declare("b", (self.opts["layers"], n), init="zeros")
        return (n,)

    def forward(self, ctx, xs):
        (x,) = xs
        x0 = x.reshape(len(x), -1)
        w, b = ctx.value(self.param_name("w")), ctx.value(self.param_name("b"))
        xl, kept = x0, []
        for l in range(len(w)):                                  # over cross layers, not examples
            s = xl @ w[l]                                        # [B]
            kept.append((xl, s))
            xl = x0 * s[:, None] + b[l] + xl
        ctx.saved[self.name] = (x.shape, x0, kept)
        return xl

    def backward(self, ctx, gy):
        shape, x0, kept = ctx.saved[self.name]
        w = ctx.value(self.param_name("w"))
        gw, gb = np.empty_like(w), np.empty_like(w)
        g, gx0 = gy, np.zeros_like(x0)
        for l in reversed(range(len(w))):
            xl, s = kept[l]
            gs = np.einsum("bn,bn->b", g, x0)                    # d/ds_l
            gb[l] = g.sum(axis=0)
            gw[l] = gs @ xl
            gx0 += g * s[:, None]
            g = g + gs[:, None] * w[l]
        ctx.add_param_grad(self.param_name("w"), gw)
        ctx.add_param_grad(self.param_name("b"), gb)
        return [(gx0 + g).reshape(shape)]


@register
class Cosine(Layer):
    """Cosine similarity of two inputs (each flattened to ``[B, d]``), ``[B, 1]``.

    A vector whose squared norm is at most ``eps`` counts as zero: its similarity is 0 and no
    gradient flows through that example. (The cosine has no direction to follow at a zero
    vector; smoothing the norm instead would hand a missing tower a 1/sqrt(eps) gradient.)
    """

    kind = "cosine"
    arity = (2, 2)
    options = {"eps": Option(1e-12, (int, float), check=positive, doc="squared norm below which a vector is zero")}

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(6,), (2, 3)]},
        ], "bad": ("eps", 0)}

    def build(self, input_shapes, schema):
        dims = [flat_dim(s) for s in input_shapes]
        if dims[0] != dims[1]:
            a, b = self.inputs if len(self.inputs) == 2 else ("input0", "input1")
            raise ShapeError(f"layer '{self.name}' (cosine): input '{a}' has {dims[0]} features per example "
                             f"(shape {tuple(input_shapes[0])}) but '{b}' has {dims[1]} (shape {tuple(input_shapes[1])})")
        return (1,)

    def forward(self, ctx, xs):
        a, b = (x.reshape(len(x), -1) for x in xs)
        aa, bb = np.einsum("bd,bd->b", a, a), np.einsum("bd,bd->b", b, b)
        live = (aa > self.opts["eps"]) & (bb > self.opts["eps"])
        inv_a = np.where(live, 1 / np.sqrt(np.where(live, aa, 1)), 0).astype(a.dtype, copy=False)
        inv_b = np.where(live, 1 / np.sqrt(np.where(live, bb, 1)), 0).astype(a.dtype, copy=False)
        y = np.einsum("bd,bd->b", a, b) * inv_a * inv_b
        ctx.saved[self.name] = (xs[0].shape, xs[1].shape, a, b, inv_a, inv_b, y)
        return y[:, None]

    def backward(self, ctx, gy):
        sa, sb, a, b, inv_a, inv_b, y = ctx.saved[self.name]
        g = gy.reshape(-1)
        # dy/da = b / (|a||b|) - y a / |a|²; dead rows have inv_a = inv_b = y = 0
        ga = (g * inv_a * inv_b)[:, None] * b - (g * y * inv_a * inv_a)[:, None] * a
        gb = (g * inv_a * inv_b)[:, None] * a - (g * y * inv_b * inv_b)[:, None] * b
        return [ga.reshape(sa), gb.reshape(sb)]
