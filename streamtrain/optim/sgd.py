"""Plain stochastic gradient descent."""
from __future__ import annotations

from streamtrain.online import terms as kernel

from .base import Optimizer, hyper, register


def rule(h, w, n, z, g, sq):
    """One coordinate (or arrays, elementwise): ``(w, n, z)`` after gradient ``g``; ``h = (lr, …)``."""
    return w - h[0] * g, n, z


@register
class SGD(Optimizer):
    """w -= lr * g"""

    kind = "sgd"
    options = {"lr": hyper(0.01, "step size")}

    @classmethod
    def test_params(cls):
        return {"lr": 0.1}

    rule = staticmethod(rule)

    def step(self, w, g, state, sq=None):
        w[...], _, _ = rule((self.lr,), w, None, None, g, None)

    def kernel_rule(self):
        return kernel.SGD, (self.lr,)
