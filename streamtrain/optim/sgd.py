"""Plain stochastic gradient descent."""
from __future__ import annotations

from streamtrain.online import terms as kernel

from .base import Optimizer, hyper, register


@register
class SGD(Optimizer):
    """w -= lr * g"""

    kind = "sgd"
    options = {"lr": hyper(0.01, "step size")}

    @classmethod
    def test_params(cls):
        return {"lr": 0.1}

    def step(self, w, g, state, sq=None):
        w -= self.lr * g

    def kernel_rule(self):
        return kernel.SGD, (self.lr,)
