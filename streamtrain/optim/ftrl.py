"""FTRL-Proximal (McMahan et al. 2013)."""
from __future__ import annotations

import numpy as np

from streamtrain.online import terms as kernel

from .base import Optimizer, hyper, register


@register
class FTRL(Optimizer):
    """FTRL-Proximal, per coordinate. Weights are a function of (z, n): rows start at zero
    whatever the layer's initializer."""

    kind = "ftrl"
    options = {"alpha": hyper(0.05, "learning rate"), "beta": hyper(1.0, "smoothing of the rate"),
               "l1": hyper(0.0, "L1 strength"), "l2": hyper(0.0, "L2 strength")}
    slots = {"z": "full", "n": "full"}
    nonnegative = ("n",)
    zero_init = True

    squares = True

    @classmethod
    def test_params(cls):
        return {"alpha": 0.5, "l1": 0.1, "l2": 0.2}

    def step(self, w, g, state, sq=None):
        z, n = state["z"], state["n"]
        g2 = g * g if sq is None else sq
        sigma = (np.sqrt(n + g2) - np.sqrt(n)) / self.alpha
        z += g - sigma * w
        n += g2
        shrunk = np.sign(z) * np.maximum(np.abs(z) - self.l1, 0)
        w[...] = -shrunk / ((self.beta + np.sqrt(n)) / self.alpha + self.l2)

    def step_rows(self, weights, state, rows, g, sq=None):
        from . import _rows as rows_        # numba: imported by the first push, not at start-up
        if not rows_.usable(weights, state, g):
            return False
        rows_.ftrl_rows(weights, state["z"], state["n"], rows, g, rows_.squares(sq, g),
                        rows_.hyper(weights.dtype, self.alpha, self.beta, self.l1, self.l2))
        return True

    def kernel_rule(self):
        return kernel.FTRL, (self.alpha, self.beta, self.l1, self.l2)
