"""What is running: streamtrain's version (``streamtrain.__version__``, the one place it is
written; the package metadata reads it from there) and the versions that decide its numbers
and its compiled code. Shown by ``streamtrain --version``, the first log line of every command
that logs (``run``, ``eval``, ``serve``, ``graph load``: ``logs.log_start``), ``GET /v1/model``, and the ``streamtrain_build_info`` metric."""
from __future__ import annotations

import platform
import sys
from importlib import metadata

from . import __version__


def _version_of(name: str) -> str:
    """The version of ``name`` as imported (or as it would import), without importing it."""
    module = sys.modules.get(name)
    if module is not None and isinstance(getattr(module, "__version__", None), str):
        return module.__version__
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "none"


def build_info() -> dict:
    """``{"version", "python", "numpy", "numba"}``: the labels of ``streamtrain_build_info``."""
    return {"version": __version__, "python": platform.python_version(),
            "numpy": _version_of("numpy"), "numba": _version_of("numba")}


def describe() -> str:
    """``streamtrain 0.1.0 (Python 3.11.7, numpy 2.4.6, numba 0.68.1)``"""
    info = build_info()
    return (f"streamtrain {info['version']} (Python {info['python']}, numpy {info['numpy']}, "
            f"numba {info['numba']})")
