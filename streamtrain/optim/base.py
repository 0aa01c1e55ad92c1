"""The optimizer interface and the registry of update rules by name.

Update rules are small pure functions of (weights, gradient, state), updated in place. The
same rule runs on a dense parameter or on the rows of a table the batch touched: every state
slot has the weights' shape ("full") or one number per row ("row"), and a rule only ever sees
the rows it updates (lazy, sparse-aware state). The Redis store runs the same arithmetic next
to the data. A rule is one module of this package: a subclass with ``kind``, ``options`` (its
hyperparameters as ``Option``), ``test_params()`` and ``@register``.
"""
from __future__ import annotations

import numpy as np

from streamtrain.errors import ConfigError
from streamtrain.registry import Registry
from streamtrain.schema import NUMBER, Option, check_options, non_negative

OPTIMIZERS = Registry("optimizer", group="streamtrain.optimizers")
register = OPTIMIZERS.register


def hyper(default: float, doc: str) -> Option:
    """A hyperparameter: a number >= 0."""
    return Option(default, NUMBER, check=non_negative, doc=doc)


class Optimizer:
    """Base: hyperparameters in ``options``; ``slots`` names the state; ``step`` updates."""

    kind = ""
    options: dict[str, Option] = {}
    slots: dict = {}            # slot name -> "full" | "row"
    zero_init = False           # rows start at zero whatever the initializer (FTRL)
    #: slots that are never negative (sums or moving averages of squares, step counts): a store
    #: that merges several trainers' changes keeps them so
    nonnegative: tuple = ()

    def __init__(self, **values):
        problems = check_options(self.options, values, what=f"optimizer '{self.kind}'")
        if problems:
            raise ConfigError(problems)
        self.hyper = {k: values.get(k, o.default) for k, o in self.options.items()}
        self.__dict__.update(self.hyper)

    @classmethod
    def test_params(cls) -> dict:
        """Hyperparameters the conformance suite builds this rule with (the defaults)."""
        return {}

    def get_config(self) -> dict:
        return {"type": self.kind, **self.hyper}

    def carry(self, source: "Optimizer", w: np.ndarray, state: dict) -> None:
        """Rewrite, in place, the ``state`` that ``source`` (another instance of this rule, other
        hyperparameters) left beside the weights ``w``, so that this one's next step starts from
        ``w`` as it is (an AutoML challenger with another rate, copied from its champion). The
        default: nothing to rewrite (the weights are the state)."""

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

    def step_rows(self, weights: np.ndarray, state: dict, rows: np.ndarray, g: np.ndarray,
                  sq: np.ndarray | None = None) -> bool:
        """``step`` on the distinct rows ``rows`` of a whole table's ``weights`` and ``state``,
        in place, if this rule has a compiled row update for these arrays (``optim/_rows.py``);
        False: the caller gathers the rows, calls ``step`` and scatters them back."""
        return False

    #: whether ``step`` uses ``sq``: layers then send per-example squared gradients
    squares = False

    def fuse_key(self, w: np.ndarray, g: np.ndarray, state: dict):
        """A key under which ``step_fused`` takes this dense parameter's step together with the
        others of the same key (one compiled pass), or None: ``step`` alone (the default)."""
        return None

    @staticmethod
    def step_fused(key, parts: list) -> None:
        """``step`` of each ``(w, g, state)`` of ``parts``, all of ``fuse_key`` ``key``."""
        raise NotImplementedError

    #: The per-coordinate rule, written once: a function ``rule(h, w, n, z, g, sq) -> (w, n, z)``
    #: of plain arithmetic and numpy ufuncs on one coordinate or on arrays of them (``n``, ``z``:
    #: the slots it keeps, else passed through), with ``h`` its hyperparameters and, last, a zero
    #: of the weights' type (a literal would widen float32 arithmetic). ``step`` runs it with
    #: numpy; the memory store's table rows (``_rows.py``), the write-back and the per-example
    #: core (``online/kernels.py``) compile the very same function. None: a rule that is not
    #: per coordinate (Adam's per-row step count) or not written so (it learns per batch).
    rule = None

    def kernel_rule(self) -> tuple[int, tuple] | None:
        """``(code, hyperparameters)`` of ``rule`` in the compiled per-example loop
        (``streamtrain.online.kernels.RULES[code]``), or None: the core cannot run it. A layer
        the core would learn whose rule has a ``rule`` but no ``kernel_rule`` is refused when the
        job starts (``online/plan.py``); one without a ``rule`` learns per batch."""
        return None


def step_dense(steps) -> None:
    """``opt.step(w, g, state, sq)`` of each ``(opt, w, g, state, sq)``: the parameters whose
    rule steps several at once (``fuse_key``; no ``sq``) go to it, one group per key."""
    groups: dict = {}
    for opt, w, g, state, sq in steps:
        key = opt.fuse_key(w, g, state) if sq is None else None
        if key is None:
            opt.step(w, g, state, sq)
        else:
            groups.setdefault(key, (opt, []))[1].append((w, g, state))
    for key, (opt, parts) in groups.items():
        opt.step_fused(key, parts)


def make_optimizer(config: dict | None, *, where: str = "optimizer") -> Optimizer:
    """Build an optimizer from ``{"type": ..., hyper...}``; errors carry the JSON path."""
    if not isinstance(config, dict):
        raise ConfigError([(where, f"expected an object like {{\"type\": \"adagrad\"}}, got {config!r}")])
    config = dict(config)
    cls = OPTIMIZERS.get(config.pop("type", None), where=f"{where}.type")
    try:
        return cls(**config)
    except ConfigError as err:
        raise ConfigError([(f"{where}.{p}", m) for p, m in err.problems]) from None
