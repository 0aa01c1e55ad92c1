"""ADWIN (Bifet & Gavaldà 2007, ADWIN2 with exponential histograms) as a compiled kernel.

The window is kept as rows of buckets: row ``r`` holds up to ``max_buckets`` buckets of
``2**r`` values each (total and variance), oldest first; when a row overflows its two oldest
buckets merge into the next row. Every ``clock`` values the window is cut at every bucket
boundary, oldest first; a cut whose two sides' means differ by more than

    eps = sqrt(2 m v d') + 2/3 d' m,   m = 1/(n0-L+1) + 1/(n1-L+1),   d' = ln(2 ln(W) / delta)

(v the window's variance per value, L ``min_window_length``) drops the oldest bucket, and
raises the alarm when the means differ by ``min_change`` at least (a window of millions of
values finds changes of a thousandth of a loss significant: a learner's own wander). As in River's ``drift.ADWIN``, the value after an alarm starts a new, empty
window. One difference from River 0.2x: the scan also considers the cut before the newest
bucket of each row (MOA's original loop; River's stops one bucket short in every row).

The per-value algorithm is compiled with numba (``streamtrain.compiled.njit``: cached on disk where it can be); state lives in numpy arrays
so the Python object (``streamtrain.drift.Adwin``) is just their owner.
"""
from __future__ import annotations

import math

import numpy as np

from .compiled import njit

ROWS = 64              # 2**64 values: more rows than any stream fills
POW2 = np.array([2.0 ** r for r in range(ROWS)])   # a row's bucket size 2**r: a table (exact), not a pow() call

# scalars: 0 width, 1 total, 2 variance, 3 tick, 4 rows in use
WIDTH, TOTAL, VAR, TICK, NROWS = range(5)


def new_state(max_buckets: int):
    """(scalars float64[5], totals [ROWS, M+1], variances [ROWS, M+1], counts int64[ROWS])."""
    return (np.zeros(5), np.zeros((ROWS, max_buckets + 1)), np.zeros((ROWS, max_buckets + 1)),
            np.zeros(ROWS, np.int64))


@njit()
def _clear(sc, tot, var, cnt):
    sc[:] = 0.0
    tot[:, :] = 0.0
    var[:, :] = 0.0
    cnt[:] = 0


@njit(inline="always")
def _shift(tot, var, cnt, r, n):
    """Drop the ``n`` oldest buckets of row ``r``."""
    k = cnt[r]
    for i in range(n, k):
        tot[r, i - n] = tot[r, i]
        var[r, i - n] = var[r, i]
    for i in range(k - n, k):
        tot[r, i] = 0.0
        var[r, i] = 0.0
    cnt[r] = k - n


@njit(inline="always")
def _insert(sc, tot, var, cnt, x, max_buckets):
    w = sc[WIDTH] + 1.0
    if w > 1.0:
        mean = sc[TOTAL] / (w - 1.0)
        sc[VAR] += (w - 1.0) * (x - mean) * (x - mean) / w
    sc[WIDTH] = w
    sc[TOTAL] += x
    tot[0, cnt[0]] = x
    var[0, cnt[0]] = 0.0
    cnt[0] += 1
    if sc[NROWS] < 1:
        sc[NROWS] = 1
    r = 0
    while cnt[r] == max_buckets + 1:           # merge the two oldest into the next row
        n = POW2[r]
        mu1, mu2 = tot[r, 0] / n, tot[r, 1] / n
        t12 = tot[r, 0] + tot[r, 1]
        v12 = var[r, 0] + var[r, 1] + n * n * (mu1 - mu2) * (mu1 - mu2) / (2 * n)
        nxt = r + 1
        tot[nxt, cnt[nxt]] = t12
        var[nxt, cnt[nxt]] = v12
        cnt[nxt] += 1
        if sc[NROWS] < nxt + 1:
            sc[NROWS] = nxt + 1
        _shift(tot, var, cnt, r, 2)
        r = nxt


@njit()
def _delete_oldest(sc, tot, var, cnt):
    r = int(sc[NROWS]) - 1
    n = POW2[r]
    u, v = tot[r, 0], var[r, 0]
    mu = u / n
    sc[WIDTH] -= n
    sc[TOTAL] -= u
    mu_w = sc[TOTAL] / sc[WIDTH] if sc[WIDTH] > 0 else 0.0
    sc[VAR] -= v + n * sc[WIDTH] * (mu - mu_w) * (mu - mu_w) / (n + sc[WIDTH])
    _shift(tot, var, cnt, r, 1)
    if cnt[r] == 0:
        sc[NROWS] = r
    return n


@njit()
def _cut(n0, n1, diff, v, d, min_len):
    """Whether the cut into ``n0`` older and ``n1`` newer values is a change; ``v`` the window's
    variance per value and ``d`` = d' (both fixed for one scan of the window)."""
    m = 1.0 / (n0 - min_len + 1) + 1.0 / (n1 - min_len + 1)
    eps = math.sqrt(2.0 * m * v * d) + 2.0 / 3.0 * d * m
    return abs(diff) > eps


@njit()
def _detect(sc, tot, var, cnt, delta, min_len, direction, min_change):
    """Cut the window where its two sides differ; True when a cut was a change in ``direction``
    (1: the newer side higher, -1: lower, 0: either) of at least ``min_change``. Every cut
    shrinks the window."""
    found = False
    again = True
    while again:
        again = False
        n0, n1, u0, u1 = 0.0, sc[WIDTH], 0.0, sc[TOTAL]
        d = math.log(2.0 * math.log(sc[WIDTH]) / delta) if sc[WIDTH] > 1.0 else 0.0   # no cut below 2
        v = sc[VAR] / sc[WIDTH]
        done = False
        for r in range(int(sc[NROWS]) - 1, -1, -1):
            if done:
                break
            n = POW2[r]
            for k in range(cnt[r]):
                n0 += n
                n1 -= n
                u0 += tot[r, k]
                u1 -= tot[r, k]
                if r == 0 and k == cnt[r] - 1:
                    done = True
                    break
                diff = u0 / n0 - u1 / n1                  # older side's mean minus newer side's
                if n0 >= min_len and n1 >= min_len and _cut(n0, n1, diff, v, d, min_len):
                    again = True
                    if (direction == 0 or (direction > 0) == (diff < 0)) and abs(diff) >= min_change:
                        found = True
                    if sc[WIDTH] > 0:
                        _delete_oldest(sc, tot, var, cnt)
                    done = True
                    break
    return found


@njit(nogil=True)
def run(x, sc, tot, var, cnt, delta, clock, max_buckets, min_len, grace, direction, min_change=0.0):
    """Feed ``x`` in order; return the positions (in ``x``) of the values that raised an alarm.
    It does not hold the GIL (the reader's parse thread runs meanwhile)."""
    alarms = np.empty(len(x), np.int64)
    n_alarms = 0
    fresh = False
    for i in range(len(x)):
        if fresh:
            _clear(sc, tot, var, cnt)
            fresh = False
        _insert(sc, tot, var, cnt, x[i], max_buckets)
        sc[TICK] += 1
        if sc[TICK] % clock == 0 and sc[WIDTH] > grace:
            if _detect(sc, tot, var, cnt, delta, min_len, direction, min_change):
                alarms[n_alarms] = i
                n_alarms += 1
                fresh = True
    if fresh:
        _clear(sc, tot, var, cnt)
    return alarms[:n_alarms]
