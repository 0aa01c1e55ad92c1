"""numba's start-up, made cheaper by ``patch()``: applied by ``streamtrain.startup.apply`` (the
command line's start), never by an import. Without it numba behaves as numba does.

* numba's array support (``numba.np.arraymath``, loaded at the first compile or cache load)
  probes for a BLAS by importing ``scipy.linalg.cython_blas``, which imports the whole of
  ``scipy.linalg``: about a third of ``streamtrain run``'s time to its first batch. streamtrain's
  kernels call no BLAS (no ``np.dot``/``@``/``np.linalg`` inside ``@njit``), so numba's array
  support loads with that probe answered "no BLAS" (scipy.linalg itself stays importable as usual
  afterwards). A plug-in whose own numba kernels need BLAS sets ``STREAMTRAIN_NUMBA_BLAS=1``.
* numba's cffi support builds a ``cffi.FFI()`` when it first loads (pycparser's C parser: about
  50 ms wherever cffi is installed). streamtrain's kernels call no cffi function, so it loads with
  cffi unavailable; ``import cffi`` works as usual afterwards. ``STREAMTRAIN_NUMBA_CFFI=1`` keeps it.
* numba loads its typing and lowering registries (about 90 modules, ~70 ms, plus ~50 ms for the
  two above) before it compiles and also before it loads a kernel from its cache, although cached
  object code needs only numba's runtime (NRT). Patched, a cache load initialises the runtime
  alone; the registries load, with the two answers above, at the first real compile.
* numba types an array argument (at a kernel's first call) by asking first whether it is a
  ``numpy.ma.MaskedArray``: numpy 2 then imports ``numpy.ma`` (~30 ms, on the parse thread's
  first batch, which the trainer waits for). A plain ``numpy.ndarray`` is typed without asking
  (the same type numba gives it); any subclass still goes through numba's own function.
* ``import numba`` imports ``scipy`` (only to check its version) and ``yaml`` (only to read a
  ``.numba_config.yaml`` in the working directory; kept when there is one): ~20 ms of every start.
  When numba is not imported yet, it is imported without them.

* A cached kernel's object code names the environment of each numba helper it inlined (array
  allocation and the like, from ``numba.np.arrayobj``); loading it imports that module, and with
  it numba's string, hashing and random support (~25 ms of the first cache load, on the path to
  the first batch). The environment of a numba-internal module that is not imported yet is
  rebuilt without importing it: its globals are read only by object-mode code, which numba's
  own helpers never are (their constants are kept); the module imports as usual later.
* numba's cache is keyed by a kernel's source file, and an entry names the module it was
  compiled in: an entry written where the file was imported under another name (a checkout's
  ``ops.x`` for ``streamtrain.ops.x``, as ``pytest --doctest-modules ops/`` imports it) fails to
  load with an ImportError. Patched, such a kernel is compiled again (and its entry rewritten).
* numba checks that a kernel's cache directory is writable by creating a file there, once for
  every cached kernel as its module is imported (78 for an LR job); patched, once per directory.
* numba scans every installed distribution for ``numba_extensions`` entry points (~10 ms with
  a few hundred installed) before a kernel's first call, cache load or compile; patched, before
  the first real compile, with the registries (a kernel loaded from the cache was compiled with
  whatever extension types it needs already known).
* Loading a cached kernel lists every symbol its linkable bitcode defines, three calls into
  LLVM per function (~70 per kernel, ~2 ms per kernel in all); numba asks about a handful of
  them (each kernel's entry points). Patched, a cache load only keeps the module, and a symbol
  asked about is looked up in the modules kept (the newest first); a module compiled in the
  process is listed as numba lists it.
* That bitcode is parsed at every cache load (LLVM's ParseBitcode: about half of the load, ~1 ms
  a kernel) though only a later compile that links against the kernel reads it. Patched, what
  the kernel defines is read from its object code's ELF symbol table (``numba_cacheload``:
  the same names) and the bitcode is parsed when a compile first links against it; object code
  that is not 64-bit ELF (another platform) is loaded as above.
* numba compiles its runtime's own LLVM module (atomic reference counts, ~20 ms) in every
  process, before the first kernel runs. Patched, its object code is kept beside numba's cache
  of streamtrain's kernels (``NUMBA_CACHE_DIR`` or the package's ``__pycache__``, file
  ``numba_nrt.pyXY.nbc``, keyed by the numba, llvmlite and Python versions and the CPU) and
  loaded from there (~3 ms); nowhere writable, it is compiled as before.

``STREAMTRAIN_NUMBA_EAGER=1`` keeps numba's own behaviour (registries first, scipy and yaml).
Guarded: applied only at the numba versions below (the lowest allowed, tested by
``.ci/versions.py lowest``, and the newest tested) and when the internals it replaces are there;
otherwise numba is left as it is and one log line says why.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import os
import sys

from . import numba_cacheload

log = logging.getLogger("streamtrain")
TESTED = ((0, 60), (0, 68))        # numba major.minor: the floor in pyproject.toml .. newest tested
NO_BLAS_PROBE = ("scipy.linalg.cython_blas", "scipy.linalg.cython_lapack")
NO_CFFI = ("cffi",)
NUMBA_CONFIG_FILE = ".numba_config.yaml"
_applied: bool | None = None       # None: not tried yet in this process


class _Unavailable(importlib.abc.MetaPathFinder):
    """Answers imports of ``names`` with ImportError, for as long as it is on ``sys.meta_path``."""

    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name in self.names:
            raise ImportError(f"{name}: not loaded for numba at start-up (streamtrain.numba_startup)")
        return None


def _without(names: tuple, module: str) -> None:
    """Import ``module`` while ``names`` are unimportable (they stay importable afterwards)."""
    finder = _Unavailable(names)
    sys.meta_path.insert(0, finder)
    try:
        importlib.import_module(module)
    finally:
        sys.meta_path.remove(finder)


def _import_numba() -> None:
    """``import numba`` without the scipy and yaml it imports in passing (module docstring)."""
    if "numba" in sys.modules:
        return
    skip = tuple(name for name in ("scipy", "yaml") if name not in sys.modules
                 and not (name == "yaml" and os.path.isfile(NUMBA_CONFIG_FILE)))
    _without(skip, "numba")


def _load_without(module: str, names: tuple, keep_env: str, loaded: str) -> None:
    """Import numba's ``module`` with ``names`` unimportable, unless ``keep_env`` is set to 1 or
    ``loaded`` (or ``module``) is already imported (then there is nothing to save)."""
    if os.environ.get(keep_env) == "1" or loaded in sys.modules or module in sys.modules:
        return
    _without(names, module)


def _load_registry_modules() -> None:
    """numba's array and cffi support, loaded the way the module docstring says."""
    _load_without("numba.np.arraymath", NO_BLAS_PROBE, "STREAMTRAIN_NUMBA_BLAS", "scipy.linalg")
    _load_without("numba.core.typing.cffi_utils", NO_CFFI, "STREAMTRAIN_NUMBA_CFFI", "cffi")


