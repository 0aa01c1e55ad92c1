"""Heavy-ball momentum."""
from __future__ import annotations

from .base import Optimizer, hyper, register


@register
class Momentum(Optimizer):
    """v = momentum * v + g;  w -= lr * v"""

    kind = "momentum"
    options = {"lr": hyper(0.01, "step size"), "momentum": hyper(0.9, "decay of the velocity")}
    slots = {"v": "full"}

    @classmethod
    def test_params(cls):
        return {"lr": 0.1, "momentum": 0.5}

    def step(self, w, g, state, sq=None):
        v = state["v"]
        v *= self.momentum
        v += g
        w -= self.lr * v
