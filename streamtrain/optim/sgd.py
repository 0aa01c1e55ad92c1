"""Plain stochastic gradient descent."""
from __future__ import annotations

from streamtrain.online import terms as kernel

from .base import Optimizer, hyper, register


def rule(h, w, n, z, g, sq):
    """One coordinate (or arrays, elementwise): ``(w, n, z)`` after gradient ``g``; ``h = (lr, …)``."""
    return w - h[0] * g, n, z



# The rule's forms the per-example core needs (online/kernels.py compiles them; scalars only):
def rate(h, n, sq):
    """(√(n + sq), the step size dw/d(−g)) of a coordinate about to step."""
    return 0.0, h[0]


def rate_step(h, w, n, z, root0, root, rate, g, sq):
    """``rule`` with the step size known (``rate``)."""
    return w - rate * g, n, z


def inverse(h, w0, n0, z0, w, n, z):
    """(g, sq) whose single ``rule`` step from (w0, n0, z0) lands on (w, n, z)."""
    return ((w0 - w) / h[0] if h[0] > 0 else 0.0), 0.0


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
