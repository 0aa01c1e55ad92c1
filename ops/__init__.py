"""Layer kinds (operators) in numpy, one family per module, registered by name for JSON."""
from __future__ import annotations

import importlib
import pkgutil

from .base import LAYERS, REGISTRY, Layer, Option, register

__all__ = ["LAYERS", "REGISTRY", "Layer", "Option", "register", "load_all", "get"]


def load_all() -> dict:
    """Import every module of this package so every kind is registered; return the registry."""
    for mod in pkgutil.iter_modules(__path__):
        if not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")
    return REGISTRY


def get(kind: str) -> type[Layer]:
    load_all()
    return REGISTRY[kind]
