"""Embedding lookup per categorical field: ``[B, F, dim]``, one table shared or one per field."""
from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamtrain.errors import ShapeError

from .base import INIT_OPTIONS, Layer, Option, SparseShape, positive, register


@register
class Embedding(Layer):
    """Looks up the rows of every id of every field and pools them within the field.

    A multi-valued field sums (or averages, ``combiner: mean``) its ids' rows, weighted by
    the ids' values when the reader gives them. A missing value gives a zero row. Only the
    rows this batch touches are pulled from the store; the lookup and its gradient are one
    sparse matrix product over the whole batch.
    """

    kind = "embedding"
    options = {
        "dim": Option(8, (int,), check=positive, doc="size of one row"),
        "shared": Option(False, (bool,), doc="one table for all fields (else one per field)"),
        "combiner": Option("sum", (str,), ("sum", "mean"), doc="pooling of a multi-valued field"),
        **INIT_OPTIONS,
    }

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        if not isinstance(shape, SparseShape):
            raise ShapeError(f"layer '{self.name}': input must be a sparse_input layer, got shape {shape}")
        self.fields = shape.fields
        dim = self.opts["dim"]
        if self.opts["shared"]:
            table = self.declare("table", (dim,), table=True).name
            self.table_of = {f: table for f in self.fields}
        else:
            self.table_of = {f: self.declare(f, (dim,), table=True).name for f in self.fields}
        self.tables = list(dict.fromkeys(self.table_of.values()))
        return (len(self.fields), dim)

    def table_ids(self, ctx):
        x = ctx.batch.sparse
        parts: dict[str, list] = {}
        for f in self.fields:
            field = x.get(f)
            if field is not None:
                parts.setdefault(self.table_of[f], []).append(field.ids)
        return {t: np.concatenate(p) if len(p) > 1 else p[0] for t, p in parts.items()}

    def _lookup_matrix(self, ctx, fields: dict) -> tuple[sp.csr_matrix, np.ndarray]:
        """The [F*B, U] matrix (field-major rows) whose product with the pulled rows pools them."""
        bases = {}
        total = 0
        for t in self.tables:
            bases[t] = total
            total += len(ctx.table_ids[t])
        batch_size = ctx.batch.size
        cols, data, indptr = [], [], []
        nnz = 0
        for f in self.fields:
            field = fields[f]
            t = self.table_of[f]
            cols.append(ctx.rows_of(t, field.ids) + bases[t])
            values = field.values if field.values is not None else np.ones(len(field.ids), ctx.dtype)
            if self.opts["combiner"] == "mean":
                counts = np.diff(field.offsets)
                values = values / np.repeat(np.maximum(counts, 1), counts)
            data.append(values.astype(ctx.dtype, copy=False))
            indptr.append(field.offsets[:-1] + nnz)
            nnz += int(field.offsets[-1])
        indptr.append(np.array([nnz], dtype=np.int64))
        matrix = sp.csr_matrix(
            (np.concatenate(data), np.concatenate(cols), np.concatenate(indptr)),
            shape=(len(self.fields) * batch_size, total))
        return matrix, bases

    def forward(self, ctx, xs):
        (fields,) = xs
        matrix, bases = self._lookup_matrix(ctx, fields)
        rows = [ctx.value(t) for t in self.tables]
        table = rows[0] if len(rows) == 1 else np.concatenate(rows)
        pooled = matrix @ table.astype(ctx.dtype, copy=False)           # [F*B, dim]
        ctx.saved[self.name] = matrix
        batch_size, dim = ctx.batch.size, self.opts["dim"]
        out = ctx.buffer((self.name, "out"), (batch_size, len(self.fields), dim))
        out[...] = pooled.reshape(len(self.fields), batch_size, dim).transpose(1, 0, 2)
        return out

    def backward(self, ctx, gy):
        matrix = ctx.saved[self.name]
        dim = self.opts["dim"]
        g = np.ascontiguousarray(gy.transpose(1, 0, 2)).reshape(-1, dim)
        grad_rows = matrix.T @ g                                          # [U_total, dim]
        start = 0
        for t in self.tables:
            n = len(ctx.table_ids[t])
            ctx.add_param_grad(t, grad_rows[start:start + n])
            start += n
        return [None]
