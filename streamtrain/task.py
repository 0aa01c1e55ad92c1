"""A job whose stream says what its label is: ``"task": "auto"`` (``examples/auto.json``).

The job's loss is a click's (``logloss``) as written; its reader takes any finite number as a
label until the first batch the job applies decides, before the model is built: labels all 0 or
1 keep the loss (later labels that are neither are bad lines, ``label``, as under any logloss);
any other number makes the job a regression: the loss becomes ``mse`` in the first batch's units
(``label_offset`` and ``label_scale`` "auto", which ``label_units`` settles next). The decision
is then the job config's: its checkpoints record the layers, a restored run takes the
checkpoint's, trainers sharing a Redis store take the first one's (``st:{<ns>/meta}:task``, set
once), and ``eval``, ``serve --restore`` and ``serve`` from a store adopt what was decided.
"""
from __future__ import annotations

import copy
import logging

import numpy as np

from . import label_units
from .config import loss_layer
from .ops.losses import AUTO

log = logging.getLogger("streamtrain")
CLICK, REGRESSION = "click", "regression"


def auto(config: dict) -> bool:
    return config.get("task") == "auto"


def of_labels(labels) -> str:
    """A click's labels (all 0 or 1), else a regression's."""
    y = np.asarray(labels, np.float64)
    return CLICK if len(y) and bool(np.isin(y, (0.0, 1.0)).all()) else REGRESSION


def of_layers(layers) -> str | None:
    """What a checkpoint's (or a decided job's) layers learn: None when they do not say."""
    if loss_layer(layers, "mse") is not None:
        return REGRESSION
    return CLICK if loss_layer(layers, "logloss") is not None else None


def decided(config: dict, task: str) -> dict:
    """The config with the task decided: a regression's loss is ``mse`` in "auto" units (those a
    config names are kept), and the reader takes any number; a click's is as written."""
    config = copy.deepcopy(config)
    config["task"] = task
    if task == REGRESSION:
        loss = loss_layer(config["layers"], "logloss")
        if loss is not None:
            loss["type"] = "mse"
            loss.setdefault("label_offset", AUTO)
            loss.setdefault("label_scale", AUTO)
    return config


def for_checkpoint(config: dict, meta: dict) -> dict:
    """``eval`` and ``serve --restore``: the task the checkpoint's layers were trained for."""
    task = of_layers(meta.get("layers")) if auto(config) else None
    return decided(config, task) if task is not None else config


def agreed(store) -> str | None:
    """The task the trainers on a Redis store decided (None: none yet, or not a Redis store)."""
    task = label_units.stored(store, "task", "the task")
    return task if task in (CLICK, REGRESSION) else None


def settle(job, labels, restoring: dict | None) -> None:
    """Decide the task of a ``task: auto`` job before its model is built: a restored
    checkpoint's, the store's (another trainer's), or the first batch's labels'."""
    task = of_layers(restoring.get("layers")) if restoring is not None and restoring.get("params") else None
    where = "the checkpoint restored"
    if task is None:
        task, where = of_labels(labels), f"the first batch's {len(labels)} labels"
    there = label_units.agree(job.store, "task", task, where.startswith("the checkpoint"), "the task", agreed)
    if there != task:
        task, where = there, "the trainers already on this store"
    job.config = decided(job.config, task)
    job.binary_labels = task == CLICK
    log.info("task auto: %s, from %s", "a click's (labels 0 and 1): the loss as written" if task == CLICK else
             "a regression (labels other than 0 and 1): the loss is mse", where)


def settle_job(job, labels):
    """``settle`` for a job before its model is built, retried while its store is unreachable
    (``STOPPED`` if a stop came meanwhile)."""
    from . import checkpoint
    restoring = checkpoint.read_meta(job.restore_from)[1] if job.restore_from else None
    return job._until_store_answers("agree on the task", lambda: settle(job, labels, restoring))


def keep_binary(batch, malformed):
    """A click job's batch without the rows whose label is neither 0 nor 1 (read before the task
    was decided, or by a reader that takes any number), each counted a bad line (``label``)."""
    ok = np.isin(batch.labels, (0.0, 1.0))
    if ok.all():
        return batch
    malformed.add("label", int((~ok).sum()))
    kept = batch.take(np.flatnonzero(ok))
    kept.offsets = batch.offsets
    return kept
