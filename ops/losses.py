"""Loss layers. Each writes ``ctx.loss`` (mean per example) and ``ctx.predictions``; its output
is the predictions, so ``activation("<loss>")`` returns what a server would serve."""
from __future__ import annotations

import sys

import numpy as np

from .base import Layer, Option, flat_dim, register
from .dense import sigmoid
from streamtrain import lazy
from streamtrain.errors import ShapeError
from streamtrain.schema import positive

REDUCTION = Option("sum", (str,), ("sum", "mean"),
                   doc="gradient of the sum over the batch (online-learning steps) or of the mean")


SEQUENTIAL = {
    "sequential": Option(False, (bool,), doc="per-example updates of the linear and FM terms inside a batch"),
    "implicit": Option(True, (bool,), doc="sequential: each example's own update of its linear terms "
                                          "is implicit (cannot overshoot its label)"),
    "normalize": Option(True, (bool,), doc="sequential: divide an example's linear-term gradients by "
                                           "the norm of its linear features (at least 1)"),
}


def _check_sequential(layer) -> None:
    if layer.opts["sequential"] and layer.opts["reduction"] != "sum":
        raise ShapeError(f"layer '{layer.name}': sequential updates are per example: they need "
                         f"reduction 'sum', got {layer.opts['reduction']!r}")


def _learn(layer, ctx, z: np.ndarray, y: np.ndarray):
    """A sequential loss in training: (each example's output after the examples before it,
    the residuals of their updates) from the per-example engine; else (z, None)."""
    if layer.opts["sequential"] and ctx.training and ctx.engine is not None and len(z):
        zs, rho = ctx.engine.learn(ctx, z, y)
        return zs.astype(z.dtype), rho
    return z, None


def _scale(layer, n: int) -> float:
    return 1.0 if layer.opts["reduction"] == "sum" else 1.0 / max(n, 1)


_loss_kernels = lazy.module("streamtrain.ops._loss_kernels")
_ZERO_ONE = {np.dtype(t): np.array([0, 1], t) for t in (np.float32, np.float64)}


def _sigmoid_loss(ctx, name: str, z: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """``(sigmoid(z), mean of log(1 + exp(-|z|)) + max(z, 0) - y z)``, stable for any z: in one
    compiled pass (``_loss_kernels``, the same ``p`` bit for bit) once numba is loaded (a
    sequential loss or a compiled layer loaded it: a numpy-only model does not pay its import)
    for 1-D C-ordered float arrays of one dtype, else with numpy."""
    h = _ZERO_ONE.get(z.dtype)
    if (h is not None and len(z) and "numba" in sys.modules and y.dtype == z.dtype
            and z.flags.c_contiguous and y.flags.c_contiguous):
        e = np.abs(z, out=ctx.buffer((name, "e"), z.shape, z.dtype))
        np.exp(np.negative(e, out=e), out=e)
        p = np.empty_like(z)        # the predictions outlive the step (ctx.predictions): not reused
        return p, _loss_kernels().logloss_forward(z, y, e, p, h)
    p = sigmoid(z)
    losses = np.logaddexp(0, -np.abs(z)) + np.maximum(z, 0) - y * z
    return p, float(losses.mean()) if len(z) else 0.0


@register
class LogLoss(Layer):
    """Sigmoid cross-entropy on one logit per example; labels in {0, 1}.

    With ``sequential: true`` the terms of the logit the per-example engine can own (linear
    terms: a dim-1 embedding summed in, a bias, a dim-1 fc without activation; FM terms: an
    ``fm`` with ``reduce: true`` over an embedding that feeds nothing else; all reaching the
    loss through ``add``/``sum_pooling``) learn example by example inside each mini-batch, as a
    per-example learner would, and each example is predicted after the examples before it in
    the batch (``streamtrain.online``; the trainer installs the engine as ``ctx.engine``).
    Training only: evaluators predict from the parameters.
    """

    kind = "logloss"
    is_loss = True
    quality = "binary"
    options = {
        "reduction": REDUCTION,
        **SEQUENTIAL,
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(1,)]},
            {"options": {"reduction": "mean"}, "inputs": [(1,)], "tag": "mean"},
            {"options": {"sequential": True, "implicit": False}, "inputs": [(1,)], "tag": "sequential"},
        ], "bad": ("reduction", "avg")}

    def build(self, input_shapes, schema):
        return _one_per_example(self, input_shapes, "logit")

    def forward(self, ctx, xs):
        (z,) = xs
        z = z.reshape(-1)
        y = ctx.batch.labels.astype(z.dtype, copy=False)
        z, rho = _learn(self, ctx, z, y)
        p, ctx.loss = _sigmoid_loss(ctx, self.name, z, y)
        ctx.predictions = p
        ctx.saved[self.name] = (xs[0].shape, p, y, rho)
        return p

    def backward(self, ctx, gy):
        shape, p, y, rho = ctx.saved[self.name]
        if rho is None:
            return [((p - y) * _scale(self, len(p))).reshape(shape)]
        return [rho.astype(ctx.dtype).reshape(shape)]


