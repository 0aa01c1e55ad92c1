"""Numbers read inside the compiled parse kernels, exactly as ``numbers.parse_spans`` reads them.

``number_token(arr, s, n)`` answers ``(ok, value)`` for the tokens it can read with the same
result as the vectorised path, and ``ok = False`` for every other token (the kernel then gives
the chunk to the vectorised path, which decides). It reads ``[+-]?[0-9]+`` and
``[+-]?[0-9]*\\.[0-9]*`` (at least one digit) with at most 15 digits in all: the digits make an
integer ``m < 2**53`` and the value is ``m / 10**k`` with ``k <= 15``, two doubles that are
exact, so IEEE division rounds the quotient correctly, as the correctly rounded parse of numpy's
bytes-to-float cast (and ``_swar_int`` for integers) does.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit

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