def _registries_at_first_compile() -> None:
    """Cache loads initialise numba's runtime only; the registries load before the first compile
    (both of numba's ``load_additional_registries``, typing and lowering, load ours first)."""
    from numba.core import caching, cpu
    from numba.core.runtime import rtsys
    from numba.core.typing import context as typing_context
    cache = caching.Cache
    contexts = (cpu.CPUContext, typing_context.Context)
    needed = [(cache, name) for name in ("load_overload", "_load_overload", "_guard_against_spurious_io_errors")]
    for owner, name in needed + [(ctx, "load_additional_registries") for ctx in contexts]:
        if not hasattr(owner, name):
            raise AttributeError(f"{owner.__module__}.{owner.__qualname__} has no {name}")

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)         # what cached object code needs of refresh()
        with self._guard_against_spurious_io_errors():
            try:
                return self._load_overload(sig, target_context)
            except ImportError as err:           # cached where its module had another name
                log.debug("numba cache entry of %s not loaded (%s): compiled again", getattr(self, "_name", "?"), err)
                return None

    def ours_first(load_additional_registries):
        def load(self):
            _load_registry_modules()
            _entry_points_now()
            return load_additional_registries(self)
        load._streamtrain = True
        return load

    load_overload._streamtrain = True
    cache.load_overload = load_overload
    for ctx in contexts:
        ctx.load_additional_registries = ours_first(ctx.load_additional_registries)