AUTO = "auto"


def _number_or_auto(check):
    """A label unit's check: "auto", or a number that passes ``check``."""
    def number_or_auto(value):
        if isinstance(value, str):
            return None if value == AUTO else f'expected a number or "auto", got {value!r}'
        return check(value) if check is not None else None
    return number_or_auto


def _one_per_example(layer, input_shapes, what: str) -> tuple:
    """The shape of a loss over one value per example (its sequential options checked)."""
    (shape,) = input_shapes
    if flat_dim(shape) != 1:
        raise ShapeError(f"layer '{layer.name}': expects one {what} per example, got shape {tuple(shape)}")
    _check_sequential(layer)
    return (1,)


@register
class SoftmaxCE(Layer):
    """Softmax cross-entropy on ``K`` logits per example; labels are class indices ``0..K−1``
    (float labels are cast to int; a label that is not one raises ``ValueError``).
    Predictions are the class probabilities ``[B, K]``.

    With ``sequential: true`` the linear terms of the logits (an embedding of dim ``K`` summed
    over its fields, a bias or a linear fc of dim ``K``, reaching the loss through
    ``add``/``sum_pooling``) learn example by example inside each mini-batch, as a multi-class
    per-example learner would (``streamtrain.online.softmax``); ``normalize`` as for ``logloss``.
    """

    kind = "softmax_ce"
    is_loss = True
    quality = "multiclass"
    options = {"reduction": REDUCTION, "sequential": SEQUENTIAL["sequential"], "normalize": SEQUENTIAL["normalize"]}

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"classes": 4},
            {"options": {"reduction": "mean"}, "inputs": [(3,)], "classes": 3, "tag": "mean"},
            {"options": {"sequential": True}, "inputs": [(3,)], "classes": 3, "tag": "sequential"},
        ], "bad": ("reduction", "avg")}

    def build(self, input_shapes, schema):
        (shape,) = input_shapes
        if flat_dim(shape) < 2:
            raise ShapeError(f"layer '{self.name}': expects K >= 2 logits per example, got shape {tuple(shape)}")
        _check_sequential(self)
        return (flat_dim(shape),)

    def _classes(self, labels: np.ndarray, k: int) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            classes = labels.astype(np.int64)
        bad = (classes != labels) | (classes < 0) | (classes >= k)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"layer '{self.name}' (softmax_ce): label {float(labels[i])!r} of example {i} "
                             f"is not a class index in 0..{k - 1}")
        return classes

    def forward(self, ctx, xs):
        (x,) = xs
        z = x.reshape(len(x), -1)
        labels = ctx.batch.labels
        if not ctx.training and len(labels) and np.isnan(labels).all():
            classes = None                  # served records: no labels, the probabilities alone
        else:
            classes = self._classes(labels, z.shape[1])
            z, rho = _learn(self, ctx, z, classes)
        shifted = z - z.max(axis=1, keepdims=True)
        lse = np.log(np.exp(shifted).sum(axis=1))
        p = np.exp(shifted - lse[:, None])
        if classes is None:
            ctx.loss, rho = float("nan"), None
        else:
            losses = lse - shifted[np.arange(len(z)), classes]
            ctx.loss = float(losses.mean()) if len(z) else 0.0
        ctx.predictions = p
        ctx.saved[self.name] = (x.shape, p, classes, rho)
        return p

    def backward(self, ctx, gy):
        shape, p, classes, rho = ctx.saved[self.name]
        if rho is not None:             # (sequential: each example's residual at its own turn)
            return [rho.astype(ctx.dtype).reshape(shape)]
        g = p.copy()
        g[np.arange(len(p)), classes] -= 1
        if self.opts["reduction"] == "mean":
            g *= g.dtype.type(_scale(self, len(p)))
        return [g.reshape(shape)]


