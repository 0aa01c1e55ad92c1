"""The FM / bi-interaction term and its gradient over a ``[B, F, d]`` input, compiled (numba,
cached): one pass over the input each way and no ``[B, F, d]`` temporaries. Sums are float64,
results in the input's precision."""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit


@njit(nogil=True, error_model="numpy")
def fm_forward(v, s, y):
    """``s[b] = Σ_f v[b, f]``; ``y[b, c] = ½ (s[b, c]² − Σ_f v[b, f, c]²)``, or summed over
    ``c`` into ``y[b, 0]`` when ``y`` has one column."""
    B, F, d = v.shape
    reduce = y.shape[1] == 1 and d != 1
    acc = np.empty(d)
    sq = np.empty(d)
    for b in range(B):
        for c in range(d):
            acc[c] = 0.0
            sq[c] = 0.0
        for f in range(F):
            for c in range(d):
                x = np.float64(v[b, f, c])
                acc[c] += x
                sq[c] += x * x
        total = 0.0
        for c in range(d):
            s[b, c] = acc[c]
            term = 0.5 * (acc[c] * acc[c] - sq[c])
            if reduce:
                total += term
            else:
                y[b, c] = term
        if reduce:
            y[b, 0] = total


@njit(nogil=True, error_model="numpy")
def fm_backward(v, s, gy, gx):
    """``gx[b, f, c] = gy[b, c] (s[b, c] − v[b, f, c])`` (a one-column ``gy`` broadcast over c)."""
    B, F, d = v.shape
    wide = gy.shape[1] != 1
    for b in range(B):
        for f in range(F):
            for c in range(d):
                g = gy[b, c] if wide else gy[b, 0]
                gx[b, f, c] = g * (s[b, c] - v[b, f, c])
