"""Modules imported at their first use, not at start-up (the compiled kernels: numba's import
and cache loading are paid by the first batch), then looked up for the price of a call: a
``from . import x`` inside a function runs the import machinery's checks at every call."""
from __future__ import annotations

import functools
import importlib


def module(name: str):
    """A function returning module ``name``, imported by its first call."""
    return functools.cache(lambda: importlib.import_module(name))
