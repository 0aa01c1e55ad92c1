"""What a run (or an evaluation) reports: the progress line's fields and the ``--summary`` object.

Both read a job-like object: ``trainer`` (``examples``, ``batches``, ``nonfinite`` and the
progressive tracker ``progressive``, or None before the first batch), ``source``, ``store``,
``malformed``, ``started``, ``first_step``, ``drift``, ``graph_input``, ``last_checkpoint``,
``store_failures``, ``checkpoint_error`` (a failed final checkpoint), and if it has them
``restored_examples`` (a restored checkpoint's, not this run's: left out of the rates), ``final``
(the summary made when the run ended: the `done` line's figures are its) and the trainer's
``skipped_examples``. The quality figures are those of the model's loss kind
(``progressive.py``): ``logloss``/``auc`` (binary), ``logloss``/``accuracy`` (``softmax_ce``),
``rmse``/``mae`` (``mse``); a figure that does not apply is absent from the progress line and
``null`` in the summary's fixed keys (``logloss``, ``auc``, ``predicted_ctr``, ``observed_ctr``).
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from . import scoring
from .errors import ConfigError, StreamtrainError

FIXED = ("logloss", "auc", "predicted_ctr", "observed_ctr")     # in every summary (null: not this loss)


def num(x):
    return None if x is None or not np.isfinite(x) else round(float(x), 6)


def progress(job, whole_run: bool = False) -> dict:
    """The figures of the progress line: totals, rate since the last line (examples this run
    trained), the loss kind's two figures, lag. ``whole_run``: the summary's figures (the job's
    ``final`` one when it has it), with ``elapsed_s``: one measure for the `done` line and
    ``--summary``."""
    from .lag import total_lag
    t, now = job.trainer, time.monotonic()
    if t is None:
        return {}
    scoring.scored(job)          # every batch trained is in the figures
    if whole_run:
        s = getattr(job, "final", None) or summary(job)
        return {"examples": s["examples"], "batches": s["batches"], "examples_per_s": s["examples_per_s"],
                **{name: s.get(name) for name in t.progressive.names},
                "lag": total_lag(job.source), "malformed": s["malformed"], "nonfinite": s["nonfinite_batches"],
                "elapsed_s": s["elapsed_s"]}
    last_t, last_n = getattr(job, "_last_progress", (job.started, getattr(job, "restored_examples", 0)))
    job._last_progress = (now, t.examples)
    figures = t.progressive.figures()
    return {"examples": t.examples, "batches": t.batches,
            "examples_per_s": round((t.examples - last_n) / max(now - last_t, 1e-9), 1),
            **{name: num(figures[name]) for name in t.progressive.names},
            "lag": total_lag(job.source), "malformed": job.malformed.total, "nonfinite": t.nonfinite}


def progress_line(fields: dict, names=("logloss", "auc")) -> str:
    if not fields:
        return "waiting for the first batch"
    quality = " ".join(f"{name}={fields[name]}" for name in names if name in fields)
    lag = fields["lag"] if fields["lag"] is not None else "-"
    return (f"examples={fields['examples']} batches={fields['batches']} ex/s={fields['examples_per_s']:.0f} "
            f"{quality}{' ' if quality else ''}lag={lag} malformed={fields['malformed']} "
            f"nonfinite={fields['nonfinite']}")


class Reporting:
    """A run's progress, progress line and summary (``Job``'s and ``Evaluation``'s, both read here)."""

    def progress(self, whole_run: bool = False) -> dict:
        return progress(self, whole_run)

    def progress_line(self, fields: dict | None = None) -> str:
        names = self.trainer.progressive.names if self.trainer is not None else ()
        return progress_line(fields if fields is not None else self.progress(), names)

    def summary(self) -> dict:
        return summary(self)


def steady_rate(job) -> float | None:
    """Examples/s after the first batch (start-up, graph build and warm-up excluded)."""
    if job.first_step is None or job.trainer is None:
        return None
    at, n = job.first_step
    return round((job.trainer.examples - n) / max(time.monotonic() - at, 1e-9), 1)


def summary(job) -> dict:
    elapsed = time.monotonic() - job.started
    t = job.trainer
    scoring.scored(job)
    figures = t.progressive.figures() if t is not None else {}
    restored = getattr(job, "restored_examples", 0)
    out = {
        "examples": t.examples if t else 0,
        "batches": t.batches if t else 0,
        "malformed": job.malformed.total,
        "malformed_by_reason": dict(job.malformed.counts),
        "nonfinite_batches": t.nonfinite if t else 0,
        "nonfinite_examples": getattr(t, "skipped_examples", 0) if t else 0,
        "restored_examples": restored,
        "store_failures": job.store_failures,
        "elapsed_s": round(elapsed, 3),
        "examples_per_s": round(((t.examples if t else 0) - restored) / max(elapsed, 1e-9), 1),
        "steady_examples_per_s": steady_rate(job),
        **{name: num(figures.get(name)) for name in FIXED},
        **{name: num(value) for name, value in figures.items() if name not in FIXED},
        "reader": job.source.describe(),
        "store": job.store.describe(),
        "checkpoint": job.last_checkpoint,
        "checkpoint_error": getattr(job, "checkpoint_error", None),
        "drift_alarms": dict(job.drift.alarms) if job.drift else {},
    }
    if job.graph_input is not None:
        out["graph"] = job.graph_input.stats()
    if hasattr(t, "search"):
        out["automl"] = t.describe()
    truth = getattr(job.source, "truth", None)
    if truth is not None:
        out["planted_auc"] = num(truth.auc())
        out["planted_logloss"] = num(truth.logloss())
    return out


def check_summary_path(path: str | None) -> None:
    """A ``--summary`` that could not be written is a ``ConfigError`` before the run, not a
    traceback after it (its directory missing or not writable, or the path a directory)."""
    if not path:
        return
    p = Path(path)
    parent = p.parent
    why = (f"{path} is a directory" if p.is_dir() else
           f"its directory {parent} does not exist" if not parent.is_dir() else
           f"its directory {parent} is not writable" if not os.access(parent, os.W_OK) else None)
    if why:
        raise ConfigError([("--summary", f"cannot write the summary to {path}: {why}")])


def write_summary(path: str | None, summary: dict) -> None:
    """The ``--summary`` JSON; a failure to write it (a full disk) says so, exit 1."""
    if not path:
        return
    try:
        with open(path, "w") as fh:
            json.dump(summary, fh, indent=2)
    except OSError as err:
        raise StreamtrainError(f"cannot write the summary to {path}: {err.strerror or err}") from None
