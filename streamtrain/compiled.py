"""``njit``: numba's compiler with its on-disk cache when there is somewhere to write it.

``numba.njit(cache=True)`` raises at import when neither the package's ``__pycache__`` nor the
user's cache directory is writable (a read-only install run by a user without a home: systemd's
``DynamicUser`` with ``ProtectSystem=strict``, a container with a read-only root). There the
kernels are compiled once per process instead (a second or two at the first call); set
``NUMBA_CACHE_DIR`` to a writable directory to keep the cache.

numba's start-up (its BLAS and cffi probes, its registries, the scipy and yaml it imports in
passing) is made cheaper by ``streamtrain.numba_startup.patch``, which the command line applies
at its start (``streamtrain.startup``); importing this module changes nothing in numba.
"""
from __future__ import annotations

import logging

import numba

log = logging.getLogger("streamtrain")


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
