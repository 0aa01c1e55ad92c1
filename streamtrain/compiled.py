"""``njit``: numba's compiler with its on-disk cache when there is somewhere to write it.

``numba.njit(cache=True)`` raises at import when neither the package's ``__pycache__`` nor the
user's cache directory is writable (a read-only install run by a user without a home: systemd's
``DynamicUser`` with ``ProtectSystem=strict``, a container with a read-only root). There the
kernels are compiled once per process instead (a second or two at the first call); set
``NUMBA_CACHE_DIR`` to a writable directory to keep the cache.

Start-up: numba's array support (``numba.np.arraymath``, loaded at the first compile or cache
load) probes for a BLAS by importing ``scipy.linalg.cython_blas``, which imports the whole of
``scipy.linalg``: about a third of ``streamtrain run``'s time to its first batch. streamtrain's
kernels call no BLAS (no ``np.dot``/``@``/``np.linalg`` inside ``@njit``), so this module loads
numba's array support with that probe answered "no BLAS" (scipy.linalg itself stays importable
as usual afterwards). A plug-in whose own numba kernels need BLAS sets
``STREAMTRAIN_NUMBA_BLAS=1`` to keep numba's probe.
"""
from __future__ import annotations

import importlib.abc
import logging
import os
import sys

import numba

log = logging.getLogger("streamtrain")
NO_BLAS_PROBE = ("scipy.linalg.cython_blas", "scipy.linalg.cython_lapack")


class _NoBlasProbe(importlib.abc.MetaPathFinder):
    """Answers numba's BLAS probe with ImportError, for as long as it is on ``sys.meta_path``."""

    def find_spec(self, name, path=None, target=None):
        if name in NO_BLAS_PROBE:
            raise ImportError(f"{name}: not probed at start-up (streamtrain.compiled)")
        return None


def _load_array_support() -> None:
    if os.environ.get("STREAMTRAIN_NUMBA_BLAS") == "1" or "scipy.linalg" in sys.modules \
            or "numba.np.arraymath" in sys.modules:
        return                                   # nothing to save, or asked to keep the probe
    probe = _NoBlasProbe()
    sys.meta_path.insert(0, probe)
    try:
        import numba.np.arraymath  # noqa: F401  (the probe runs here, once per process)
    finally:
        sys.meta_path.remove(probe)


_load_array_support()


def njit(**options):
    """``@njit(nogil=True)``: ``numba.njit(cache=True, **options)``, or uncached when numba has
    nowhere to write its cache."""
    def compile_(fn):
        try:
            return numba.njit(cache=True, **options)(fn)
        except RuntimeError as err:              # "cannot cache function ...: no locator available"
            if "cannot cache" not in str(err):
                raise
            log.debug("numba cannot cache %s (%s): compiled in this process only", fn.__qualname__, err)
            return numba.njit(**options)(fn)
    return compile_
