"""Confidence bounds on the difference of two candidates' progressive losses.

ChaCha (Wu, Wang, Huang, Mohri, Langford and Kakade, "ChaCha for Online AutoML", ICML 2021)
promotes a challenger once the upper confidence bound of its progressive loss is below the
champion's lower one, each bound taken on its own. Every live candidate here predicts the very
same examples before learning them, so the comparison is made on the *paired* differences
``d_t = loss_challenger(t) - loss_champion(t)``, whose spread is much smaller than either
loss's (both err on the same hard examples): the same decision needs fewer examples.

The bound is time-uniform, because the decision is looked at after every batch: Robbins'
normal-mixture boundary (Robbins 1970; Howard, Ramdas, McAuliffe and Sekhon, "Time-uniform,
nonparametric, nonasymptotic confidence sequences", Ann. Statist. 2021, eq. (14)): for a sum
``S_n`` of zero-mean sub-Gaussian increments with variance process ``V_n``,

    P(exists n: |S_n| >= sqrt((V_n + rho) * log((V_n + rho) / (rho * alpha**2)))) <= alpha

(two-sided, ``alpha`` = the ``confidence`` setting). ``V_n`` is the running sum of squared
deviations of the differences (the empirical variance process, as the empirical-Bernstein
sequences of the same paper use), and ``rho`` puts the boundary's tightest point at the
``grace`` examples before which nothing is decided. A sequential test in the sense of Wald:
it may stop at any batch, and with probability ``1 - alpha`` a candidate no better than the
champion is never promoted.

>>> r = radius(n=10_000, mean=0.0, var_sum=10_000 * 0.01, alpha=0.05, grace=2000)
>>> round(r, 5)
0.00306
"""
from __future__ import annotations

import math

import numpy as np


def radius(n, mean, var_sum, alpha: float, grace: int):
    """Half-width of the confidence interval of the mean difference after ``n`` paired
    examples (arrays or floats); infinite where ``n`` is 0."""
    n = np.asarray(n, np.float64)
    var = np.maximum(np.asarray(var_sum, np.float64), 1e-12 * np.maximum(n, 1))
    rho = np.maximum(var / np.maximum(n, 1), 1e-12) * grace        # variance accrued over `grace` examples
    bound = np.sqrt((var + rho) * np.log((var + rho) / (rho * alpha * alpha)))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(n > 0, bound / np.maximum(n, 1), np.inf)
    return float(out) if out.ndim == 0 else out


def verdict(n: int, total: float, squares: float, alpha: float, grace: int, margin: float = 0.0) -> int:
    """-1: the challenger is confidently better (lower loss); +1: confidently worse, or with
    ``margin`` > 0 confidently not better by more than ``margin`` (the interval's lower end above
    ``-margin``); 0: not yet. ``total`` and ``squares`` are the sums of the paired differences
    and of their squares."""
    if n < grace:
        return 0
    mean = total / n
    var_sum = max(squares - total * total / n, 0.0)
    r = radius(n, mean, var_sum, alpha, grace)
    if not math.isfinite(mean):
        return 1
    return -1 if mean + r < 0 else (1 if mean - r > -margin else 0)
