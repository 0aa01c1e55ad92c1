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
def _csr_columns(ids, present):
    n_fields, n_rows = ids.shape
    offsets = np.empty((n_fields, n_rows + 1), np.int64)
    total = 0
    for j in range(n_fields):
        offsets[j, 0] = 0
        c = 0
        for r in range(n_rows):
            if present[j, r]:
                c += 1
            offsets[j, r + 1] = c
        total += c
    flat = np.empty(total, ids.dtype)
    k = 0
    for j in range(n_fields):
        for r in range(n_rows):
            if present[j, r]:
                flat[k] = ids[j, r]
                k += 1
    return flat, offsets


def fields_from_columns(ids: np.ndarray, present: np.ndarray) -> list[SparseField]:
    """One single-valued field per row of ``ids[F, R]`` (empty where ``present`` is False).

    The offsets and the field-major ids of all fields come from one compiled pass that does
    not hold the GIL: in the reader's parse thread, numpy's masking and cumsums here held it
    for milliseconds per large batch while the training thread waited for it.
    """
    flat, offsets = _csr_columns(ids, present)
    cuts = np.cumsum(offsets[:, -1]).tolist()
    return [SparseField(flat[a:b], offsets[j]) for j, (a, b) in enumerate(zip([0] + cuts, cuts))]


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


def empty_batch(like: Batch | None = None) -> Batch:
    names = like.dense_names if like is not None else ()
    return Batch(labels=np.zeros(0, np.float32),
                 sparse={k: SparseField(np.zeros(0, np.uint64), np.zeros(1, np.int64))
                         for k in (like.sparse if like is not None else {})},
                 dense=np.zeros((0, len(names)), np.float32), dense_names=names)
