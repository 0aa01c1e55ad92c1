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

Likewise numba's cffi support (typing functions of cffi modules) builds a ``cffi.FFI()`` when it
first loads, which builds pycparser's C parser: about 50 ms wherever cffi is installed (it comes
with ``cryptography``). streamtrain's kernels call no cffi function, so it loads with cffi
unavailable; ``import cffi`` works as usual afterwards. A plug-in whose numba kernels call cffi
functions sets ``STREAMTRAIN_NUMBA_CFFI=1``.

Both are loaded lazily: numba loads its typing and lowering registries (``refresh``: about 90
modules and every implementation they register, ~70 ms here, plus ~50 ms for the two above)
before it compiles and, by default, also before it loads a kernel from its cache, although a
cached kernel is object code that needs none of them, only numba's runtime (NRT). Here a cache
load initialises the runtime alone; the registries load, with the two answers above, at the
first real compile. ``STREAMTRAIN_NUMBA_EAGER=1`` restores numba's own behaviour.

The first run after an install (or wherever numba's cache is empty or not writable) compiles
every kernel as it is first used: several seconds in all. So that it is not a silent wait, the
first compile of a process logs what is happening and for how long, and each kernel is named
as it compiles (``CompileNotice``); a run that only loads its kernels from the cache says nothing.
"""
from __future__ import annotations

import importlib.abc
import logging
import os
import sys

log = logging.getLogger("streamtrain")
NO_BLAS_PROBE = ("scipy.linalg.cython_blas", "scipy.linalg.cython_lapack")
NO_CFFI = ("cffi",)
NUMBA_CONFIG_FILE = ".numba_config.yaml"


class _Unavailable(importlib.abc.MetaPathFinder):
    """Answers imports of ``names`` with ImportError, for as long as it is on ``sys.meta_path``."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name in self.names:
            raise ImportError(f"{name}: not loaded for numba at start-up (streamtrain.compiled)")
        return None


def _import_numba():
    """``import numba`` without the two imports it makes only in passing: ``scipy`` (only to
    check its version) and ``yaml`` (only to read a ``.numba_config.yaml`` in the working
    directory; kept when there is one): ~20 ms of every start where they are installed. Both
    stay importable as usual afterwards."""
    skip = () if os.environ.get("STREAMTRAIN_NUMBA_EAGER") == "1" else tuple(
        name for name in ("scipy", "yaml")
        if name not in sys.modules and not (name == "yaml" and os.path.isfile(NUMBA_CONFIG_FILE)))
    finder = _Unavailable(skip)
    sys.meta_path.insert(0, finder)
    try:
        import numba
    finally:
        sys.meta_path.remove(finder)
    return numba


def _load_without(module: str, names: tuple, keep_env: str, loaded: str) -> None:
    """Import numba's ``module`` with ``names`` unimportable, unless ``keep_env`` is set to 1 or
    ``loaded`` (or ``module``) is already imported (then there is nothing to save)."""
    if os.environ.get(keep_env) == "1" or loaded in sys.modules or module in sys.modules:
        return
    finder = _Unavailable(names)
    sys.meta_path.insert(0, finder)
    try:
        importlib.import_module(module)
    finally:
        sys.meta_path.remove(finder)


def _load_registry_modules() -> None:
    """numba's array and cffi support, loaded the way the module docstring says."""
    _load_without("numba.np.arraymath", NO_BLAS_PROBE, "STREAMTRAIN_NUMBA_BLAS", "scipy.linalg")
    _load_without("numba.core.typing.cffi_utils", NO_CFFI, "STREAMTRAIN_NUMBA_CFFI", "cffi")


numba = _import_numba()


def _registries_at_first_compile() -> bool:
    """Cache loads initialise numba's runtime only; the registries load before the first compile
    (both of numba's ``load_additional_registries``, typing and lowering, load ours first).
    False (numba's own behaviour, eager) where numba's internals are not the ones this was
    written against or ``STREAMTRAIN_NUMBA_EAGER=1``."""
    from numba.core import caching, cpu
    from numba.core.typing import context as typing_context
    try:
        from numba.core.runtime import rtsys
    except ImportError:
        return False
    cache = caching.Cache
    if os.environ.get("STREAMTRAIN_NUMBA_EAGER") == "1" or not all(
            hasattr(cache, name) for name in ("load_overload", "_load_overload",
                                              "_guard_against_spurious_io_errors")):
        return False

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)         # what cached object code needs of refresh()
        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)

    def ours_first(load_additional_registries):
        def load(self):
            _load_registry_modules()
            return load_additional_registries(self)
        return load

    cache.load_overload = load_overload
    for ctx in (cpu.CPUContext, typing_context.Context):
        ctx.load_additional_registries = ours_first(ctx.load_additional_registries)
    return True


if not _registries_at_first_compile():
    _load_registry_modules()


FIRST_RUN_SECONDS = 10      # examples/synthetic.json's kernels compiled on a 2-core host: 11-12 s


class CompileNotice:
    """numba's ``numba:compile`` event (a real compile, never a cache load): the first one logs
    that kernels are being compiled, with roughly how long it takes and where they are cached;
    each kernel compiled at top level (not one compiled inside another's compile) is named with
    its time. ``seconds`` and ``kernels`` count them."""

    def __init__(self):
        self.depth, self.kernels, self.seconds, self._t0 = 0, 0, 0.0, 0.0

    def on_start(self, event) -> None:
        self.depth += 1
        if self.depth > 1:
            return
        if not self.kernels:
            cache = getattr(getattr(event.data["dispatcher"], "_cache", None), "_cache_path", None)
            log.info("compiling streamtrain's kernels with numba (the first run after an install or "
                     "upgrade: ~%d-%d s in all on 2 cores, each kernel named as it is done; cached "
                     "for the next runs in %s)", FIRST_RUN_SECONDS, 2 * FIRST_RUN_SECONDS,
                     os.path.dirname(cache) if cache else "none: nowhere writable, see NUMBA_CACHE_DIR")
        self._t0 = _now()

    def on_end(self, event) -> None:
        self.depth -= 1
        if self.depth:
            return
        took = _now() - self._t0
        self.kernels += 1
        self.seconds += took
        fn = getattr(event.data["dispatcher"], "py_func", None)
        name = f"{fn.__module__}.{fn.__qualname__}" if fn is not None else "?"
        log.info("compiled %s in %.1f s (kernel %d, %.1f s so far)", name, took, self.kernels, self.seconds)


def _now() -> float:
    import time
    return time.perf_counter()


def _listen_to_compiles() -> CompileNotice:
    from numba.core import event
    notice = CompileNotice()
    listener = type("_Listener", (event.Listener,), {"on_start": lambda self, ev: notice.on_start(ev),
                                                      "on_end": lambda self, ev: notice.on_end(ev)})
    event.register("numba:compile", listener())
    return notice


COMPILES = _listen_to_compiles()


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
