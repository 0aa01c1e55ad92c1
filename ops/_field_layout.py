"""Where a batch's ids sit, in one compiled pass over the fields' CSR offsets ``[F, B + 1]``:
the id count of every (field, example), field-major ``[F*B]``, and, when no field holds more
than one id in any example, the batch-major slot ``example * F + field`` of every id (ids
taken field after field, each field's in example order).

>>> import numpy as np
>>> counts, slot = field_slots(np.array([[0, 1, 1, 2], [0, 1, 2, 3]]))
>>> counts.tolist(), slot.tolist()
([1, 0, 1, 1, 1, 1], [0, 4, 1, 3, 5])
>>> field_slots(np.array([[0, 2, 2]]))[1] is None
True
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit


def field_slots(offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """(counts [F*B], slot of every id or None when some field has several ids in an example)."""
    counts, slot, single = _field_slots(np.ascontiguousarray(offsets, np.int64))
    return counts, (slot if single else None)


@njit(nogil=True)
def _field_slots(offsets):
    F, B = offsets.shape[0], offsets.shape[1] - 1
    total = 0
    for f in range(F):
        total += offsets[f, B] - offsets[f, 0]
    counts = np.empty(F * B, np.int64)
    slot = np.empty(total, np.int64)
    single = True
    k = 0
    for f in range(F):
        for b in range(B):
            c = offsets[f, b + 1] - offsets[f, b]
            counts[f * B + b] = c
            if c == 1 and single:
                slot[k] = b * F + f
                k += 1
            elif c > 1:
                single = False
    return counts, slot, single
