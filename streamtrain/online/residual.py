"""The loss's residual inside the compiled per-example loop (``kernels.learn``): its gradient
in the logit (logistic or squared error) and the implicit residual, the one whose own update
of the example's linear terms lands on it. numba caches ``kernels.learn`` by its own file:
after editing this one, remove ``streamtrain/online/__pycache__/kernels.learn-*``.
"""
from __future__ import annotations

import numpy as np

from ..compiled import numba
from .rules import _apply, _row
from .terms import FTRL

njit = numba.njit

NEWTON_ITERATIONS = 50      # safeguarded Newton for the implicit residual: 2-3 steps from the
NEWTON_TOLERANCE = 1e-12    # linearised solution, more through L1's kinks


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _sigmoid(z):
    if z >= 0:
        return 1.0 / (1.0 + np.exp(-z))
    e = np.exp(z)
    return e / (1.0 + e)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _residual(zk, y, squared):
    """The loss's gradient in the logit: σ(z) − y (logistic) or 2 (z − y) (squared error)."""
    if squared:
        return 2.0 * (zk - y)
    return _sigmoid(zk) - y


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _implicit(zk, y, r, K, l1_present, m, uj, ux, L, grp, code, hyper, s, usq, uroot, urate, squared):
    """ρ with ρ = g(z_k − D(ρ)), g the loss's gradient (``_residual``) and ``D(ρ) = Σ_j x_j
    (w_j − w_j'(ρ))`` the example's own move of its logit; linear (``D = K ρ``) unless an FTRL
    slot has L1. Logistic: ρ in (−y, 1 − y); squared error: between 0 and r, and in closed form,
    2 (z − y) / (1 + 2K), without L1. Safeguarded Newton."""
    if squared:
        rho = r / (1.0 + 2.0 * K)
        if not l1_present:
            return rho
        lo, hi = min(0.0, r), max(0.0, r)
    else:
        lo, hi = -y, 1.0 - y
        p = r + y
        rho = min(max(r / (1.0 + p * (1.0 - p) * K), lo), hi)     # the linearised solution
    for _ in range(NEWTON_ITERATIONS):
        if l1_present:
            D, dD = 0.0, 0.0
            for i in range(m):
                j = uj[i]
                g_ = grp[j]
                w2, _n, _z = _apply(code[g_], _row(hyper, g_), L[j, 0], L[j, 1], L[j, 2], L[j, 3], uroot[i],
                                    urate[i], s * rho * ux[i], usq[i])
                D += ux[i] * (L[j, 0] - w2)
                if code[g_] != FTRL or w2 != 0.0:
                    dD += s * ux[i] * ux[i] * urate[i]
        else:
            D, dD = K * rho, K
        if squared:
            f, curve = rho - 2.0 * (zk - D - y), 2.0
        else:
            q = _sigmoid(zk - D)
            f, curve = rho - q + y, q * (1.0 - q)
        if f == 0.0:
            return rho
        if f > 0:
            hi = rho
        else:
            lo = rho
        step = f / (1.0 + curve * dD)
        if abs(step) < NEWTON_TOLERANCE:
            return rho - step
        rho -= step
        if rho <= lo or rho >= hi:           # Newton left the bracket (a kink of L1): bisect
            rho = 0.5 * (lo + hi)
    return rho
