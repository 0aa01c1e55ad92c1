"""Adam with per-row bias correction."""
from __future__ import annotations

import numpy as np

from .base import Optimizer, hyper, register


@register
class Adam(Optimizer):
    """Adam with a step count per row, so bias correction is right for rarely seen ids."""

    kind = "adam"
    options = {"lr": hyper(0.001, "step size"), "beta1": hyper(0.9, "decay of the mean"),
               "beta2": hyper(0.999, "decay of the second moment"), "eps": hyper(1e-8, "added to sqrt(v)")}
    slots = {"m": "full", "v": "full", "t": "row"}
    nonnegative = ("v", "t")

    @classmethod
    def test_params(cls):
        return {"lr": 0.01}

    def step(self, w, g, state, sq=None):
        m, v, t = state["m"], state["v"], state["t"]
        from . import _rows as rows_        # numba: imported by the first step, not at start-up
        if t.size == 1 and rows_.flat(w, m, v, g):
            t += 1                          # a dense parameter: one pass, compiled
            c1, c2 = rows_.corrections(self.beta1, self.beta2, t)
            rows_.adam_dense(w.reshape(-1), m.reshape(-1), v.reshape(-1), g.reshape(-1),
                             rows_.hyper(w.dtype, self.lr, self.beta1, self.beta2, self.eps,
                                         1 - self.beta1, 1 - self.beta2), c1, c2)
            return
        t += 1
        m *= self.beta1
        m += (1 - self.beta1) * g
        v *= self.beta2
        v += (1 - self.beta2) * g * g
        m_hat = m / (1 - self.beta1 ** t)
        v_hat = v / (1 - self.beta2 ** t)
        w -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)
