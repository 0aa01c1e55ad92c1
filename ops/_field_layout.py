"""Where a batch's ids sit, from the fields' CSR offsets ``[F, B + 1]``: the id count of every
(field, example), field-major ``[F*B]``, and whether no field holds more than one id in any
example (``field_counts``: one compiled pass); then, for such single-valued data, the
batch-major slot ``example * F + field`` of every id (ids taken field after field, each field's
in example order: ``field_slots``, a second pass only the layers that gather by slot ask for).
``end_to_end`` lays the fields' ids (or offsets) end to end: a view when the parser already
wrote them so in one array, else a copy.

>>> import numpy as np
>>> counts, single = field_counts(np.array([[0, 1, 1, 2], [0, 1, 2, 3]]))
>>> counts.tolist(), single, field_slots(counts, 2).tolist()
([1, 0, 1, 1, 1, 1], True, [0, 4, 1, 3, 5])
>>> field_counts(np.array([[0, 2, 2]]))[1]
False
>>> flat = np.arange(6)
>>> end_to_end([flat[:2], flat[2:5], flat[5:]]).base is flat
True
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit


def field_counts(offsets: np.ndarray) -> tuple[np.ndarray, bool]:
    """(counts [F*B], whether every count is 0 or 1)."""
    counts, single = _field_counts(np.ascontiguousarray(offsets, np.int64))
    return counts, bool(single)


def field_slots(counts: np.ndarray, n_fields: int) -> np.ndarray:
    """The batch-major slot of every id of single-valued fields whose counts are ``counts``."""
    return _field_slots(counts, n_fields)


def end_to_end(arrays: list) -> np.ndarray:
    """``np.concatenate(arrays)`` of 1-D arrays; a read-only view when they already lie end to
    end in one array (a parser's field-major ids, the rows of its offsets): no copy, and no
    fresh pages to fault in, per batch."""
    first = arrays[0]
    base = first.base
    if isinstance(base, np.ndarray) and base.flags.c_contiguous:
        at = start = first.__array_interface__["data"][0]
        for a in arrays:
            if (a.base is not base or a.dtype != first.dtype or not a.flags.c_contiguous
                    or a.__array_interface__["data"][0] != at):
                break
            at += a.nbytes
        else:
            view = np.ndarray(((at - start) // first.itemsize,), first.dtype, buffer=base,
                              offset=start - base.__array_interface__["data"][0])
            view.flags.writeable = False
            return view
    return np.concatenate(arrays)


@njit(nogil=True)
def _field_counts(offsets):
    F, B = offsets.shape[0], offsets.shape[1] - 1
    counts = np.empty(F * B, np.int64)
    most = 0
    for f in range(F):
        for b in range(B):
            c = offsets[f, b + 1] - offsets[f, b]
            counts[f * B + b] = c
            most = max(most, c)
    return counts, most <= 1


@njit(nogil=True)
def _field_slots(counts, F):
    B = len(counts) // F
    total = 0
    for c in counts:
        total += c
    slot = np.empty(total, np.int64)
    k = 0
    for f in range(F):
        for b in range(B):
            if counts[f * B + b]:
                slot[k] = b * F + f
                k += 1
    return slot
