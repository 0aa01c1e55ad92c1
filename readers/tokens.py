"""Numbers read inside the compiled parse kernels, exactly as ``numbers.parse_spans`` reads them.

``number_token(arr, s, n)`` answers ``(ok, value)`` for the tokens it can read with the same
result as the vectorised path, and ``ok = False`` for every other token (the kernel then gives
the chunk to the vectorised path, which decides). It reads ``[+-]?[0-9]+`` and
``[+-]?[0-9]*\\.[0-9]*`` (at least one digit) with at most 15 digits in all: the digits make an
integer ``m < 2**53`` and the value is ``m / 10**k`` with ``k <= 15``, two doubles that are
exact, so IEEE division rounds the quotient correctly, as the correctly rounded parse of numpy's
bytes-to-float cast (and ``_swar_int`` for integers) does. ``leading_digits(w)`` reads the
digits that start an 8-byte word at once, for a kernel's integers.
"""
from __future__ import annotations

import numpy as np
from numba.cpython.unsafe.numbers import trailing_zeros

from streamtrain.compiled import njit

from .chunk import _HIGH, _ONES

_POW10 = np.array([10.0 ** k for k in range(16)])
MAX_DIGITS = 15


@njit(nogil=True, inline="always")
def number_token(arr, s, n):
    """(ok, value) of ``arr[s:s+n]`` (see the module docstring)."""
    e = s + n
    if n == 1:                                  # the commonest value of all: one digit
        d = arr[s] - 48
        return 0 <= d <= 9, float(d)
    if n < 1:
        return False, 0.0
    neg = arr[s] == 45
    p = s + 1 if (neg or arr[s] == 43) else s
    k = p
    m = 0
    while p < e:                                # the integer part
        d = arr[p] - 48
        if d < 0 or d > 9:
            break
        m = m * 10 + d
        p += 1
    digits, frac = p - k, 0
    if p < e:                                   # a point, then the fraction's digits only
        if arr[p] != 46:
            return False, 0.0
        p += 1
        k = p
        while p < e:
            d = arr[p] - 48
            if d < 0 or d > 9:
                return False, 0.0
            m = m * 10 + d
            p += 1
        frac = p - k
        digits += frac
    if digits == 0 or digits > MAX_DIGITS:
        return False, 0.0
    x = float(m)
    if frac:
        x = x / _POW10[frac]
    return True, (-x if neg else x)



@njit(nogil=True, inline="always")
def leading_digits(w):
    """(n, value) of the decimal digits ``0-9`` that start the word ``w`` (8 bytes, the first the
    lowest): ``n`` of 0 to 7 found at once, their value by three multiplies (SWAR); ``n = 8``
    when the whole word is digits (value 0: the caller reads on)."""
    hit = ((w + _ONES * np.uint64(0x46)) | (w - _ONES * np.uint64(0x30))) & _HIGH
    if hit == 0:
        return 8, 0
    n = np.int64(trailing_zeros(hit)) >> 3      # the lowest marked byte is exact (no carry below it)
    if n == 0:
        return 0, 0
    d = (w - _ONES * np.uint64(0x30)) << np.uint64(64 - 8 * n)    # the digits on top, zeros below
    d = (d * np.uint64(10) + (d >> np.uint64(8))) & np.uint64(0x00FF00FF00FF00FF)
    d = (d * np.uint64(100) + (d >> np.uint64(16))) & np.uint64(0x0000FFFF0000FFFF)
    return n, np.int64((d * np.uint64(10000) + (d >> np.uint64(32))) & np.uint64(0xFFFFFFFF))
