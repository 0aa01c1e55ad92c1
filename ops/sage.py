"""One GraphSAGE layer as one config entry (``sage``), made of the layer-by-layer kinds.

``y = dropout(act(x[:num_dst] W_self + agg(x) W_neigh + b))`` over block ``block``, where
``agg`` is ``indegree_norm(scatter_gather(x))`` (``aggregator: mean``) or ``scatter_gather(x)``
(``sum``). The layer holds one instance of each primitive kind (``partial_linear``,
``scatter_gather``, ``indegree_norm``, ``fc``, ``add``, ``bias_act``, ``dropout``) and runs
their ``forward`` / ``backward`` in the order the engine runs the twelve-entry form, so both
give the same numbers bit for bit (``tests/test_gnn_sage.py``). Its parameters are
``<name>.self.W``, ``<name>.neigh.W`` and ``<name>.b``: the names the layer-by-layer form has
when its layers are called ``<name>.self``, ``<name>.neigh`` and ``<name>``.
"""
from __future__ import annotations

import numpy as np

from .base import INIT_OPTIONS, REQUIRED, Layer, Option, positive, register
from .combine import Add
from .dense import ACTIVATIONS, FC
from .graph_conv import BLOCK, BiasAct, IndegreeNorm, PartialLinear, ScatterGather, _rowwise
from .regularize import Dropout

WEIGHT_INITS = ("zeros", "normal", "uniform", "xavier", "ones")


@register
class Sage(Layer):
    """A GraphSAGE layer over one sampled block: ``[num_src, d] → [num_dst, dim]``."""

    kind = "sage"
    reads_blocks = True          # needs the batch's sampled blocks (the job's graph section)
    options = {
        "dim": Option(REQUIRED, (int,), check=positive, doc="output size"),
        "aggregator": Option("mean", (str,), ("mean", "sum"), doc="how the neighbours' rows combine"),
        "activation": Option("identity", (str,), ACTIVATIONS),
        "dropout": Option(0.0, (int, float), check=Dropout.options["rate"].check,
                          doc="dropout rate on the output, while training"),
        "block": BLOCK,
        **INIT_OPTIONS,
        "init": Option("xavier", (str,), WEIGHT_INITS, doc="initializer of the two weight matrices"),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"options": {"dim": 3}, "inputs": [(4,)], "batch": {"blocks": 2}},
            {"options": {"dim": 2, "aggregator": "sum", "activation": "tanh", "block": 0}, "inputs": [(2, 2)],
             "batch": {"blocks": 2}, "tag": "sum-tanh"},
            {"options": {"dim": 3, "activation": "relu", "dropout": 0.3}, "inputs": [(3,)],
             "batch": {"blocks": 1}, "extra": {"param": "shared_sage"}, "tag": "relu-dropout-param"},
        ], "bad": ("dim", 0)}

    def __init__(self, name: str, inputs=(), **config):
        super().__init__(name, inputs, **config)
        o, base, src = self.opts, self.param or self.name, self.inputs[:1]
        weights = {"dim": o["dim"], "init": o["init"], "init_scale": o["init_scale"]}
        shared = {"optimizer": self.optimizer}
        # every part reads the sage layer's input: it asks whether a gradient must flow into it
        self.parts = {
            "self": PartialLinear(f"{name}/self", src, param=f"{base}.self", block=o["block"], **weights, **shared),
            "agg": ScatterGather(f"{name}/agg", src, block=o["block"]),
            "norm": IndegreeNorm(f"{name}/norm", src, block=o["block"]),
            "neigh": FC(f"{name}/neigh", src, param=f"{base}.neigh", bias=False, **weights, **shared),
            "add": Add(f"{name}/add", src * 2),
            "act": BiasAct(f"{name}/act", src, param=base, activation=o["activation"], **shared),
            "drop": Dropout(f"{name}/drop", src, rate=o["dropout"]),
        }

    def build(self, input_shapes, schema):
        p = self.parts
        x = _rowwise(self, input_shapes)
        own = p["self"].build([x], schema)
        h = p["norm"].build([p["agg"].build([x], schema)], schema)
        neigh = p["neigh"].build([h], schema)
        out = p["drop"].build([p["act"].build([p["add"].build([own, neigh], schema)], schema)], schema)
        self.params = {"self.W": p["self"].params["W"], "neigh.W": p["neigh"].params["W"], "b": p["act"].params["b"]}
        return out

    def forward(self, ctx, xs):
        (x,) = xs
        p = self.parts
        own = p["self"].forward(ctx, [x])
        h = p["agg"].forward(ctx, [x])
        if self.opts["aggregator"] == "mean":
            h = p["norm"].forward(ctx, [h])
        y = p["act"].forward(ctx, [p["add"].forward(ctx, [own, p["neigh"].forward(ctx, [h])])])
        return p["drop"].forward(ctx, [y]) if self.opts["dropout"] else y

    def backward(self, ctx, gy):
        p = self.parts
        if self.opts["dropout"]:
            (gy,) = p["drop"].backward(ctx, gy)
        (gz,) = p["act"].backward(ctx, gy)
        g_own, g_neigh = p["add"].backward(ctx, gz)
        (gx,) = p["self"].backward(ctx, g_own)
        (gh,) = p["neigh"].backward(ctx, g_neigh)
        if gx is None:               # the input needs no gradient (nothing learnt upstream)
            return [None]
        if self.opts["aggregator"] == "mean":
            (gh,) = p["norm"].backward(ctx, gh)
        (g_agg,) = p["agg"].backward(ctx, gh)
        out = ctx.rows((self.name, "gx"), gx.shape, gx.dtype)
        np.add(gx, g_agg, out=out)   # what the engine does for an input two layers consume
        return [out]
