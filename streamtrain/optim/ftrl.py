"""FTRL-Proximal (McMahan et al. 2013)."""
from __future__ import annotations

import numpy as np

from streamtrain import lazy
from streamtrain.online import terms as kernel

from .base import Optimizer, hyper, register

_rows = lazy.module("streamtrain.optim._rows")


def rule(h, w, n, z, g, sq):
    """One coordinate (or arrays of them, elementwise) stepped by gradient ``g`` whose square is
    ``sq``: ``(w, n, z)`` after. ``h = (alpha, beta, l1, l2, zero)``: the zero in the weights'
    type, so no constant widens float32 arithmetic. Every executor runs this very function
    (numpy ``step``, optim/_rows.py, online/kernels.py)."""
    sigma = (np.sqrt(n + sq) - np.sqrt(n)) / h[0]
    z = z + (g - sigma * w)
    n = n + sq
    shrunk = np.sign(z) * np.maximum(np.abs(z) - h[2], h[4])
    return -shrunk / ((h[1] + np.sqrt(n)) / h[0] + h[3]), n, z



# The rule's forms the per-example core needs (online/kernels.py compiles them; scalars only):
def rate(h, n, sq):
    """(√(n + sq), the step size dw/d(−g)): from a consistent state ``w = −z/d`` without L1 the
    step is exactly ``−rate · g``; with L1 the weight is ``−shrink(z')·rate``."""
    root = np.sqrt(n + sq)
    return root, h[0] / (h[1] + root + h[0] * h[3])


def rate_step(h, w, n, z, root0, root, rate, g, sq):
    """``rule`` with √n before (``root0``) and after (``root``) and the step size known."""
    z2 = z + g - (root - root0) / h[0] * w
    shrunk = max(abs(z2) - h[2], 0.0)
    if z2 < 0:
        shrunk = -shrunk
    return -shrunk * rate, n + sq, z2


def inverse(h, w0, n0, z0, w, n, z):
    """(g, sq) whose single ``rule`` step from (w0, n0, z0) lands on (w, n, z)."""
    return z - z0 + (np.sqrt(n) - np.sqrt(np.float64(n0))) / h[0] * w0, n - n0


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

    rule = staticmethod(rule)

    def step(self, w, g, state, sq=None):
        z, n = state["z"], state["n"]
        h = (self.alpha, self.beta, self.l1, self.l2, 0)
        w[...], n[...], z[...] = rule(h, w, n, z, g, g * g if sq is None else sq)

    def carry(self, source, w, state):
        """The weights are ``-shrink(z) / ((beta + √n) / alpha + l2)``: a copy of another rate's
        (z, n) would rescale every weight at its next step (half the rate, half the weights).
        ``z`` is rewritten so that this rule's weight of each coordinate is the copied one (a
        coordinate L1 holds at zero keeps its ``z``)."""
        if type(source) is not type(self) or source.hyper == self.hyper:
            return
        z, n = state["z"], state["n"]
        d = (self.beta + np.sqrt(n)) / self.alpha + self.l2
        moved = (w != 0) & (d > 0)
        z[...] = np.where(moved, -w * d + np.sign(-w) * self.l1, z)

    def step_rows(self, weights, state, rows, g, sq=None):
        rows_ = _rows()                     # numba: imported by the first push, not at start-up
        if not rows_.usable(weights, state, g):
            return False
        rows_.ftrl_rows(weights, state["z"], state["n"], rows, g, rows_.squares(sq, g),
                        rows_.hyper(weights.dtype, self.alpha, self.beta, self.l1, self.l2))
        return True

    def kernel_rule(self):
        return kernel.FTRL, (self.alpha, self.beta, self.l1, self.l2)
