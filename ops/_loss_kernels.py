"""The elementwise tail of ``logloss``'s forward pass, compiled (numba, cached): the sigmoid and
the per-example loss in one pass over the batch instead of about ten numpy calls (each a few µs
on a batch of 256, several times that between the step's other calls).

``e = exp(-|z|)`` comes from numpy (its vectorised ``exp`` may round differently from the C
library's); from it ``p`` is ``ops.dense.sigmoid`` operation for operation, bit for bit: ``1 /
(1 + e)`` for ``z >= 0``, ``e / (1 + e)`` below, in the arrays' dtype (``h`` holds ``[0, 1]`` in
it, so no constant widens float32 arithmetic). The loss ``log1p(e) + max(z, 0) - y z`` (numpy:
``np.logaddexp(0, -|z|) + ...``) is summed in float64 and returned as the mean: a reported
figure, equal to numpy's within float rounding (``tests/test_loss_kernels.py``).
"""
from __future__ import annotations

import math

from streamtrain.compiled import njit


@njit(nogil=True, error_model="numpy")
def logloss_forward(z, y, e, p, h):
    """Fill ``p`` with ``sigmoid(z)`` given ``e = exp(-|z|)``; return the mean loss (0.0 for
    an empty batch)."""
    zero, one = h[0], h[1]
    n = len(z)
    total = 0.0
    for i in range(n):
        zi, ei = z[i], e[i]
        d = one + ei
        p[i] = one / d if zi >= zero else ei / d
        total += float(math.log1p(ei)) + float(max(zi, zero)) - float(y[i] * zi)
    return total / n if n else 0.0
