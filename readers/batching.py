"""Building, slicing and joining ``Batch`` objects without per-row Python work."""
from __future__ import annotations

import numpy as np

from streamtrain.batch import Batch, SparseField
from streamtrain.compiled import njit


def offsets_from_counts(counts: np.ndarray) -> np.ndarray:
    out = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts.view(np.uint8) if counts.dtype == bool else counts, out=out[1:])
    return out


def field_from_column(ids: np.ndarray, present: np.ndarray) -> SparseField:
    """A one-value-per-row field from a column of ids; rows where ``present`` is False are empty."""
    if present.all():
        return SparseField(np.ascontiguousarray(ids, dtype=np.uint64),
                           np.arange(len(ids) + 1, dtype=np.int64))
    return SparseField(ids[present].astype(np.uint64), offsets_from_counts(present))


@njit(nogil=True)
def _csr_columns(ids, present, cuts):
    """Field-major ids and per-field offsets of the row ranges ``cuts[b]:cuts[b+1]``: range b's
    offsets of field j are ``offsets[j, cuts[b] + b: cuts[b + 1] + b + 1]`` (from 0), its ids
    ``flat[ends[b, j] - count: ends[b, j]]``, in order b, j."""
    n_fields = ids.shape[0]
    n_cuts = len(cuts) - 1
    offsets = np.empty((n_fields, ids.shape[1] + n_cuts), np.int64)
    ends = np.empty((n_cuts, n_fields), np.int64)
    total = 0
    for b in range(n_cuts):
        for j in range(n_fields):
            offsets[j, cuts[b] + b] = 0
            c = 0
            for r in range(cuts[b], cuts[b + 1]):
                c += present[j, r]
                offsets[j, r + b + 1] = c
            total += c
            ends[b, j] = total
    flat = np.empty(total + 1, ids.dtype)      # branch-free: every id is written, and kept
    k = 0                                      # (k moves on) only where present
    for b in range(n_cuts):
        for j in range(n_fields):
            for r in range(cuts[b], cuts[b + 1]):
                flat[k] = ids[j, r]
                k += present[j, r]
    return flat[:total], offsets, ends


def fields_from_columns(ids: np.ndarray, present: np.ndarray, cuts=None):
    """One single-valued field per row of ``ids[F, R]`` (empty where ``present`` is False).

    With ``cuts`` (row boundaries ``0 = c0 < c1 < ... = R``), a list of fields per row range
    instead: the batches a piece of lines holds, each as if parsed alone. The offsets and the
    field-major ids come from one compiled pass that does not hold the GIL: in the reader's
    parse thread, numpy's masking and cumsums here (or slicing every field of a parsed piece
    into batches afterwards) held it while the training thread waited for it.
    """
    one = cuts is None
    cuts = np.array([0, ids.shape[1]] if one else cuts, dtype=np.int64)
    flat, offsets, ends = _csr_columns(ids, present, cuts)
    starts = np.zeros(ends.size, np.int64)
    starts[1:] = ends.ravel()[:-1]
    starts = starts.reshape(ends.shape).tolist()
    out = []
    for b, (lo, hi, s, e) in enumerate(zip(cuts[:-1].tolist(), cuts[1:].tolist(), starts,
                                           ends.tolist())):
        out.append([SparseField(flat[s[j]:e[j]], offsets[j, lo + b: hi + b + 1])
                    for j in range(len(s))])
    return out[0] if one else out


def field_from_rows(ids: np.ndarray, row: np.ndarray, n_rows: int, values=None) -> SparseField:
    """A field from ids tagged with their row (``row`` must be non-decreasing)."""
    counts = np.bincount(row, minlength=n_rows) if len(row) else np.zeros(n_rows, np.int64)
    vals = None if values is None else np.asarray(values, dtype=np.float32)
    return SparseField(np.asarray(ids, dtype=np.uint64), offsets_from_counts(counts), vals)


def slice_field(f: SparseField, a: int, b: int) -> SparseField:
    offsets = f.offsets[a: b + 1]
    lo, hi = offsets[[0, -1]].tolist()
    return SparseField(f.ids[lo:hi], offsets - lo if lo else offsets,
                       None if f.values is None else f.values[lo:hi])


def slice_batch(batch: Batch, a: int, b: int, offsets: dict | None = None) -> Batch:
    """Rows ``a:b`` of a batch (views where possible)."""
    return Batch(
        labels=batch.labels[a:b],
        sparse={k: slice_field(f, a, b) for k, f in batch.sparse.items()},
        dense=batch.dense[a:b],
        dense_names=batch.dense_names,
        offsets=dict(offsets or {}),
        timestamps=None if batch.timestamps is None else batch.timestamps[a:b],
    )


def concat_fields(fields: list[SparseField]) -> SparseField:
    ids = np.concatenate([f.ids for f in fields])
    offsets = np.empty(sum(f.rows for f in fields) + 1, dtype=np.int64)
    offsets[0], row, base = 0, 0, 0
    for f in fields:
        offsets[row + 1: row + f.rows + 1] = f.offsets[1:] + (base - f.offsets[0])
        row += f.rows
        base += int(f.offsets[-1] - f.offsets[0])
    values = None
    if any(f.values is not None for f in fields):
        values = np.concatenate([np.ones(len(f.ids), np.float32) if f.values is None else f.values
                                 for f in fields])
    return SparseField(ids, offsets, values)


def concat_batches(batches: list[Batch], offsets: dict | None = None) -> Batch:
    """Rows of several batches in order. Fields missing from a batch are empty for its rows."""
    if len(batches) == 1:
        b = batches[0]
        return Batch(b.labels, b.sparse, b.dense, b.dense_names, dict(offsets or b.offsets),
                     b.timestamps)
    names = list(dict.fromkeys(k for b in batches for k in b.sparse))
    dense_names = batches[0].dense_names
    if any(b.dense_names != dense_names for b in batches):
        raise ValueError("cannot concatenate batches with different dense columns: "
                         f"{sorted({b.dense_names for b in batches})}")
    empty = lambda n: SparseField(np.zeros(0, np.uint64), np.zeros(n + 1, np.int64))  # noqa: E731
    ts = None
    if all(b.timestamps is not None for b in batches):
        ts = np.concatenate([b.timestamps for b in batches])
    return Batch(
        labels=np.concatenate([b.labels for b in batches]),
        sparse={k: concat_fields([b.sparse.get(k) or empty(b.size) for b in batches]) for k in names},
        dense=np.concatenate([b.dense for b in batches]),
        dense_names=dense_names,
        offsets=dict(offsets or {}),
        timestamps=ts,
    )
