"""Adam with per-row bias correction."""
from __future__ import annotations

import numpy as np

from streamtrain import lazy

from .base import Optimizer, hyper, register

_rows = lazy.module("streamtrain.optim._rows")     # numba: imported by the first step, not at start-up


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
        rows_ = _rows()
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

    def fuse_key(self, w, g, state):
        """A dense float parameter (one step count; weights, slots and gradient of one dtype, C
        order) steps with the others of the same hyperparameters and dtype in one compiled pass."""
        t = state["t"]
        if t.size != 1 or not _rows().flat(w, state["m"], state["v"], g):
            return None
        return Adam, w.dtype, self.lr, self.beta1, self.beta2, self.eps

    @staticmethod
    def step_fused(key, parts):
        """``step`` of each dense ``(w, g, state)``: ``rows_.adam_many``, ``FUSED`` at a time."""
        rows_ = _rows()
        _, dtype, lr, beta1, beta2, eps = key
        h = rows_.hyper(dtype, lr, beta1, beta2, eps, 1 - beta1, 1 - beta2, 1)
        for start in range(0, len(parts), rows_.FUSED):
            rows_.adam_many(*rows_.fused_args(parts[start:start + rows_.FUSED]), h)
