"""A regression's labels against the units its terms learn in.

An ``mse`` model's terms move by about 1 a step (FTRL's and Adagrad's steps do not grow with
the label), so labels far from 1 in size (a price around 50,000) take most of a stream to
reach: the loss's ``label_offset`` and ``label_scale`` fix it (``ops/losses.py``). The daemon
checks the first batch a job applies and says which values to set, naming the loss layer as the
job config does (an AutoML job's candidates build layers of their own names, one per candidate).
The weights learnt are in those units: a checkpoint records them (``units``) and restoring it
under others is refused (``mismatch``).

``"auto"`` (``examples/linear.json``) settles them before the model is built (``settle``): from
the checkpoint a run restores, else from the units the trainers already on a Redis store agreed
(the first one's, ``SET NX``), else from the first batch's labels (their mean and standard
deviation). The job's config then holds the numbers, so its checkpoints, candidates and served
predictions use them; ``streamtrain serve`` reads them from the checkpoint or the store.
"""
from __future__ import annotations

import copy
import json
import logging

import numpy as np

from .config import loss_layer
from .errors import ConfigError
from .ops.losses import AUTO
DEFAULT = {"offset": 0.0, "scale": 1.0}     # what a checkpoint that records none was trained in
FEW = 100                                   # a first batch of fewer labels: units said to be rough

log = logging.getLogger("streamtrain")
FAR = 10.0      # |mean| or standard deviation above this: the terms would take long to reach them


class UnitsCheck:
    """A job hook (``job.hooks``): on the first applied batch of an ``mse`` job whose loss keeps
    the default units, one warning when the labels are far from them."""

    def __init__(self, layers):
        self.loss = loss_layer(layers, "mse")
        self.done = self.loss is None or self.loss.get("label_offset", 0) != 0 or self.loss.get("label_scale", 1) != 1
        # ("auto" is not 0: settled units are the job's own)

    def __call__(self, job, batch, result) -> None:
        if self.done or not result.applied or not batch.size:
            return
        self.done = True
        y = np.asarray(batch.labels, np.float64)
        mean, sd = float(y.mean()), float(y.std())
        if abs(mean) > FAR or sd > FAR:
            name, given = self.loss.get("name"), from_labels(y)     # what "auto" would settle
            log.warning("loss '%s' (mse): the first batch's labels have mean %.4g and standard deviation %.4g, "
                        "far from the units its terms learn in (steps of about 1): set layers.%s.label_offset=%.6g "
                        "and layers.%s.label_scale=%.6g (it then learns (label - offset) / scale and predicts "
                        "offset + scale * output; both \"auto\" settle them from the first batch, as examples/linear.json does)",
                        name, mean, sd, name, given["offset"], name, given["scale"])


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


# ---- "auto" -----------------------------------------------------------------------------------
def regression(layers) -> bool:
    return loss_layer(layers, "mse") is not None


def auto(layers) -> bool:
    """Does the job's ``mse`` loss leave either unit to be settled?"""
    loss = loss_layer(layers, "mse")
    return loss is not None and AUTO in (loss.get("label_offset"), loss.get("label_scale"))


def from_labels(labels) -> dict:
    """The units of a batch's labels: their mean and standard deviation (when they are all one
    value, the size of that value, at least 1), to six significant digits."""
    y = np.asarray(labels, np.float64)
    y = y[np.isfinite(y)]
    mean, sd = (float(y.mean()), float(y.std())) if len(y) else (0.0, 0.0)
    scale = sd if sd > 1e-9 * max(1.0, abs(mean)) else max(1.0, abs(mean))
    return {"offset": float(f"{mean:.6g}"), "scale": float(f"{scale:.6g}")}


def with_units(config: dict, units: dict) -> dict:
    """The config with its loss's "auto" units replaced by ``units``' numbers."""
    config = {**config, "layers": copy.deepcopy(config["layers"])}
    loss = loss_layer(config["layers"], "mse")
    for key, unit in (("label_offset", "offset"), ("label_scale", "scale")):
        if loss.get(key) == AUTO:
            loss[key] = float(units[unit])
    return config


