"""The layer lifecycle every kind follows, and the registry of kinds by name.

``__init__`` stores config (validated against ``options``), ``build`` declares parameters by
name and returns the output shape, ``forward`` keeps in the context what ``backward`` needs,
``backward`` returns input gradients and adds parameter gradients into the context. The
engine (``streamtrain.graph``), not the layer, handles compute-once and gradient
accumulation over several consumers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar

import numpy as np

from streamtrain.errors import ConfigError, ShapeError
from streamtrain.params import INITS, ParamSpec
from streamtrain.registry import Registry
from streamtrain.schema import REQUIRED, Option, check_options, non_negative, positive, probability  # noqa: F401

LAYERS = Registry("layer kind", group="streamtrain.layers")
register = LAYERS.register


INIT_OPTIONS = {
    "init": Option("normal", (str,), INITS, doc="initializer of the weights"),
    "init_scale": Option(0.01, (int, float), check=non_negative, doc="std (normal) or bound (uniform)"),
}

RESERVED = ("name", "type", "inputs", "param", "optimizer")
#: in ``test_params``, an input that is the batch's categorical fields (what ``sparse_input`` gives)
SPARSE = "sparse"


@dataclass(frozen=True)
class SparseShape:
    """The 'shape' of a sparse input: the categorical fields it carries, and (for a layer that
    derives fields, such as ``feature_cross``) how to get them for a batch:
    ``source(ctx, names) -> [SparseField]``; ``None`` reads them from the batch."""

    fields: tuple
    source: Callable | None = field(default=None, compare=False)


class Layer:
    """Base of every layer kind. Subclasses set ``kind``, ``options`` and ``arity``."""

    kind: ClassVar[str] = ""
    options: ClassVar[dict[str, Option]] = {}
    arity: ClassVar[tuple[int, int | None]] = (1, 1)   # (min, max) inputs; max None = any
    reads_batch: ClassVar[bool] = False                  # input layers
    is_loss: ClassVar[bool] = False
    # a loss: what its predictions are scored as (progressive figures, drift): "binary",
    # "multiclass" or "regression" (streamtrain/progressive.py); None: not scored
    quality: ClassVar[str | None] = None

    def __init__(self, name: str, inputs=(), *, param: str | None = None,
                 optimizer: dict | None = None, **options):
        if isinstance(inputs, str):
            inputs = [inputs]
        self.name = name
        self.inputs = list(inputs)
        self.param = param
        self.optimizer = optimizer
        problems = self.option_problems(options)
        if problems:
            raise ConfigError([(f"layers.{name}.{key}", msg) for key, msg in problems])
        self.opts = {k: options.get(k, o.default) for k, o in self.options.items()}
        self.params: dict[str, ParamSpec] = {}
        self.output_shape = None

    # ---- config -------------------------------------------------------------------------
    @classmethod
    def option_problems(cls, options: dict) -> list[tuple[str, str]]:
        """Every problem with ``options`` as (key, message); empty when they are fine."""
        return check_options(cls.options, options, what=f"layer type '{cls.kind}'", noun="option")

    @classmethod
    def test_params(cls) -> dict:
        """What the conformance suite (tests/test_ops_conformance.py) builds this kind with:
        ``{"cases": [case, ...], "bad": (option, a value it must refuse) or None}``; a case is
        ``{"options", "inputs" (per-example shapes, or SPARSE), "batch" (random_batch
        arguments), "classes" (labels as class indices), "extra" (param/optimizer), "tag"}``,
        every key optional (one dense input of shape (4,))."""
        raise NotImplementedError(f"layer kind '{cls.kind}' has no test_params()")

    def get_config(self) -> dict:
        cfg = {"name": self.name, "type": self.kind, "inputs": list(self.inputs)}
        cfg.update(self.opts)
        if self.param is not None:
            cfg["param"] = self.param
        if self.optimizer is not None:
            cfg["optimizer"] = dict(self.optimizer)
        return cfg

    @classmethod
    def from_config(cls, config: dict) -> "Layer":
        config = dict(config)
        config.pop("type", None)
        return cls(**config)

    # ---- parameters ---------------------------------------------------------------------
    def param_name(self, slot: str) -> str:
        """Global name of this layer's parameter ``slot``; layers with the same ``param`` share it."""
        return f"{self.param or self.name}.{slot}"

    def declare(self, slot: str, shape, *, table: bool = False, init: str | None = None,
                scale: float | None = None) -> ParamSpec:
        spec = ParamSpec(
            name=self.param_name(slot), shape=tuple(int(s) for s in shape), table=table,
            init=init if init is not None else self.opts.get("init", "normal"),
            scale=float(scale if scale is not None else self.opts.get("init_scale", 0.01)),
            optimizer=self.optimizer)
        self.params[slot] = spec
        return spec

    # ---- lifecycle (override) -----------------------------------------------------------
    def build(self, input_shapes: list, schema) -> tuple:
        """Declare parameters; return the per-example output shape."""
        raise NotImplementedError

    def forward(self, ctx, xs: list):
        raise NotImplementedError

    def backward(self, ctx, gy) -> list:
        """Gradients w.r.t. each input (None where there is none); parameter grads go to ctx."""
        raise NotImplementedError

    def table_ids(self, ctx) -> dict[str, np.ndarray]:
        """For layers with table parameters: the ids this batch touches, per table name."""
        return {}

    #: whether ``table_ids`` reads nothing but ``ctx.batch`` and ``ctx.memo`` (no parameters, no
    #: graph input attached by the trainer, no state of its own): the reader's thread may then
    #: work it out ahead of the step (``Graph.prepare``)
    ids_from_batch: ClassVar[bool] = False

    # ---- terms of the logit the per-example engine can own (``streamtrain.online``) ------
    #: whether the output is the layer's parameter rows pooled per field, ``[B, F, d]`` (an
    #: embedding): it then declares them with ``field_terms``
    pools_rows: ClassVar[bool] = False

    def linear_width(self) -> int | None:
        """How many numbers per example this layer outputs when they are linear in its
        parameters (and free of other inputs' gradients): a wide embedding's, a bias's, a linear
        fc's ``dim``; None for any other layer."""
        return None

    def is_linear(self) -> bool:
        """Whether this layer's output is one number per example, linear in its parameters: a
        wide embedding, a bias, a dim-1 linear fc."""
        return self.linear_width() == 1

    def linear_terms(self, ctx) -> list:
        """For a linear layer: a ``streamtrain.online.terms.Term`` per parameter, this batch."""
        raise NotImplementedError

    def field_terms(self, ctx) -> list:
        """For a layer that ``pools_rows``: a ``Term`` per parameter with each occurrence's field."""
        raise NotImplementedError

    def pairwise_input(self) -> str | None:
        """For a layer whose output is the FM sum ``½ (|Σ_f e_f|² − Σ_f |e_f|²)`` of its input's
        fields, one number per example: that input's name."""
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} inputs={self.inputs}>"


def flat_dim(shape) -> int:
    """Number of features per example of a dense per-example shape."""
    if isinstance(shape, SparseShape):
        raise ShapeError("a sparse input cannot be used where dense features are expected")
    return int(np.prod(shape)) if len(shape) else 1
