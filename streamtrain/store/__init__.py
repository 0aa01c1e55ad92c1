"""Parameter stores: ``memory`` (in process) and ``redis`` (sharded, shared by trainers).

Backends are registered in ``STORES`` (``store.base``) by their module; ``make_store`` picks one
by ``store.backend``.
"""
from __future__ import annotations

from streamtrain.schema import kind_problems

from . import redis_store  # noqa: F401  (registers the redis backend)
from .base import STORES, ParamStore, Snapshot, StoreStats, register
from .memory import MemoryStore

DEFAULT_BACKEND = "memory"


def validate_store_config(cfg) -> list[tuple[str, str]]:
    """Every problem of a ``store`` section as (path inside it, message)."""
    if not isinstance(cfg, dict):
        return [("", f"expected an object like {{\"backend\": \"memory\"}}, got {cfg!r}")]
    return kind_problems(STORES, cfg, tag="backend", default=DEFAULT_BACKEND)


def make_store(cfg: dict) -> ParamStore:
    cls = STORES.get(cfg.get("backend", DEFAULT_BACKEND), where="store.backend")
    return cls.from_config({k: v for k, v in cfg.items() if k != "backend"})


__all__ = ["ParamStore", "Snapshot", "StoreStats", "MemoryStore", "STORES", "register", "make_store",
           "validate_store_config"]
