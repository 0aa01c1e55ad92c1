"""Input layers: they read the batch and have no inputs of their own."""
from __future__ import annotations

import numpy as np

from streamtrain.errors import ShapeError

from .base import Layer, Option, SparseShape, register


def batch_fields(batch, names) -> list:
    """The batch's CSR field of each name; a field absent from this batch reads as missing in
    every example (one shared empty field)."""
    from streamtrain.batch import SparseField
    empty = None
    out = []
    for name in names:
        field = batch.sparse.get(name)
        if field is None:
            if empty is None:
                empty = SparseField(np.zeros(0, np.uint64), np.zeros(batch.size + 1, np.int64))
            field = empty
        out.append(field)
    return out


def memo_fields(ctx, names) -> list:
    """``batch_fields`` of the context's batch, once per batch for each tuple of names (kept in
    ``ctx.memo``: a batch prepared ahead brings the embeddings' from the parse thread, and the
    step's sparse input and feature cross take them from there)."""
    key = ("batch-fields", tuple(names))
    got = ctx.memo.get(key)
    if got is None:
        got = ctx.memo[key] = batch_fields(ctx.batch, names)
    return got


def _field_list(value):
    if value is None:
        return None
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return None
    return f"expected a list of field names or null, got {value!r}"


@register
class SparseInput(Layer):
    """Categorical fields of the batch in CSR form: every field the reader reports, or ``fields``.

    The output is a dict ``{field: SparseField}``; embedding layers consume it.
    """

    kind = "sparse_input"
    arity = (0, 0)
    reads_batch = True
    options = {
        "fields": Option(None, check=_field_list, doc="categorical fields to take (default: all)"),
        "exclude": Option([], (list,), doc="categorical fields to leave out"),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": []},
            {"options": {"fields": ["a", "c"]}, "inputs": [], "tag": "fields"},
            {"options": {"exclude": ["b"]}, "inputs": [], "tag": "exclude"},
        ], "bad": ("fields", "a")}

    def build(self, input_shapes, schema):
        fields = self.opts["fields"] if self.opts["fields"] is not None else list(schema.sparse)
        missing = [f for f in fields if f not in schema.sparse]
        if missing:
            raise ShapeError(f"layer '{self.name}': fields {missing} are not in the data "
                             f"(the reader reports: {', '.join(schema.sparse) or 'none'})")
        fields = [f for f in fields if f not in self.opts["exclude"]]
        if not fields:
            dense = ", ".join(schema.dense) or "none"
            raise ShapeError(f"layer '{self.name}': no categorical fields to read: the stream has "
                             f"{'none' if not schema.sparse else 'only excluded ones'} (its numeric columns: {dense}); "
                             f"this model needs at least one (a column listed in reader.numeric is not one)")
        self.fields = tuple(fields)
        return SparseShape(self.fields)

    def forward(self, ctx, xs):
        return dict(zip(self.fields, memo_fields(ctx, self.fields)))

    def backward(self, ctx, gy):
        return []


@register
class DenseInput(Layer):
    """Numeric features of the batch, ``[B, D]``: every numeric field, or ``fields``."""

    kind = "dense_input"
    arity = (0, 0)
    reads_batch = True
    options = {
        "fields": Option(None, check=_field_list, doc="numeric fields to take (default: all)"),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": []},
            {"options": {"fields": ["d2", "d0"]}, "inputs": [], "tag": "fields"},
        ], "bad": ("fields", ["d0", 3])}

    def build(self, input_shapes, schema):
        fields = self.opts["fields"]
        if fields is None:
            self.columns = None
            return (len(schema.dense),)
        missing = [f for f in fields if f not in schema.dense]
        if missing:
            raise ShapeError(f"layer '{self.name}': fields {missing} are not in the data "
                             f"(the reader reports: {', '.join(schema.dense) or 'none'})")
        self.columns = np.array([schema.dense.index(f) for f in fields], dtype=np.int64)
        return (len(fields),)

    def forward(self, ctx, xs):
        dense = ctx.batch.dense
        if self.columns is not None:
            dense = dense[:, self.columns]
        return dense.astype(ctx.dtype, copy=False)

    def backward(self, ctx, gy):
        return []
