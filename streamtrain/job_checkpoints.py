"""A job's checkpoints: restoring one, periodic ones (every N batches / N seconds, and SIGHUP's), the final one,
and what one holds: the store's snapshot after a flush (every update in it), the offsets
committed with it (``Job.offsets``: only durable batches'), the step, and the graph store.

A failed periodic checkpoint is logged and training goes on; a failed final one is kept in
``job.checkpoint_error`` (``streamtrain run`` exits 3). The previous checkpoint stays either way.
"""
from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from . import checkpoint, label_units, layers_diff, reader_format
from .automl import attach as automl_attach
from .backoff import STOPPED
from .errors import CheckpointError, StoreError, StoreInterrupted
from .saved import schema_json

log = logging.getLogger("streamtrain")


def restore(job, where) -> dict:
    """Load the checkpoint at ``where`` into the store (and graph store), take its step and
    examples, and move the reader back to its offsets; its meta."""
    snap, meta = checkpoint.read(where)
    path = checkpoint.resolve(where)
    params = job.trainer.params if hasattr(job.trainer, "search") else job.graph.params   # AutoML: every candidate's
    checkpoint.check_fits(snap, params, path)
    wrong_units = label_units.mismatch(job.config["layers"], meta, path)
    if wrong_units:
        raise CheckpointError(wrong_units)
    _say_other_fields(meta.get("schema"), job.graph.schema, path)
    changed = layers_diff.say(meta.get("layers"), job.config["layers"])
    if changed:
        log.warning("checkpoint %s: %s", path, changed)
    for read_otherwise in reader_format.problems(meta, job.config):
        log.warning("checkpoint %s: %s (the terms it concerns relearn meanwhile)", path, read_otherwise)
    job.store.restore(snap)
    if job.graph_input is not None and "graph" in meta["arrays"]:
        job.graph_input.store.restore(meta["arrays"]["graph"])
    automl_attach.restore(job, meta)
    job.trainer.batches = meta.get("step", 0)
    job.trainer.examples = job.restored_examples = meta.get("examples", 0)
    if meta.get("offsets") and job.source.seek(meta["offsets"]) is not False:    # False: nothing to seek
        job.sought = True
    log.info("restored checkpoint %s (step %d)", path, meta.get("step", 0))
    return meta


def _say_other_fields(saved, schema, where) -> None:
    """A warning when the checkpoint was trained on other fields than this stream's (a column
    added or renamed in the log, or the checkpoint of another stream): which differ; the
    weights of the fields both have carry over, the others' start afresh."""
    if not isinstance(saved, dict):
        return
    for kind, theirs, ours in (("categorical", saved.get("sparse"), schema.sparse),
                               ("numeric", saved.get("dense"), schema.dense)):
        if not isinstance(theirs, list) or list(theirs) == list(ours):
            continue
        only_ckpt = [f for f in theirs if f not in ours]
        only_ours = [f for f in ours if f not in theirs]
        if not (only_ckpt or only_ours):
            continue
        common = "none in common: the checkpoint of another stream?" if not set(theirs) & set(ours) else \
            "the weights of the fields both have carry over"
        log.warning("checkpoint %s was trained on other %s fields than this stream's: only in the checkpoint %s, "
                    "only in this stream %s (%s)", where, kind, ", ".join(only_ckpt) or "none",
                    ", ".join(only_ours) or "none", common)


def maybe_write(job) -> None:
    """After every batch: write one if due (or asked for); a failure is logged, training goes on."""
    cfg = job.config.get("checkpoint", {})
    job._ckpt_batches += 1
    every_b, every_s = cfg.get("every_batches") or 0, cfg.get("every_seconds") or 0
    due = (job.checkpoint_requested or (every_b and job._ckpt_batches >= every_b)
           or (every_s and time.monotonic() - job._ckpt_time >= every_s))
    if not due or not cfg.get("dir"):
        job.checkpoint_requested = False
        return
    try:
        write(job)
    except OSError as err:
        log.error("checkpoint failed, keeping the previous one: %s", err)


def write_final(job) -> None:
    """At the end of a run: a failure is kept in ``checkpoint_error`` (exit code 3)."""
    try:
        write(job)
    except StoreInterrupted:
        job.store_down = True
    except (OSError, StoreError) as err:
        job.checkpoint_error = f"{type(err).__name__}: {err}"
        try:
            kept = checkpoint.resolve(job.config["checkpoint"]["dir"])
        except (OSError, CheckpointError):
            kept = "none"
        log.error("final checkpoint failed: %s; the newest checkpoint stays %s (exit code 3)",
                  job.checkpoint_error, kept)


def _extra(job) -> dict:
    """What a checkpoint's meta holds beside the parameters: the layers and the fields the model
    was built on, what its reader did to their numbers, the label units of a regression's
    weights, the AutoML search."""
    extra = {"schema": schema_json(job.graph.schema), **automl_attach.extra(job),
             **reader_format.reading(job.config), "layers": job.config["layers"]}
    units = label_units.units(job.config["layers"])
    if units is not None:
        extra["label_units"] = units
    return extra


def write(job):
    """Flush the store (and commit what that made durable), then write a checkpoint; its path."""
    cfg = job.config["checkpoint"]
    job.checkpoint_requested = False
    if job.last_checkpoint is None:            # a kill -9 mid-write leaves a temp dir behind
        for stale in Path(cfg["dir"]).glob(".ckpt-*.tmp"):
            shutil.rmtree(stale, ignore_errors=True)
    job._ckpt_batches, job._ckpt_time = 0, time.monotonic()
    if job.writes_back and job._flush() is STOPPED:   # the snapshot sees every update
        raise OSError("stopped while the store was unreachable: checkpoint not written")
    more = {"graph": job.graph_input.store.snapshot()} if job.graph_input is not None else {}
    more.update(automl_attach.arrays(job))
    try:
        path = checkpoint.write(cfg["dir"], job.store.snapshot(), step=job.trainer.batches,
                                examples=job.trainer.examples, offsets=job.offsets,
                                keep=cfg.get("keep") or None, extra=_extra(job),
                                more_arrays=more)
    except BaseException:
        for hook in job.checkpoint_hooks:
            hook(job, None, False)
        raise
    job.last_checkpoint = str(path)
    log.info("checkpoint written: %s", path)
    for hook in job.checkpoint_hooks:
        hook(job, path, True)
    return path
