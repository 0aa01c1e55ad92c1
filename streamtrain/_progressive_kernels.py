"""A batch's binary progressive figures in one compiled pass (numba, cached): the bins of the
predicted log-odds (``progressive.logit_bins``), the per-example losses (``scores.log_losses``)
and the sums ``Progressive.update`` keeps, without the dozen numpy passes and two ``np.add.at``
over a few hundred examples they cost.

The numbers are numpy's (``tests/test_progressive_kernel.py``): ``np.clip``'s comparisons (a NaN
stays NaN), float64 ``log`` / ``log1p`` (the C library's, as numpy's on this path), the bin of
a NaN log-odds 0 (numpy's cast of NaN to int64 is the minimum, clipped to 0), and sums in
numpy's pairwise order (``pairwise_sum``), each in its array's precision.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit


@njit(nogil=True, error_model="numpy")
def _block(a, lo, n):
    """numpy's sum of at most 128 values: eight running sums (fewer than 8: one)."""
    res = np.zeros(1, a.dtype)[0]
    if n < 8:
        for i in range(n):
            res += a[lo + i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    while i < n - n % 8:
        j = lo + i
        r0 += a[j]
        r1 += a[j + 1]
        r2 += a[j + 2]
        r3 += a[j + 3]
        r4 += a[j + 4]
        r5 += a[j + 5]
        r6 += a[j + 6]
        r7 += a[j + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(nogil=True, error_model="numpy")
def pairwise_sum(a):
    """``a.sum()`` as numpy adds a contiguous 1-D array (``loops_utils.h.src``): blocks of at
    most 128 values, above that the sum of two halves (the first a multiple of 8), in ``a``'s
    precision. The halving runs on a stack of its own (numba caches no recursive kernel)."""
    los = np.empty(64, np.int64)              # pending ranges: start, length, halves done
    ns = np.empty(64, np.int64)
    done = np.empty(64, np.int64)
    sums = np.empty(64, a.dtype)              # finished parts, left before right
    top, k = 0, 0
    los[0], ns[0], done[0] = 0, len(a), 0
    while top >= 0:
        lo, n = los[top], ns[top]
        if n <= 128:
            sums[k] = _block(a, lo, n)
            k += 1
            top -= 1
            continue
        half = n // 2
        half -= half % 8
        if done[top] == 2:                    # both halves summed: their sum replaces them
            k -= 1
            sums[k - 1] = sums[k - 1] + sums[k]
            top -= 1
            continue
        first = done[top] == 0
        done[top] += 1
        top += 1
        los[top], ns[top], done[top] = (lo, half, 0) if first else (lo + half, n - half, 0)
    return sums[0]


@njit(nogil=True, error_model="numpy", inline="always")
def _clip(x, lo, hi):
    """``np.clip`` of one float: NaN stays NaN."""
    if x != x:
        return x
    x = x if x > lo else lo
    return x if x < hi else hi


@njit(nogil=True, error_model="numpy")
def binary_pass(labels, p, pos, neg, losses, h):
    """Bins of ``p``'s log-odds into ``pos`` / ``neg`` by label, each example's logloss into
    ``losses``; returns the sums of the losses, the labels and ``p``. ``h`` = (the bins' clip
    of p, the losses' clip of p, the log-odds limit, bins per unit of log-odds). The loss
    reuses the bins' two logarithms when both clips leave ``p`` as it is (nearly always): half
    the logarithms, the same numbers."""
    n = len(p)
    last = len(pos) - 1
    for i in range(n):
        q = p[i]
        c = _clip(q, h[0], 1 - h[0])
        lc, l1c = np.log(c), np.log1p(-c)
        z = lc - l1c
        b = 0
        if z == z:
            b = min(max(np.int64((z + h[2]) * h[3]), 0), last)
        if labels[i] > 0.5:
            pos[b] += 1
        else:
            neg[b] += 1
        c2 = _clip(q, h[1], 1 - h[1])
        if c2 != c:                           # a clip bound (or NaN): the loss's own logarithms
            lc, l1c = np.log(c2), np.log1p(-c2)
        y = np.float64(labels[i])
        losses[i] = -(y * lc + (1 - y) * l1c)
    return pairwise_sum(losses), np.float64(pairwise_sum(labels)), pairwise_sum(p)