@register
class MSE(Layer):
    """Squared error of one output per example against the label. The output ``z`` learns the
    label in the units ``label_offset`` and ``label_scale`` give, ``t = (y − offset) / scale``
    (by default the label itself); the predictions are ``offset + scale · z``; ``ctx.loss`` is
    the plain mean of ``(z − t)²`` (no ½: with the defaults it reads as the MSE metric) and the
    gradient ``2 (z − t)``. Labels far from those units (a price of 50,000 from terms that move
    by about 1 a step) are warned about on a job's first batch (``streamtrain/label_units.py``).

    ``sequential: true`` as for ``logloss``: the linear and FM terms learn example by example
    inside each batch, each example predicted after the ones before it; an example's implicit
    step on its linear terms is ``2 (z − t) / (1 + 2K)`` (K: how far a unit residual moves its
    output), which cannot pass its label however large the step size.
    """

    kind = "mse"
    is_loss = True
    quality = "regression"
    options = {
        "reduction": REDUCTION,
        **SEQUENTIAL,
        "label_offset": Option(0.0, (int, float, str), check=_number_or_auto(None),
                               doc="the output learns (label − offset) / scale and predicts offset + scale · "
                                   "output; \"auto\": the first batch's mean, agreed by the trainers of a "
                                   "store and kept in its checkpoints"),
        "label_scale": Option(1.0, (int, float, str), check=_number_or_auto(positive),
                              doc="see label_offset (\"auto\": the first batch's standard deviation)"),
    }

    @classmethod
    def test_params(cls):
        return {"cases": [
            {"inputs": [(1,)]},
            {"options": {"reduction": "mean"}, "inputs": [(1,)], "tag": "mean"},
            {"options": {"sequential": True, "implicit": False}, "inputs": [(1,)], "tag": "sequential"},
            {"options": {"label_offset": 3.5, "label_scale": 2.0}, "inputs": [(1,)], "tag": "units"},
        ], "bad": ("reduction", "none")}

    def build(self, input_shapes, schema):
        return _one_per_example(self, input_shapes, "output")

    def forward(self, ctx, xs):
        (x,) = xs
        offset, scale = self.opts["label_offset"], self.opts["label_scale"]
        if AUTO in (offset, scale):
            raise ValueError(f"layer '{self.name}' (mse): label_offset / label_scale \"auto\" are settled from "
                             "the first batch before the model is built (streamtrain.label_units), not here")
        z = x.reshape(-1).copy()       # the input may be a buffer the next batch overwrites
        y = ctx.batch.labels.astype(z.dtype, copy=False)
        plain = offset == 0 and scale == 1
        t = y if plain else ((y - offset) / scale).astype(z.dtype)
        z, rho = _learn(self, ctx, z, t)
        diff = z - t
        ctx.loss = float(np.mean(diff * diff)) if len(z) else 0.0
        ctx.predictions = z if plain else (offset + scale * z).astype(z.dtype)
        ctx.saved[self.name] = (x.shape, diff, rho)
        return ctx.predictions

    def backward(self, ctx, gy):
        shape, diff, rho = ctx.saved[self.name]
        if rho is not None:
            return [rho.astype(ctx.dtype).reshape(shape)]
        return [(diff * diff.dtype.type(2 * _scale(self, len(diff)))).reshape(shape)]
