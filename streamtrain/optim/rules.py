"""Update rules as small pure functions of (weights, gradient, state), updated in place.

The same rule runs on a dense parameter or on the rows of a table the batch touched: every
state slot has the weights' shape ("full") or one number per row ("row"), and a rule only
ever sees the rows it updates (lazy, sparse-aware state). The Redis store runs the same
arithmetic next to the data.
"""
from __future__ import annotations

import numpy as np

from streamtrain.errors import ConfigError
from streamtrain.online import terms as kernel


class Optimizer:
    """Base: hyperparameters in ``defaults``; ``slots`` names the state; ``step`` updates."""

    kind = ""
    defaults: dict = {}
    slots: dict = {}            # slot name -> "full" | "row"
    zero_init = False           # rows start at zero whatever the initializer (FTRL)

    def __init__(self, **hyper):
        unknown = sorted(set(hyper) - set(self.defaults))
        if unknown:
            raise ConfigError([(k, f"unknown hyperparameter for optimizer '{self.kind}' "
                                   f"(known: {', '.join(self.defaults)})") for k in unknown])
        self.hyper = {**self.defaults, **hyper}
        for key, value in self.hyper.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ConfigError([(key, f"must be a number >= 0, got {value!r}")])
        self.__dict__.update(self.hyper)

    def get_config(self) -> dict:
        return {"type": self.kind, **self.hyper}

    def state_shapes(self, weight_shape: tuple, table: bool) -> dict[str, tuple]:
        """Shapes of the state slots for a dense weight or for ``weight_shape`` rows of a table."""
        row = (weight_shape[0], 1) if table else (1,)
        return {k: (tuple(weight_shape) if how == "full" else row) for k, how in self.slots.items()}

    def init_state(self, weight_shape: tuple, table: bool, dtype=np.float32) -> dict:
        return {k: np.zeros(s, dtype) for k, s in self.state_shapes(weight_shape, table).items()}

    def step(self, w: np.ndarray, g: np.ndarray, state: dict, sq: np.ndarray | None = None) -> None:
        """Update ``w`` in place by the gradient ``g``. ``sq`` (optional, ``g``'s shape) is the
        sum over the batch's examples of each example's squared gradient: rules that accumulate
        squared gradients (Adagrad, FTRL) add it instead of ``g²``, so a mini-batch moves their
        accumulators exactly as its examples one by one would (``g²`` of the batch sum counts
        ``B`` agreeing examples ``B²`` times)."""
        raise NotImplementedError

    #: whether ``step`` uses ``sq``: layers then send per-example squared gradients
    squares = False

    def kernel_rule(self) -> tuple[int, tuple] | None:
        """``(code, hyperparameters)`` of this rule in the compiled per-example loop
        (``streamtrain.online.kernels``), or None: the parameters it trains
        then learn per batch."""
        return None


class SGD(Optimizer):
    """w -= lr * g"""

    kind = "sgd"
    defaults = {"lr": 0.01}

    def step(self, w, g, state, sq=None):
        w -= self.lr * g

    def kernel_rule(self):
        return kernel.SGD, (self.lr,)


class Momentum(Optimizer):
    """v = momentum * v + g;  w -= lr * v"""

    kind = "momentum"
    defaults = {"lr": 0.01, "momentum": 0.9}
    slots = {"v": "full"}

    def step(self, w, g, state, sq=None):
        v = state["v"]
        v *= self.momentum
        v += g
        w -= self.lr * v


class Adagrad(Optimizer):
    """n += g²;  w -= lr * g / (sqrt(n) + eps)"""

    kind = "adagrad"
    defaults = {"lr": 0.05, "eps": 1e-7, "initial_accumulator": 0.0}
    slots = {"n": "full"}

    def init_state(self, weight_shape, table, dtype=np.float32):
        state = super().init_state(weight_shape, table, dtype)
        state["n"] += self.initial_accumulator
        return state

    squares = True

    def step(self, w, g, state, sq=None):
        n = state["n"]
        n += g * g if sq is None else sq
        w -= self.lr * g / (np.sqrt(n) + self.eps)

    def kernel_rule(self):
        return kernel.ADAGRAD, (self.lr, self.eps)


class Adam(Optimizer):
    """Adam with a step count per row, so bias correction is right for rarely seen ids."""

    kind = "adam"
    defaults = {"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}
    slots = {"m": "full", "v": "full", "t": "row"}

    def step(self, w, g, state, sq=None):
        m, v, t = state["m"], state["v"], state["t"]
        t += 1
        m *= self.beta1
        m += (1 - self.beta1) * g
        v *= self.beta2
        v += (1 - self.beta2) * g * g
        m_hat = m / (1 - self.beta1 ** t)
        v_hat = v / (1 - self.beta2 ** t)
        w -= self.lr * m_hat / (np.sqrt(v_hat) + self.eps)


class FTRL(Optimizer):
    """FTRL-Proximal (McMahan et al. 2013), per coordinate. Weights are a function of (z, n):
    rows start at zero whatever the layer's initializer."""

    kind = "ftrl"
    defaults = {"alpha": 0.05, "beta": 1.0, "l1": 0.0, "l2": 0.0}
    slots = {"z": "full", "n": "full"}
    zero_init = True

    squares = True

    def step(self, w, g, state, sq=None):
        z, n = state["z"], state["n"]
        g2 = g * g if sq is None else sq
        sigma = (np.sqrt(n + g2) - np.sqrt(n)) / self.alpha
        z += g - sigma * w
        n += g2
        shrunk = np.sign(z) * np.maximum(np.abs(z) - self.l1, 0)
        w[...] = -shrunk / ((self.beta + np.sqrt(n)) / self.alpha + self.l2)

    def kernel_rule(self):
        return kernel.FTRL, (self.alpha, self.beta, self.l1, self.l2)


OPTIMIZERS = {cls.kind: cls for cls in (SGD, Momentum, Adagrad, Adam, FTRL)}


def make_optimizer(config: dict | None, *, where: str = "optimizer") -> Optimizer:
    """Build an optimizer from ``{"type": ..., hyper...}``; errors carry the JSON path."""
    if not isinstance(config, dict):
        raise ConfigError([(where, f"expected an object like {{\"type\": \"adagrad\"}}, got {config!r}")])
    config = dict(config)
    kind = config.pop("type", None)
    if kind not in OPTIMIZERS:
        raise ConfigError([(f"{where}.type", f"unknown optimizer {kind!r} (known: {', '.join(OPTIMIZERS)})")])
    try:
        return OPTIMIZERS[kind](**config)
    except ConfigError as err:
        raise ConfigError([(f"{where}.{p}", m) for p, m in err.problems]) from None
