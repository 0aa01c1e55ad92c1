"""Start-up: a synthetic + memory-store run imports nothing its config does not use.

The time to the first batch is measured by ``bench/startup.py`` (not here: timing on a loaded
machine is not a test); this checks the cause of a slow start deterministically."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("kafka", "redis", "scipy.stats", "scipy.sparse", "scipy.linalg", "torch", "river", "vowpalwabbit", "cffi")

PROBE = """
import json, sys
from streamtrain.cli import main
rc = main(["run", sys.argv[1], "--max-examples", "512", "--set", "metrics.enabled=false",
           "--set", "checkpoint.dir=null", "--log-level", "WARNING"])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def test_synthetic_memory_run_imports_no_broker_client_nor_scipy_stats():
    out = subprocess.run([sys.executable, "-c", PROBE, str(ROOT / "examples" / "synthetic.json")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rc"] == 0
    loaded = set(got["modules"])
    assert "streamtrain.job" in loaded and "numpy" in loaded          # the probe really ran a job
    assert not [m for m in HEAVY if m in loaded], f"imported at start-up: {[m for m in HEAVY if m in loaded]}"
    served = ("prometheus_client", "wsgiref.simple_server", "streamtrain.metrics", "streamtrain.metrics_http")
    assert not [m for m in served if m in loaded], f"metrics off, yet imported: {[m for m in served if m in loaded]}"


def test_rankdata_matches_scipy():
    import numpy as np
    from scipy.stats import rankdata as scipy_rankdata
    from streamtrain.scores import rankdata
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 7, 1000):
        x = rng.integers(0, 5, n).astype(np.float64)
        np.testing.assert_array_equal(rankdata(x), scipy_rankdata(x))


LAZY = """
import sys
from streamtrain.store import STORES, make_store
assert "redis" in STORES.names() and "redis" not in sys.modules      # listed, not imported
try:
    STORES.get("nosuch", where="store.backend")
except Exception as err:
    assert "redis" in str(err), err                                    # errors name it too
assert "redis" not in sys.modules
assert STORES.get("redis").__name__ == "RedisStore" and "redis" in sys.modules
"""


def test_the_redis_backend_is_listed_before_and_imported_on_first_use():
    out = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr


NO_BLAS_PROBE = """
import sys
import numpy as np
from streamtrain import startup
startup.apply()
from numba import njit
@njit
def total(x):
    return x.sum()
assert total(np.arange(4.0)) == 6.0                                        # a compile loads the registries
import numba.np.arraymath as arraymath
assert "scipy.linalg" not in sys.modules and not arraymath._HAVE_BLAS    # numba's probe answered "no"
assert not [f for f in sys.meta_path if type(f).__name__ == "_Unavailable"]   # and the answer removed
import scipy.linalg                                                        # importable as usual after
assert np.allclose(scipy.linalg.solve(np.eye(2) * 2, np.ones(2)), 0.5)
"""


def test_numbas_blas_probe_is_skipped_and_scipy_linalg_stays_importable():
    """numba imports all of scipy.linalg to probe for a BLAS our kernels never call (a third of
    the time to the first batch): streamtrain.numba_startup, applied at start-up, answers the
    probe "no", then gets out of the way."""
    out = subprocess.run([sys.executable, "-c", NO_BLAS_PROBE], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr


NO_CFFI = """
import sys
from streamtrain import startup
startup.apply()
from numba import njit
assert njit(lambda x: x + 1)(1) == 2                             # a compile loads the registries
from numba.core.typing import cffi_utils
assert not cffi_utils.SUPPORTED and "cffi" not in sys.modules   # numba loaded without building an FFI
import cffi                                                      # importable as usual after
assert cffi.FFI().sizeof("int") == 4
"""


def test_numbas_cffi_support_is_not_loaded_and_cffi_stays_importable():
    """numba builds a cffi.FFI() (pycparser's C parser, ~50 ms) for cffi typing our kernels never
    use: streamtrain.numba_startup loads it with cffi unavailable, then gets out of the way."""
    pytest.importorskip("cffi")
    out = subprocess.run([sys.executable, "-c", NO_CFFI], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_streamtrain_numba_cffi_keeps_numbas_cffi_support():
    pytest.importorskip("cffi")
    code = ("import os; os.environ['STREAMTRAIN_NUMBA_CFFI'] = '1'; from streamtrain import startup; startup.apply(); "
            "from numba import njit; assert njit(lambda x: x + 1)(1) == 2; "
            "from numba.core.typing import cffi_utils; assert cffi_utils.SUPPORTED")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_streamtrain_numba_blas_keeps_the_probe():
    code = ("import os, sys; os.environ['STREAMTRAIN_NUMBA_BLAS'] = '1'; from streamtrain import startup; startup.apply(); "
            "from numba import njit; assert njit(lambda x: x + 1)(1) == 2; "
            "import numba.np.arraymath as a; assert a._HAVE_BLAS and 'scipy.linalg' in sys.modules")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr


REGISTRIES = """
import json, sys
from streamtrain.cli import main
rc = main(["run", sys.argv[1], "--max-examples", "512", "--set", "metrics.enabled=false",
           "--set", "checkpoint.dir=null", "--log-level", "WARNING"])
from numba.core import entrypoints
print(json.dumps({"rc": rc, "arraymath": "numba.np.arraymath" in sys.modules,
                  "npyimpl": "numba.np.npyimpl" in sys.modules, "arrayobj": "numba.np.arrayobj" in sys.modules,
                  "entry_points": entrypoints._already_initialized}))
"""


@pytest.mark.parametrize("eager", ["0", "1"])
def test_kernels_loaded_from_numbas_cache_do_not_load_its_registries(eager):
    """A cached kernel is object code: loading it needs numba's runtime, not the ~90 modules of
    typing and lowering registries a compile needs (~120 ms of every start). The first run may
    compile (a cold cache) and so load them; the second loads every kernel from the cache.
    Nor do they import numba's array module for the environments of the helpers they inlined,
    nor scan the installed distributions for numba extensions.
    ``STREAMTRAIN_NUMBA_EAGER=1`` keeps numba's own order (registries first)."""
    env = {**os.environ, "STREAMTRAIN_NUMBA_EAGER": eager}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", REGISTRIES, str(ROOT / "examples" / "synthetic.json")],
                             capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
        assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rc"] == 0
    assert got["arraymath"] is got["npyimpl"] is got["arrayobj"] is got["entry_points"] is (eager == "1")


NUMBA_IN_PASSING = """
import sys
from streamtrain import startup
startup.apply()
assert "numba" in sys.modules
assert "scipy" not in sys.modules and "yaml" not in sys.modules, [m for m in ("scipy", "yaml") if m in sys.modules]
assert not [f for f in sys.meta_path if type(f).__name__ == "_Unavailable"]
import scipy, yaml                                   # importable as usual after
assert yaml.safe_load("a: 1") == {"a": 1}
"""


def test_numba_loads_without_the_scipy_and_yaml_it_imports_in_passing(tmp_path):
    pytest.importorskip("scipy")
    pytest.importorskip("yaml")
    out = subprocess.run([sys.executable, "-c", NUMBA_IN_PASSING], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr


def test_a_numba_config_file_in_the_working_directory_keeps_yaml(tmp_path):
    """numba reads ``.numba_config.yaml`` from the working directory with yaml: kept there."""
    pytest.importorskip("yaml")
    (tmp_path / ".numba_config.yaml").write_text("DEBUG_CACHE: 0\n")
    code = "import sys; from streamtrain import startup; startup.apply(); assert 'yaml' in sys.modules"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr


NOTHING_GLOBAL = """
import importlib, os, pkgutil, sys
env, meta_path = dict(os.environ), list(sys.meta_path)
import streamtrain
for module in pkgutil.walk_packages(streamtrain.__path__, "streamtrain."):
    if module.name != "streamtrain.__main__":
        importlib.import_module(module.name)
import numpy as np
from numba.core import caching, codegen, config, cpu, entrypoints, environment
from numba.core.runtime import nrtdynmod
from numba.core.typing import context
from numba.core.typing.typeof import typeof_impl
try:
    from kafka.net import transport
except ImportError:                  # kafka-python 2.x (the floor): no kafka.net, nothing to patch
    transport = None


def patched():
    found = {"numba cache load": caching.Cache.load_overload,
             "numba registries": cpu.CPUContext.load_additional_registries,
             "numba typing registries": context.Context.load_additional_registries,
             "numba typeof of ndarray": typeof_impl.dispatch(np.ndarray),
             "numba cache directory check": caching._CacheLocator.ensure_cache_path,
             "numba entry points": entrypoints.init_all,
             "numba cached environments": environment._rebuild_env,
             "numba symbols of cached kernels": codegen.JitEngine._load_defined_symbols,
             "numba cached kernels' bitcode": codegen.CPUCodeLibrary._unserialize.__func__,
             "numba bitcode for linking": codegen.CPUCodeLibrary._get_module_for_linking,
             "numba runtime module": nrtdynmod.compile_nrt_functions}
    if transport is not None:
        found["kafka socket reads"] = transport.KafkaTCPTransport._sock_recv
        from kafka.protocol.frame import KafkaBytes
        found["kafka frame reads"] = KafkaBytes.read
    return found


found = [name for name, fn in patched().items() if getattr(fn, "_streamtrain", False)]
assert not found, f"patched by an import: {found}"
assert dict(os.environ) == env, {k: v for k, v in os.environ.items() if env.get(k) != v}
added = [m for m in sys.meta_path if m not in meta_path]      # kafka-python 2.x's vendored six adds its own
assert set(meta_path) <= set(sys.meta_path) and not [m for m in added if type(m).__module__.startswith("streamtrain")]
assert "scipy" in sys.modules and config._HAVE_YAML
from streamtrain import startup                                    # and the explicit calls do patch
startup.apply()
startup.for_job({"reader": {"type": "kafka"}})
assert all(getattr(fn, "_streamtrain", False) for fn in patched().values()), patched()
assert os.environ["OMP_NUM_THREADS"] == os.environ.get("STREAMTRAIN_BLAS_THREADS", "1")
"""


def test_importing_streamtrain_changes_nothing_outside_it():
    """Every module of the package imported: numba's cache loader and registries, kafka-python's
    socket reads, os.environ and the import system are as they were; ``startup.apply()`` and
    ``startup.for_job`` (the command line's start) are what change them."""
    pytest.importorskip("yaml")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS") and k != "STREAMTRAIN_NUMBA_EAGER"}
    out = subprocess.run([sys.executable, "-c", NOTHING_GLOBAL], capture_output=True, text=True,
                         timeout=180, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]


def test_no_module_of_the_product_imports_the_test_helpers():
    """``streamtrain.testing`` is for tests and plug-in authors: nothing the daemon runs imports it."""
    import ast
    found = []
    for folder in ("streamtrain", "readers", "ops"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "streamtrain" / "testing.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):      # from streamtrain.testing / from . import testing
                    names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
                else:
                    continue
                if any(n.split(".")[-1] == "testing" or n.endswith(("streamtrain.testing", ".testing")) or ".testing." in n
                       for n in names):
                    found.append(str(path.relative_to(ROOT)))
    assert not found, f"import streamtrain.testing: {found}"


NOTICE_PROBE = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
from streamtrain import startup
startup.apply()                                    # the command line's start: the notice listens
sys.path.insert(0, sys.argv[1])
import tiny_kernel
print(tiny_kernel.total(3))
"""
TINY = """
from streamtrain.compiled import njit

@njit(nogil=True)
def total(n):
    s = 0
    for i in range(n):
        s += i
    return s
"""


def test_a_compile_says_so_before_it_starts_and_a_cache_load_says_nothing(tmp_path):
    """The first run after an install is not a silent wait: the first compile logs what is being
    compiled and for about how long, each kernel is named as it is done; loaded from numba's
    cache, nothing is said."""
    (tmp_path / "tiny_kernel.py").write_text(TINY)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run():
        out = subprocess.run([sys.executable, "-c", NOTICE_PROBE, str(tmp_path)], capture_output=True,
                             text=True, timeout=120, cwd=ROOT, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "3"
        return out.stderr

    first = run().splitlines()
    notice = [i for i, line in enumerate(first) if line.startswith("compiling streamtrain's kernels")]
    done = [i for i, line in enumerate(first) if line.startswith("compiled tiny_kernel.total in ")]
    assert notice and done and notice[0] < done[0], first
    assert "first run after an install" in first[notice[0]] and "cached for the next runs in" in first[notice[0]]
    assert "(kernel 1, " in first[done[0]]
    again = run()
    assert "compil" not in again, again


GC_PROBE = """
import gc, json, sys
from streamtrain import startup
startup.settled()                                  # without defer_gc: nothing changes
untouched = [gc.isenabled(), gc.get_freeze_count()]
startup.defer_gc()                                 # the process entry point's start
deferred = gc.isenabled()
from streamtrain.cli import main
rc = main(["run", sys.argv[1], "--max-examples", "512", "--set", "metrics.enabled=false",
           "--set", "checkpoint.dir=null", "--log-level", "WARNING"])
print(json.dumps({"rc": rc, "untouched": untouched, "deferred": deferred, "after": gc.isenabled(),
                  "frozen": gc.get_freeze_count()}))
"""


def test_collection_is_deferred_until_the_job_is_built_then_resumes_with_start_up_frozen():
    out = subprocess.run([sys.executable, "-c", GC_PROBE, str(ROOT / "examples" / "synthetic.json")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["rc"] == 0 and got["untouched"] == [True, 0]
    assert got["deferred"] is False and got["after"] is True
    assert got["frozen"] > 50_000           # numpy's, numba's and the package's objects: never scanned again


TYPEOF_PROBE = """
import sys
import numpy as np
from streamtrain import startup
startup.apply()
from numba import typeof
plain = [np.zeros(3, np.float32), np.zeros((2, 3))[:, 1], np.zeros((2, 2), order="F"), np.zeros(2)[::-1]]
plain[0].flags.writeable = False
got = [typeof(a) for a in plain]
assert "numpy.ma" not in sys.modules, "typing plain arrays imported numpy.ma"
import numpy.ma
import numba.core.typing.typeof as t
want = [t._typeof_ndarray(a, None) for a in plain]             # numba's own function
assert got == want, (got, want)
try:
    typeof(np.ma.masked_array([1.0]))
except Exception as err:
    assert "MaskedArray" in str(err), err
else:
    raise AssertionError("a masked array was typed")
print("ok")
"""


def test_plain_arrays_are_typed_as_numba_types_them_without_importing_numpy_ma():
    out = subprocess.run([sys.executable, "-c", TYPEOF_PROBE], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


BLAS_PROBE = """
import json, sys
from streamtrain import startup
startup.apply()
import numpy
startup.apply()                       # as the command line does: once before numpy, once in cli.main
startup.limit_blas_threads()
skipped = "threadpoolctl" not in sys.modules
from threadpoolctl import threadpool_info
print(json.dumps({"skipped": skipped, "threads": sorted({p["num_threads"] for p in threadpool_info()
                                                          if p["user_api"] == "blas"})}))
"""


@pytest.mark.parametrize("env, skipped", [({}, True), ({"OPENBLAS_NUM_THREADS": "2"}, False),
                                          ({"STREAMTRAIN_BLAS_THREADS": "2"}, True)])
def test_the_blas_starts_with_its_thread_limit_and_threadpoolctl_only_applies_another(env, skipped):
    """Set before numpy loaded, the variables give the BLAS its threads: threadpoolctl is not
    imported. A variable the user set otherwise is still overridden by the limit."""
    clean = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS") and k != "STREAMTRAIN_BLAS_THREADS"}
    out = subprocess.run([sys.executable, "-c", BLAS_PROBE], capture_output=True, text=True, timeout=120,
                         cwd=ROOT, env={**clean, **env})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"skipped": skipped, "threads": [int(env.get("STREAMTRAIN_BLAS_THREADS", 1))]}