_init_entry_points = None          # numba's entrypoints.init_all, deferred to the first compile


def _entry_points_now() -> None:
    """numba's scan of the ``numba_extensions`` entry points, put back and run (once)."""
    global _init_entry_points
    init_all, _init_entry_points = _init_entry_points, None
    if init_all is not None:
        from numba.core import entrypoints
        entrypoints.init_all = init_all
        init_all()


def _entry_points_at_first_compile() -> None:
    """numba's ``entrypoints.init_all`` (called by a dispatcher before every first call) does
    nothing until the first compile loads the registries (module docstring)."""
    global _init_entry_points
    from numba.core import entrypoints
    if getattr(entrypoints, "_already_initialized", True):
        return                       # (scanned already, or a numba without the flag: left alone)

    def init_all():
        """Deferred by streamtrain.numba_startup to the first compile."""
    init_all._streamtrain = True
    _init_entry_points = entrypoints.init_all
    entrypoints.init_all = init_all


def _helper_environments_unimported() -> None:
    """A cached kernel's environments of numba-internal modules not imported yet are rebuilt
    without importing them (module docstring); any other is numba's own ``_rebuild_env``'s."""
    from numba.core import environment
    rebuild, Environment = environment._rebuild_env, environment.Environment
    if not hasattr(Environment, "_memo") or not hasattr(environment, "lookup_environment"):
        raise AttributeError("numba.core.environment has no Environment._memo or lookup_environment")

    def _rebuild_env(modname, consts, env_name):
        if not isinstance(modname, str) or not modname.startswith("numba.") or modname in sys.modules \
                or environment.lookup_environment(env_name) is not None:
            return rebuild(modname, consts, env_name)
        env = Environment({"__name__": modname})
        env.consts[:] = consts
        env.env_name = env_name
        Environment._memo[env_name] = env
        return env
    # pickled by name (Environment.__reduce__ names it): the same name loads in any process
    _rebuild_env.__module__, _rebuild_env.__qualname__ = rebuild.__module__, rebuild.__qualname__
    _rebuild_env._streamtrain = True
    environment._rebuild_env = _rebuild_env


def _cache_directories_checked_once() -> None:
    """numba's writability check of a cache directory (a file created and removed there), once
    per directory rather than once per cached kernel."""
    from numba.core import caching
    locator = caching._CacheLocator
    ensure, checked = locator.ensure_cache_path, set()

    def ensure_cache_path(self):
        path = self.get_cache_path()
        if path not in checked:
            ensure(self)
            checked.add(path)
    ensure_cache_path._streamtrain = True
    locator.ensure_cache_path = ensure_cache_path


def _symbols_looked_up_when_asked() -> None:
    """numba's JIT engine keeps a cached kernel's module and finds a symbol in it when asked,
    instead of listing all its symbols at the load (module docstring)."""
    from numba.core.codegen import JitEngine
    listed = JitEngine._load_defined_symbols
    for name in ("is_symbol_defined", "add_module"):
        if not hasattr(JitEngine, name):
            raise AttributeError(f"numba.core.codegen.JitEngine has no {name}")

    def _load_defined_symbols(self, mod):
        self.__dict__.setdefault("_streamtrain_kept", []).append(mod)

    def is_symbol_defined(self, name):
        if name in self._defined_symbols:
            return True
        for mod in reversed(self.__dict__.get("_streamtrain_kept", ())):
            for get in (mod.get_function, mod.get_global_variable):
                try:
                    value = get(name)
                except NameError:
                    continue
                if not value.is_declaration:
                    self._defined_symbols.add(name)
                    return True
        return False

    def add_module(self, module):
        listed(self, module)                 # a module compiled here: listed, as numba does
        return self._ee.add_module(module)
    for fn in (_load_defined_symbols, is_symbol_defined, add_module):
        fn._streamtrain = True
        setattr(JitEngine, fn.__name__, fn)


def _runtime_module_file() -> str:
    from numba.core import config
    folder = config.CACHE_DIR or os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
    return os.path.join(folder, f"numba_nrt.py{sys.version_info[0]}{sys.version_info[1]}.nbc")


