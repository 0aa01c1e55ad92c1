"""Parameter stores: ``memory`` (in process) and ``redis`` (sharded, shared by trainers)."""
from __future__ import annotations

from .base import ParamStore, Snapshot, StoreStats
from .memory import MemoryStore

BACKENDS = {"memory": lambda cfg: MemoryStore()}
VALIDATORS = {"memory": lambda cfg: [(k, "unknown option for the memory store") for k in cfg if k != "backend"]}


def register_backend(name: str, factory, validator) -> None:
    BACKENDS[name] = factory
    VALIDATORS[name] = validator


def _load_optional(backend) -> None:
    """Import the redis backend (and redis-py) only for a config that names a backend the
    memory store is not: a memory-store run starts without loading redis-py."""
    if backend not in BACKENDS:
        from . import redis_store  # noqa: F401  (registers the redis backend)


def validate_store_config(cfg) -> list[tuple[str, str]]:
    if isinstance(cfg, dict):
        _load_optional(cfg.get("backend", "memory"))
    if not isinstance(cfg, dict):
        return [("", f"expected an object like {{\"backend\": \"memory\"}}, got {cfg!r}")]
    backend = cfg.get("backend", "memory")
    if backend not in BACKENDS:
        return [("backend", f"unknown store backend {backend!r} (known: {', '.join(BACKENDS)})")]
    return VALIDATORS[backend](cfg)


def make_store(cfg: dict) -> ParamStore:
    _load_optional(cfg.get("backend", "memory"))
    return BACKENDS[cfg.get("backend", "memory")](cfg)


__all__ = ["ParamStore", "Snapshot", "StoreStats", "MemoryStore", "make_store", "validate_store_config",
           "register_backend"]
