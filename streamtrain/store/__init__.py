"""Parameter stores: ``memory`` (in process) and ``redis`` (sharded, shared by trainers).

Backends are registered in ``STORES`` (``store.base``) by their module (every module of the
package is imported); ``make_store`` picks one by ``store.backend``. The ``redis_*`` modules
are the exception: they need redis-py, so the redis backend is imported on the first lookup of
``redis`` (``Registry.lazy``) and a memory-store run starts without them.
"""
from __future__ import annotations

import pkgutil

from streamtrain.registry import import_modules
from streamtrain.schema import kind_problems

from .base import STORES, ParamStore, Snapshot, StoreStats, register
from .memory import MemoryStore

_REDIS = {m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("redis_")}
import_modules(__name__, __path__, skip=_REDIS)   # every other module, so a new backend file registers
STORES.lazy("redis", f"{__name__}.redis_store")

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