def _runtime_module_cached() -> None:
    """numba's runtime module loaded from its object code when a previous process kept it (module
    docstring), else compiled as numba does and kept for the next."""
    import pickle
    import llvmlite
    import numba
    from numba.core.runtime import nrtdynmod
    create = nrtdynmod.create_nrt_module

    def compile_nrt_functions(ctx):
        codegen = ctx.codegen()
        key = (numba.__version__, llvmlite.__version__, sys.version_info[:2], codegen.magic_tuple())
        path = _runtime_module_file()
        try:
            with open(path, "rb") as fh:
                kept, data = pickle.load(fh)
            if kept == key:
                return codegen.unserialize_library(data)
        except Exception:             # none yet, unreadable or damaged: compiled (and kept) below
            pass
        ir_mod, library = create(ctx)
        library.enable_object_caching()
        library.add_ir_module(ir_mod)
        library.finalize()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "wb") as fh:
                pickle.dump((key, library.serialize_using_object_code()), fh)
            os.replace(tmp, path)
        except OSError as err:        # nowhere writable: compiled at each start, as numba does
            log.debug("numba's runtime module not kept (%s)", err)
        return library
    compile_nrt_functions._streamtrain = True
    nrtdynmod.compile_nrt_functions = compile_nrt_functions


def _plain_arrays_typed_directly() -> None:
    """numba's ``typeof`` of an exact ``numpy.ndarray`` without the ``numpy.ma`` import (module
    docstring); other arrays (subclasses, masked ones) are numba's own function's."""
    import numpy as np
    from numba.core import errors, types
    from numba.core.typing.typeof import typeof_impl
    from numba.np import numpy_support
    original = typeof_impl.dispatch(np.ndarray)
    if "MaskedArray" not in getattr(getattr(original, "__code__", None), "co_names", ()):
        return                       # (a numba that does not ask: nothing to spare)

    def typeof_ndarray(val, c):
        if type(val) is not np.ndarray:
            return original(val, c)
        try:
            dtype = numpy_support.from_dtype(val.dtype)
        except errors.NumbaNotImplementedError:
            raise errors.NumbaValueError(f"Unsupported array dtype: {val.dtype}") from None
        return types.Array(dtype, val.ndim, numpy_support.map_layout(val), readonly=not val.flags.writeable)
    typeof_ndarray._streamtrain = True
    typeof_impl.register(np.ndarray)(typeof_ndarray)


def _version() -> tuple:
    """numba's major.minor, from the name of its ``numba-X.Y.Z.dist-info`` folder beside the
    package (``importlib.metadata.version`` reads every distribution's metadata on the path: ~4
    ms), else as ``importlib.metadata`` finds it (an egg, an unusual layout)."""
    spec = importlib.util.find_spec("numba")
    for folder in (spec.submodule_search_locations or []) if spec is not None else []:
        site = os.path.dirname(folder)
        try:
            names = [n for n in os.listdir(site) if n.startswith("numba-") and n.endswith(".dist-info")]
        except OSError:
            continue
        if len(names) == 1:
            return _major_minor(names[0][len("numba-"):-len(".dist-info")])
    from importlib import metadata
    return _major_minor(metadata.version("numba"))


def _major_minor(version: str) -> tuple:
    return tuple(int(part) for part in version.split(".")[:2])


def patch() -> bool:
    """Apply the start-up patches once per process; True when they are in place."""
    global _applied
    if _applied is not None:
        return _applied
    _applied = False
    if os.environ.get("STREAMTRAIN_NUMBA_EAGER") == "1":
        return False
    try:
        version = _version()
        if not TESTED[0] <= version <= TESTED[1]:
            log.warning("numba %s is not a version streamtrain's numba start-up patch is tested with "
                        "(%d.%d to %d.%d): numba's own start-up kept (about 0.15 s slower)",
                        ".".join(map(str, version)), *TESTED[0], *TESTED[1])
            return False
        _import_numba()
        _registries_at_first_compile()
        _entry_points_at_first_compile()
        _helper_environments_unimported()
        _cache_directories_checked_once()
        _symbols_looked_up_when_asked()
        numba_cacheload.bitcode_parsed_when_linked()
        _runtime_module_cached()
        _plain_arrays_typed_directly()
    except Exception as err:        # numba's internals moved: its own behaviour, one line
        log.warning("numba start-up patch not applied (%s: %s): numba's own start-up kept", type(err).__name__, err)
        return False
    _applied = True
    return True
