"""Serving (Paddle's Evaluator): many threads predict from one model, each with its own activations."""
from __future__ import annotations

import numpy as np

from .graph import Graph
from .store.base import ParamStore


class Evaluator:
    """Forward-only view of a model. Create one per thread; they share graph and store.

    Unknown ids read as their deterministic initial rows and are not added to the store. A graph
    model's evaluator takes the job's ``graph_input`` (``graphstore.stream.GraphInput``): each
    batch's neighbourhoods are sampled from its graph store, which is never written to.
    """

    def __init__(self, graph: Graph, store: ParamStore, *, dtype=np.float32, graph_input=None):
        self.graph, self.store, self.graph_input = graph, store, graph_input
        self.ctx = graph.context(training=False, dtype=dtype)

    def forward(self, batch) -> np.ndarray:
        g, ctx = self.graph, self.ctx
        if self.graph_input is not None:
            self.graph_input.sample(batch)
        g.feed(ctx, batch)
        dense, tables = g.needs(ctx)
        ctx.values = self.store.pull(dense, tables, create=False)
        g.forward(ctx)
        return ctx.predictions

    predict = forward

    def activation(self, name: str):
        """Output of any named layer for the last batch (computed on demand, once)."""
        return self.graph.forward(self.ctx, upto=name)
