"""Adagrad: a step size per coordinate from the sum of its squared gradients."""
from __future__ import annotations

import numpy as np

from streamtrain import lazy
from streamtrain.online import terms as kernel

from .base import Optimizer, hyper, register

_rows = lazy.module("streamtrain.optim._rows")


def rule(h, w, n, z, g, sq):
    """One coordinate (or arrays of them, elementwise) stepped by gradient ``g`` whose square is
    ``sq``: ``(w, n, z)`` after. ``h = (lr, eps, …)``. The arithmetic every executor runs: the
    numpy ``step``, the compiled table rows (optim/_rows.py) and the per-example core
    (online/kernels.py) compile this very function."""
    n = n + sq
    return w - h[0] * g / (np.sqrt(n) + h[1]), n, z



# The rule's forms the per-example core needs (online/kernels.py compiles them; scalars only):
def rate(h, n, sq):
    """(√(n + sq), the step size dw/d(−g)) of a coordinate about to step."""
    root = np.sqrt(n + sq)
    return root, h[0] / (root + h[1])


def rate_step(h, w, n, z, root0, root, rate, g, sq):
    """``rule`` with √n before (``root0``) and after (``root``) and the step size known."""
    return w - rate * g, n + sq, z


def inverse(h, w0, n0, z0, w, n, z):
    """(g, sq) whose single ``rule`` step from (w0, n0, z0) lands on (w, n, z)."""
    return ((w0 - w) * (np.sqrt(n) + h[1]) / h[0] if h[0] > 0 else 0.0), n - n0


@register
class Adagrad(Optimizer):
    """n += g²;  w -= lr * g / (sqrt(n) + eps)"""

    kind = "adagrad"
    options = {"lr": hyper(0.05, "step size"), "eps": hyper(1e-7, "added to sqrt(n)"),
               "initial_accumulator": hyper(0.0, "n of a new row")}
    slots = {"n": "full"}
    nonnegative = ("n",)

    @classmethod
    def test_params(cls):
        return {"lr": 0.1, "initial_accumulator": 0.5}

    def init_state(self, weight_shape, table, dtype=np.float32):
        state = super().init_state(weight_shape, table, dtype)
        state["n"] += self.initial_accumulator
        return state

    squares = True

    rule = staticmethod(rule)

    def step(self, w, g, state, sq=None):
        n = state["n"]
        w[...], n[...], _ = rule((self.lr, self.eps), w, n, None, g, g * g if sq is None else sq)

    def step_rows(self, weights, state, rows, g, sq=None):
        rows_ = _rows()                     # numba: imported by the first push, not at start-up
        if not rows_.usable(weights, state, g):
            return False
        rows_.adagrad_rows(weights, state["n"], rows, g, rows_.squares(sq, g),
                           rows_.hyper(weights.dtype, self.lr, self.eps))
        return True

    def kernel_rule(self):
        return kernel.ADAGRAD, (self.lr, self.eps)
