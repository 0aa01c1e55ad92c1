"""An AutoML search inside the daemon (``Job``): the trainer, its hooks, its checkpoint part.

* ``job.graph`` is the served candidate's graph after every step (``Search.served``: the leader
  now, or the champion), so ``POST /v1/predict`` answers with it (``streamtrain run`` with
  ``serve.enabled``) and ``GET /v1/model`` shows it, with the search (``describe``: the
  champion's and the served candidate's assignments, every live candidate);
* checkpoints hold every live candidate's parameters (they share the job's store), in
  ``meta.json``'s ``automl`` the search state and, in ``automl_replay.npz``, the replay buffer
  (``replay.py``) and, in ``automl_pairrank.npz``, the pair ranking's tables (``pairrank.py``),
  so a restore resumes the same search;
* the drift monitor reads the step's losses: the served candidate's;
* a promotion is logged as one event line (``automl: slot N promoted``) and counted
  (``streamtrain_automl_promotions_total``, metrics.py).
"""
from __future__ import annotations

from . import pairrank
from .replay import ARRAYS
from .trainer import AutoTrainer


def build(job, schema, state: dict | None = None) -> AutoTrainer:
    """The job's AutoML trainer on its store, started fresh or from a checkpoint's ``state``."""
    trainer = AutoTrainer(job.config, job.store, schema, seed=job.config.get("seed", 0),
                          shared=_shared(job))
    trainer.start(state)
    job.graph = trainer.graph
    if _follow not in job.hooks:
        job.hooks.insert(0, _follow)
    return trainer


def _shared(job):
    """Trainers sharing a Redis store share the search (``shared.py``); else None."""
    if job.config["store"].get("backend") != "redis":
        return None
    from .shared import SharedSearch
    return SharedSearch(job.store)


def _follow(job, batch, result) -> None:
    """After every step: the job's graph is the served candidate's (serving, /v1/model)."""
    job.graph = job.trainer.graph


def extra(job) -> dict:
    """What a checkpoint's meta.json holds of the search (nothing without one): its state and
    the replay buffer's layout."""
    trainer = job.trainer
    if not hasattr(trainer, "search"):
        return {}
    ranks = {pairrank.ARRAYS: trainer.pairs.describe()} if trainer.pairs is not None else {}
    return {"automl": trainer.search.to_json(), ARRAYS: trainer.recent.describe(), **ranks}


def arrays(job) -> dict:
    """The checkpoint's arrays files of the search: the replay buffer's and the pair ranking's
    tables (nothing without one)."""
    trainer = job.trainer
    if not hasattr(trainer, "search"):
        return {}
    return {ARRAYS: trainer.recent.arrays(), **({pairrank.ARRAYS: trainer.pairs.arrays()} if trainer.pairs else {})}


def restore(job, meta: dict) -> None:
    """The replay buffer and the pair ranking's tables of a checkpoint (``checkpoint.read``'s
    meta; empty if it has none)."""
    if hasattr(job.trainer, "search"):
        job.trainer.recent.load(meta.get(ARRAYS), meta["arrays"].get(ARRAYS))
        if job.trainer.pairs is not None:
            job.trainer.pairs.load(meta.get(pairrank.ARRAYS), meta["arrays"].get(pairrank.ARRAYS))


def describe(job) -> dict | None:
    """The search for ``GET /v1/model`` (None without one)."""
    trainer = getattr(job, "trainer", None)
    return trainer.describe() if hasattr(trainer, "search") else None
