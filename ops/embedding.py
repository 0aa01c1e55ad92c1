"""Embedding lookup per categorical field: ``[B, F, dim]``, one table shared or one per field."""
from __future__ import annotations

import numpy as np

from streamtrain import lazy
from streamtrain.batch import once_per_batch
from streamtrain.errors import ShapeError
from streamtrain.online.terms import Term

from ._field_layout import end_to_end, field_counts, field_slots
from .base import INIT_OPTIONS, SPARSE, Layer, Option, SparseShape, positive, register
from .inputs import memo_fields

_kernels = lazy.module("streamtrain.ops._embedding_kernels")


def _layout_of(fields: list, B: int) -> tuple:
    F = len(fields)
    ids = fields[0].ids if F == 1 else end_to_end([f.ids for f in fields])
    offs = end_to_end([f.offsets for f in fields]).reshape(F, B + 1)
    counts, single = field_counts(offs)          # field-major [F*B]
    valued = any(f.values is not None for f in fields)
    return fields, ids, counts, single, valued


@register
class Embedding(Layer):
    """Looks up the rows of every id of every field and pools them within the field.

    A multi-valued field sums (or averages, ``combiner: mean``) its ids' rows, weighted by
    the ids' values when the reader gives them. A missing value gives a zero row. Only the
    rows this batch touches are pulled from the store. When every field holds at most one id
    per example (the usual case) the lookup and its gradient are one compiled gather and one
    compiled scatter-add (``_embedding_kernels``);
    otherwise both are one sparse-matrix product over the whole batch.
    """

    kind = "embedding"
    options = {
        "dim": Option(8, (int,), check=positive, doc="size of one row"),
        "shared": Option(False, (bool,), doc="one table for all fields (else one per field)"),
        "combiner": Option("sum", (str,), ("sum", "mean"), doc="pooling of a multi-valued field"),
        **INIT_OPTIONS,
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"options": {"dim": 3}, "inputs": [SPARSE], "tag": "per_field-sum"},
            {"options": {"dim": 3, "shared": True}, "inputs": [SPARSE],
             "batch": {"multivalue": ("b", "c"), "values": True}, "tag": "shared-sum-values-multi"},
            {"options": {"dim": 2, "combiner": "mean"}, "inputs": [SPARSE],
             "batch": {"multivalue": ("a",)}, "tag": "per_field-mean-multi"},
            {"options": {"dim": 2, "combiner": "mean", "shared": True}, "inputs": [SPARSE],
             "batch": {"multivalue": ("a", "b"), "values": True, "missing": 0.3}, "tag": "shared-mean-values-multi"},
            {"options": {"dim": 2}, "inputs": [SPARSE],
             "batch": {"multivalue": ("a", "b", "c"), "values": True}, "tag": "per_field-sum-values-multi"},
        ], "bad": ("combiner", "max")}

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        if not isinstance(shape, SparseShape):
            raise ShapeError(f"layer '{self.name}': input must be a sparse_input layer, got shape {shape}")
        self.fields = shape.fields
        self.source = shape.source
        dim = self.opts["dim"]
        if self.opts["shared"]:
            table = self.declare("table", (dim,), table=True).name
            self.table_of = {f: table for f in self.fields}
        else:
            self.table_of = {f: self.declare(f, (dim,), table=True).name for f in self.fields}
        self.tables = list(dict.fromkeys(self.table_of.values()))
        return (len(self.fields), dim)

    def _layout(self, ctx):
        """(fields, all ids field after field, per-(field, example) id counts [F*B], whether no
        field has several ids in an example, whether any field has values), once per batch for
        every embedding layer over the same fields (an LR part and an FM part share it), in the
        parse thread when the batch is prepared ahead."""
        key = ("embedding-layout", self.fields)
        got = ctx.memo.get(key)
        if got is None:
            fields = self.source(ctx, self.fields) if self.source else memo_fields(ctx, self.fields)
            # the same field arrays (another graph's too): the same layout
            got = ctx.memo[key] = once_per_batch(ctx.batch, "embedding-layout", tuple(fields),
                                                 lambda: _layout_of(fields, ctx.batch.size))
        return got

    def _slots(self, ctx):
        """For single-valued data, the batch-major slot of every id (what ``forward`` gathers
        by; a linear part's terms need none), once per batch like the layout."""
        _, _, counts, _, _ = self._layout(ctx)
        return once_per_batch(ctx.batch, "embedding-slots", (counts,), lambda: field_slots(counts, len(self.fields)),
                              fallback=ctx.memo)

    ids_from_batch = True          # the batch's fields, or a feature_cross of them

    def table_ids(self, ctx):
        """Ids per table, field after field: the order of the batch's CSR data (and, for a
        layer that gathers rows by slot, the slots: made here, ahead, with the layout)."""
        fields, ids, _, single, _ = self._layout(ctx)
        if single and not self.is_linear():
            self._slots(ctx)
        if len(self.tables) == 1:
            return {self.tables[0]: ids}
        return {t: field.ids for t, field in zip(self.tables, fields)}

    pools_rows = True

    def linear_width(self):
        return self.opts["dim"]

    def linear_terms(self, ctx):
        return self.field_terms(ctx)

    def field_terms(self, ctx):
        fields, _, counts, single, valued = self._layout(ctx)
        B, F = ctx.batch.size, len(fields)
        weights = self._weights(ctx, fields, counts, valued)
        if single and len(self.tables) == 1:              # single-valued: dense [B, F], by slot
            t = self.tables[0]
            return [Term(t, ctx.table_pos[(self.name, t)], weights, len(ctx.table_ids[t]),
                         field=np.arange(F), present=counts)]
        example = np.repeat(np.tile(np.arange(B), F), counts)
        field = np.repeat(np.repeat(np.arange(F), B), counts)
        x = np.ones(len(example)) if weights is None else weights
        terms, start = [], 0
        for t, ids in self.table_ids(ctx).items():
            n = len(ids)
            part = slice(start, start + n)
            terms.append(Term(t, ctx.table_pos[(self.name, t)], x[part], len(ctx.table_ids[t]),
                              example[part], field[part]))
            start += n
        return terms

    def forward(self, ctx, xs):
        fields, _, counts, single, valued = self._layout(ctx)
        B, F, dim = ctx.batch.size, len(self.fields), self.opts["dim"]
        bases, total = [], 0
        for t in self.tables:
            bases.append(total)
            total += len(ctx.table_ids[t])
        if len(self.tables) == 1:
            pos = ctx.table_pos[(self.name, self.tables[0])]
        else:
            pos = np.concatenate([ctx.table_pos[(self.name, t)] + base for t, base in zip(self.tables, bases)]) \
                if total else np.zeros(0, np.int64)
        rows = [ctx.value(t) for t in self.tables]
        weights = self._weights(ctx, fields, counts, valued)
        if single:
            slot = self._slots(ctx)
            index = np.full(B * F, total, np.int64)                             # missing -> zero row
            index[slot] = pos
            table = rows[0] if len(rows) == 1 else np.concatenate(rows)
            table = table.astype(ctx.dtype, copy=False)
            w = np.zeros(0, ctx.dtype)
            if weights is not None:
                w = np.ones(B * F, ctx.dtype)
                w[slot] = weights
            out = ctx.buffer((self.name, "out"), (B * F, dim))
            _kernels().gather_rows(table, index, w, out)
            ctx.saved[self.name] = ("take", index, w, total)
            return out.reshape(B, F, dim)
        data = weights if weights is not None else np.ones(len(pos), ctx.dtype)
        indptr = np.zeros(F * B + 1, np.int64)
        np.cumsum(counts, out=indptr[1:])
        import scipy.sparse as sp       # only multi-valued fields need it: not paid at start-up
        matrix = sp.csr_matrix((data, pos, indptr), shape=(F * B, total))
        table = rows[0] if len(rows) == 1 else np.concatenate(rows)
        pooled = matrix @ table.astype(ctx.dtype, copy=False)                  # [F*B, dim]
        ctx.saved[self.name] = ("matrix", matrix, None, total)
        out = ctx.buffer((self.name, "out"), (B, F, dim))
        out[...] = pooled.reshape(F, B, dim).transpose(1, 0, 2)
        return out

    def _weights(self, ctx, fields, counts, valued):
        """Per-id multipliers: the reader's values, divided by the field's count for ``mean``."""
        mean = self.opts["combiner"] == "mean" and counts.max(initial=0) > 1
        if not mean and not valued:
            return None
        w = np.concatenate([f.values if f.values is not None else np.ones(len(f.ids), ctx.dtype)
                            for f in fields]).astype(ctx.dtype, copy=False)
        if mean:
            w = w / np.repeat(np.maximum(counts, 1), counts).astype(ctx.dtype)
        return w

    def backward(self, ctx, gy):
        how, a, w, total = ctx.saved[self.name]
        dim = self.opts["dim"]
        squares = any(ctx.wants_squares(t) for t in self.tables)
        sq_rows = None
        if how == "take":
            g = np.ascontiguousarray(gy).reshape(-1, dim)
            grad_rows = ctx.rows((self.name, "grad_rows"), (total, dim))
            sq_rows = ctx.rows((self.name, "sq_rows"), (total if squares else 0, dim))
            _kernels().scatter_rows(a, g, w.astype(g.dtype, copy=False), total, grad_rows, sq_rows)
            sq_rows = sq_rows if squares else None
        else:
            g = np.ascontiguousarray(gy.transpose(1, 0, 2)).reshape(-1, dim)
            grad_rows = a.T @ g
            if squares:      # per (example, field): several ids of one example count once each
                sq_rows = a.multiply(a).T @ (g * g)
        start = 0
        for t in self.tables:
            n = len(ctx.table_ids[t])
            sq = None if sq_rows is None or not ctx.wants_squares(t) else \
                np.asarray(sq_rows[start:start + n], ctx.dtype)
            ctx.add_param_grad(t, grad_rows[start:start + n], sq)
            start += n
        return [None]
