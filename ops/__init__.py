"""Layer kinds (operators) in numpy, one family per module, registered by name for JSON.

Importing the package imports every module in it, so a kind added as a new file is registered.
"""
from __future__ import annotations

from streamtrain.registry import import_modules

from .base import LAYERS, SPARSE, Layer, Option, register

__all__ = ["LAYERS", "SPARSE", "Layer", "Option", "register", "load_all", "get"]


def load_all():
    """Import every module of this package so every kind is registered; return the registry."""
    import_modules(__name__, __path__)
    return LAYERS


def get(kind: str) -> type[Layer]:
    return LAYERS.get(kind)


load_all()
