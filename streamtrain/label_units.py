"""A regression's labels against the units its terms learn in.

An ``mse`` model's terms move by about 1 a step (FTRL's and Adagrad's steps do not grow with
the label), so labels far from 1 in size (a price around 50,000) take most of a stream to
reach: the loss's ``label_offset`` and ``label_scale`` fix it (``ops/losses.py``). The daemon
checks the first batch a job applies and says which values to set, naming the loss layer as the
job config does (an AutoML job's candidates build layers of their own names, one per candidate).
The weights learnt are in those units: a checkpoint records them (``units``) and restoring it
under others is refused (``mismatch``).
"""
from __future__ import annotations

import logging

import numpy as np

from .config import loss_layer

log = logging.getLogger("streamtrain")
FAR = 10.0      # |mean| or standard deviation above this: the terms would take long to reach them


class UnitsCheck:
    """A job hook (``job.hooks``): on the first applied batch of an ``mse`` job whose loss keeps
    the default units, one warning when the labels are far from them."""

    def __init__(self, layers):
        self.loss = loss_layer(layers, "mse")
        self.done = self.loss is None or self.loss.get("label_offset", 0) != 0 or self.loss.get("label_scale", 1) != 1

    def __call__(self, job, batch, result) -> None:
        if self.done or not result.applied or not batch.size:
            return
        self.done = True
        y = np.asarray(batch.labels, np.float64)
        mean, sd = float(y.mean()), float(y.std())
        if abs(mean) > FAR or sd > FAR:
            name = self.loss.get("name")
            log.warning("loss '%s' (mse): the first batch's labels have mean %.4g and standard deviation %.4g, "
                        "far from the units its terms learn in (steps of about 1): set layers.%s.label_offset=%.6g "
                        "and layers.%s.label_scale=%.6g (it then learns (label - offset) / scale and predicts "
                        "offset + scale * output)", name, mean, sd, name, mean, name, max(sd, 1e-6))


def units(layers) -> dict | None:
    """How a checkpoint records the units an ``mse`` job's weights are in (None: not a regression)."""
    loss = loss_layer(layers, "mse")
    if loss is None:
        return None
    return {"loss": loss.get("name"), "offset": float(loss.get("label_offset", 0.0)),
            "scale": float(loss.get("label_scale", 1.0))}


def mismatch(layers, meta: dict, where) -> str | None:
    """What is wrong with using a checkpoint whose weights are in other label units than the
    job's loss gives (they would predict, and go on learning, in the wrong units); None when
    they agree or the checkpoint does not say (one written before it recorded them)."""
    saved, ours = meta.get("label_units"), units(layers)
    if not isinstance(saved, dict) or ours is None:
        return None
    offset, scale = saved.get("offset"), saved.get("scale")
    if not all(isinstance(v, (int, float)) for v in (offset, scale)) or (offset, scale) == (ours["offset"], ours["scale"]):
        return None
    name = ours["loss"]
    return (f"checkpoint {where} was trained with label_offset {offset!r} and label_scale {scale!r}, this job's "
            f"loss '{name}' has {ours['offset']!r} and {ours['scale']!r}: its weights are in the checkpoint's units, "
            f"so set --set layers.{name}.label_offset={offset!r} --set layers.{name}.label_scale={scale!r}")
