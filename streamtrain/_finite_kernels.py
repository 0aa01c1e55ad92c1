"""A compiled check that arrays hold finite numbers only, below a bound (numba, cached):
``Gradients.all_finite``.

``np.isfinite(a).all()`` makes a boolean temporary and costs a few µs of call overhead per array;
a push checks a dozen or more (dense gradients, table rows, squares, the per-example engine's
rows and slots). Here the flat arrays of one dtype go in one call, ``CHUNK`` at a time (a tuple of
``CHUNK``, the last repeated, so one compiled signature per dtype whatever the model). The test
``not (|x| < limit)`` is true exactly for NaN, ±inf and numbers at or beyond ``limit``, and is a
comparison, not a float sum, so the loop vectorises without reordering any arithmetic.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit

CHUNK = 16


@njit(nogil=True, error_model="numpy")
def any_nonfinite(arrays, n, limit):
    """Whether any of the first ``n`` 1-D arrays of the tuple holds a NaN, an infinity or a
    number of magnitude ``limit`` or more."""
    for k in range(n):
        a = arrays[k]
        bad = False
        for i in range(len(a)):
            bad |= not (np.abs(a[i]) < limit)
        if bad:
            return True
    return False


def all_finite(flat: list, limit: float = np.inf) -> bool:
    """Whether the 1-D arrays ``flat`` (one dtype, float32 or float64, writeable and aligned:
    one compiled type) hold finite numbers of magnitude below ``limit`` only."""
    for start in range(0, len(flat), CHUNK):
        part = flat[start:start + CHUNK]
        n = len(part)
        part += [part[-1]] * (CHUNK - n)
        if any_nonfinite(tuple(part), n, float(limit)):
            return False
    return True
