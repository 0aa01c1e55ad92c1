"""Plain stochastic gradient descent."""
from __future__ import annotations

import numpy as np

from .base import Optimizer, hyper, register


@register
class SGD(Optimizer):
    """w -= lr * g"""

    kind = "sgd"
    options = {"lr": hyper(0.01, "step size")}

    sequential = True

    @classmethod
    def test_params(cls):
        return {"lr": 0.1}

    def step(self, w, g, state, sq=None):
        w -= self.lr * g

    def rates(self, state, squares):
        return np.full_like(squares, self.lr)
