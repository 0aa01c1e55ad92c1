"""The elementwise ends of an ``fc`` layer around its matrix products, compiled (numba, cached):
bias and ReLU in one pass forward, the ReLU mask and the bias gradient in one pass backward.

Each reproduces numpy's numbers bit for bit (``tests/test_dense_kernels.py``): ``np.maximum(z +
b, 0)`` (a NaN stays NaN, ``-0.0`` becomes ``0.0``), ``gy * (y > 0)`` (a masked negative gives
``-0.0``, a masked NaN stays NaN) and ``gz.sum(axis=0)`` (numpy sums the rows in order, starting
from the first). ``h`` holds ``[0, 1]`` in the arrays' dtype, so no constant widens float32
arithmetic to float64.
"""
from __future__ import annotations

from streamtrain.compiled import njit


@njit(nogil=True, error_model="numpy")
def bias_relu(z, b, h):
    """``z = max(z + b, 0)`` in place (``b`` empty: no bias)."""
    zero = h[0]
    biased = len(b) > 0
    B, n = z.shape
    for i in range(B):
        for j in range(n):
            t = z[i, j] + b[j] if biased else z[i, j]
            z[i, j] = t if (t > zero or t != t) else zero


@njit(nogil=True, error_model="numpy")
def relu_backward(y, gy, gz, gb, h):
    """``gz = gy * (y > 0)``; ``gb = gz.sum(axis=0)`` when ``gb`` has room (else no bias)."""
    zero, one = h[0], h[1]
    B, n = y.shape
    bias = len(gb) > 0
    for i in range(B):
        for j in range(n):
            g = gy[i, j] * (one if y[i, j] > zero else zero)
            gz[i, j] = g
            if bias:
                gb[j] = g if i == 0 else gb[j] + g
