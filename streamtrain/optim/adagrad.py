"""Adagrad: a step size per coordinate from the sum of its squared gradients."""
from __future__ import annotations

import numpy as np

from streamtrain.online import terms as kernel

from .base import Optimizer, hyper, register


def rule(h, w, n, z, g, sq):
    """One coordinate (or arrays of them, elementwise) stepped by gradient ``g`` whose square is
    ``sq``: ``(w, n, z)`` after. ``h = (lr, eps, …)``. The arithmetic every executor runs: the
    numpy ``step``, the compiled table rows (optim/_rows.py) and the per-example core
    (online/kernels.py) compile this very function."""
    n = n + sq
    return w - h[0] * g / (np.sqrt(n) + h[1]), n, z


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
        from . import _rows as rows_        # numba: imported by the first push, not at start-up
        if not rows_.usable(weights, state, g):
            return False
        rows_.adagrad_rows(weights, state["n"], rows, g, rows_.squares(sq, g),
                           rows_.hyper(weights.dtype, self.lr, self.eps))
        return True

    def kernel_rule(self):
        return kernel.ADAGRAD, (self.lr, self.eps)