def for_checkpoint(config: dict, meta: dict) -> dict:
    """The config with the units a checkpoint's weights are in (``eval``, ``serve --restore``)."""
    if not auto(config["layers"]):
        return config
    saved = meta.get("label_units")
    return with_units(config, saved if isinstance(saved, dict) else DEFAULT)


def agreed(store) -> dict | None:
    """The units the trainers on a Redis store settled (None: none yet, or not a Redis store)."""
    units = stored(store, "label_units", "the label units")
    return units if isinstance(units, dict) and {"offset", "scale"} <= set(units) else None


def stored(store, name: str, what: str):
    """The JSON value the trainers on a Redis store set once under the meta key ``name`` (None:
    none yet, not JSON, or not a Redis store): the label units, the task (``task.py``)."""
    if getattr(store, "io", None) is None:
        return None
    raw = store.io.meta("GET", _meta_key(store, name), what=f"read {what}")
    try:
        return json.loads(raw) if raw is not None else None
    except ValueError:
        return None


def agree(store, name: str, value, force: bool, what: str, read):
    """The value in force on the store under the meta key ``name``: ``value`` unless another
    trainer set it first (``read(store)``: theirs, checked), or with ``force`` (a restored
    checkpoint's) ``value`` in place of theirs. A memory store is this process's alone."""
    if getattr(store, "io", None) is None:
        return value
    key, text = _meta_key(store, name), json.dumps(value, sort_keys=True)
    if force:
        store.io.meta("SET", key, text, what=f"set {what}")
        return value
    store.io.meta("SET", key, text, "NX", what=f"agree on {what}")
    return read(store) or value


def _meta_key(store, name: str) -> bytes:
    from .store import redis_keys
    return redis_keys.meta_key(store.ns, name)


def _check_store(job) -> None:
    ours, there = units(job.config["layers"]), agreed(job.store)
    if ours is None or there is None or (there["offset"], there["scale"]) == (ours["offset"], ours["scale"]):
        return
    name = ours["loss"]
    raise ConfigError([("layers", f"the trainers on this store settled label_offset {there['offset']!r} and "
                                  f"label_scale {there['scale']!r}, this job's loss '{name}' has {ours['offset']!r} "
                                  f"and {ours['scale']!r}: the store's weights are in its units, so set --set "
                                  f"layers.{name}.label_offset=auto --set layers.{name}.label_scale=auto")])


def settle(job, labels, restoring: dict | None) -> None:
    """Replace the job config's "auto" units by numbers before its model is built: a restored
    checkpoint's (``restoring``: its meta), the store's, or the first batch's. Numbers given
    are checked against those the trainers on a Redis store settled, if any."""
    if not auto(job.config["layers"]):
        _check_store(job)
        return
    if restoring is not None and restoring.get("params"):
        saved = restoring.get("label_units")
        units, where = (saved if isinstance(saved, dict) else DEFAULT), "the checkpoint restored"
    else:
        units, where = from_labels(labels), f"the first batch's {len(labels)} labels"
    settled = agree(job.store, "label_units", units, restoring is not None and bool(restoring.get("params")),
                    "the label units", agreed)
    if settled != units:
        where = "the trainers already on this store"
    job.config = with_units(job.config, settled)
    loss = loss_layer(job.config["layers"], "mse")
    log.info("loss '%s' (mse): label_offset %r and label_scale %r, from %s", loss.get("name"),
             loss["label_offset"], loss["label_scale"], where)
    if where.startswith("the first batch's") and len(labels) < FEW:
        log.warning("loss '%s' (mse): its label units come from a first batch of only %d labels; if the labels' "
                    "mean and spread are far from these, set them: --set layers.%s.label_offset=<mean> --set "
                    "layers.%s.label_scale=<standard deviation>", loss.get("name"), len(labels),
                    loss.get("name"), loss.get("name"))
