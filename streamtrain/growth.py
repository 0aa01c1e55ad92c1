"""Row buffers that grow by doubling (the memory store's tables, the serving row cache).

>>> import numpy as np
>>> capacity_for(4, 9)
16
>>> grow_rows(np.ones((2, 3), np.float32), 4).tolist()
[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
"""
from __future__ import annotations

import numpy as np


def capacity_for(current: int, needed: int) -> int:
    """``current`` doubled until it holds ``needed`` rows."""
    capacity = max(int(current), 1)
    while capacity < needed:
        capacity *= 2
    return capacity


def grow_rows(a: np.ndarray, capacity: int) -> np.ndarray:
    """``a``'s rows at the top of a zeroed array of ``capacity`` rows (same dtype and row shape)."""
    out = np.zeros((capacity, *a.shape[1:]), a.dtype)
    out[:len(a)] = a
    return out
