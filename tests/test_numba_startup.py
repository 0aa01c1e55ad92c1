"""numba's start-up patches (``streamtrain.numba_startup``) and numba's cache: what one process
compiles and caches, the next loads, patched or not, and a kernel compiled in a patched process
links against one it loaded from the cache."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


ARRAYS_PROBE = """
import json, sys
from streamtrain import startup
if sys.argv[2] == "patched":
    startup.apply()
sys.path.insert(0, sys.argv[1])
import array_kernel
import numba.core.environment as environment
print(json.dumps({"out": array_kernel.doubled(7).tolist(), "compiled": sum(array_kernel.doubled.stats.cache_misses.values()),
                  "loaded": sum(array_kernel.doubled.stats.cache_hits.values()), "arrayobj": "numba.np.arrayobj" in sys.modules,
                  "patched": getattr(environment._rebuild_env, "_streamtrain", False)}))
"""
ARRAYS = """
import numpy as np
from numba import njit

@njit(cache=True)
def doubled(n):
    out = np.empty(n, dtype=np.int64)       # numba.np.arrayobj's helpers, inlined
    for i in range(n):
        out[i] = 2 * i
    if n > 100:
        raise ValueError("too long")       # a constant the environment keeps
    return out
"""


@pytest.mark.parametrize("order", [("patched", "numba", "patched"), ("numba", "patched", "numba")])
def test_kernels_with_numbas_array_helpers_cache_across_patched_and_plain_processes(tmp_path, order):
    """A kernel that inlined numba's array helpers, compiled and cached by one process, loads
    in the next whether either applied the start-up patch or not (the environment is pickled
    by numba's own name); loaded by a patched one, numba's array module stays unimported."""
    (tmp_path / "array_kernel.py").write_text(ARRAYS)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    runs = []
    for how in order:
        out = subprocess.run([sys.executable, "-c", ARRAYS_PROBE, str(tmp_path), how], capture_output=True,
                             text=True, timeout=120, cwd=ROOT, env=env)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert [r["out"] for r in runs] == [[0, 2, 4, 6, 8, 10, 12]] * 3
    assert [bool(r["compiled"]) for r in runs] == [True, False, False]
    assert [r["loaded"] for r in runs] == [0, 1, 1]
    assert [r["patched"] for r in runs] == [how == "patched" for how in order]
    assert [r["arrayobj"] for r in runs[1:]] == [how == "numba" for how in order[1:]]


LINK_PROBE = """
import json, sys
from streamtrain import startup
startup.apply()
sys.path.insert(0, sys.argv[1])
import linked
first = linked.inner(5).tolist()                  # loaded from the cache (or compiled the first time)
print(json.dumps({"inner": first, "outer": int(linked.outer(5)),
                  "outer_loaded": sum(linked.outer.stats.cache_hits.values()),
                  "inner_loaded": sum(linked.inner.stats.cache_hits.values())}))
"""
LINKED = """
import numpy as np
from numba import njit

@njit(cache=True)
def inner(n):
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        out[i] = 3 * i
    return out

@njit(cache=True)
def outer(n):
    return inner(n).sum() + 1
"""


def test_a_kernel_compiled_in_a_patched_process_links_one_loaded_from_the_cache(tmp_path):
    """Patched, a cache load keeps the kernel's module and finds a symbol in it when asked: a
    kernel compiled afterwards that calls the loaded one links and runs (its cache removed
    between the runs, the callee's kept)."""
    (tmp_path / "linked.py").write_text(LINKED)
    cache = tmp_path / "cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}

    def run():
        out = subprocess.run([sys.executable, "-c", LINK_PROBE, str(tmp_path)], capture_output=True,
                             text=True, timeout=120, cwd=ROOT, env=env)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    runs = [run()]
    for path in cache.rglob("linked.outer*"):
        path.unlink()
    runs += [run(), run()]
    assert [(r["inner"], r["outer"]) for r in runs] == [([0, 3, 6, 9, 12], 31)] * 3
    assert [(r["inner_loaded"], r["outer_loaded"]) for r in runs] == [(0, 0), (1, 0), (1, 1)]


RUNTIME_PROBE = """
import json, sys
from streamtrain import startup
startup.apply()
if sys.argv[2] == "kept":                 # numba's runtime module must come from the kept file
    from numba.core.runtime import nrtdynmod
    def refuse(ctx):
        raise AssertionError("numba's runtime module compiled again")
    nrtdynmod.create_nrt_module = refuse
sys.path.insert(0, sys.argv[1])
import array_kernel
print(json.dumps({"out": array_kernel.doubled(4).tolist()}))
"""


def test_numbas_runtime_module_is_compiled_once_then_loaded(tmp_path):
    """The first patched process compiles numba's runtime module and keeps its object code in
    the cache directory; the next loads it (compiling it again would fail the probe), and a
    damaged file is compiled over."""
    (tmp_path / "array_kernel.py").write_text(ARRAYS)
    cache = tmp_path / "cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}

    def run(how):
        return subprocess.run([sys.executable, "-c", RUNTIME_PROBE, str(tmp_path), how], capture_output=True,
                              text=True, timeout=120, cwd=ROOT, env=env)

    first = run("first")
    assert first.returncode == 0, first.stderr
    kept = list(cache.glob("numba_nrt.py*.nbc"))
    assert len(kept) == 1
    again = run("kept")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1]) == {"out": [0, 2, 4, 6]}
    kept[0].write_bytes(b"not a pickle")
    damaged = run("first")
    assert damaged.returncode == 0, damaged.stderr
    assert run("kept").returncode == 0


SYMBOLS_PROBE = """
import json, sys
from streamtrain import startup
startup.apply()
import llvmlite.binding as ll
from numba.core.codegen import CPUCodeLibrary
from streamtrain import numba_cacheload
from streamtrain.cli import main
loads, parsed, parse, unserialize = [], [], ll.parse_bitcode, CPUCodeLibrary._unserialize.__func__
ll.parse_bitcode = lambda *a, **k: parsed.append(1) or parse(*a, **k)
def kept(cls, codegen, state):
    loads.append(state)
    return unserialize(cls, codegen, state)
CPUCodeLibrary._unserialize = classmethod(kept)
main(["run", sys.argv[1], "--max-examples", "512", "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
      "--log-level", "WARNING", "--summary", sys.argv[2]])
ll.parse_bitcode = parse
same = 0
for name, kind, (obj, bitcode) in loads:
    mod = parse(bitcode)
    want = {g.name for gs in (mod.functions, mod.global_variables) for g in gs if not g.is_declaration}
    same += numba_cacheload.defined(obj) == want
print(json.dumps({"loads": len(loads), "same": same, "parsed": len(parsed),
                  "patched": getattr(CPUCodeLibrary._get_module_for_linking, "_streamtrain", False)}))
"""


def test_cache_loads_list_a_kernels_symbols_from_its_object_code_and_parse_no_bitcode(tmp_path):
    """A job's kernels load from numba's cache without their linkable bitcode being parsed; what
    each defines, read from its object code's ELF symbol table, is what its bitcode defines; and
    the job's figures are those of numba's own loading (STREAMTRAIN_NUMBA_EAGER=1)."""
    config = str(ROOT / "examples" / "lr.json")
    subprocess.run([sys.executable, "-m", "streamtrain", "run", config, "--max-examples", "512", "--set",
                    "metrics.enabled=false", "--set", "checkpoint.dir=null", "--log-level", "WARNING"],
                   check=True, capture_output=True, timeout=300, cwd=ROOT)       # the cache filled
    summaries = []
    for eager in ("0", "1"):
        summary = tmp_path / f"summary{eager}.json"
        out = subprocess.run([sys.executable, "-c", SYMBOLS_PROBE, config, str(summary)], capture_output=True,
                             text=True, timeout=300, cwd=ROOT, env={**os.environ, "STREAMTRAIN_NUMBA_EAGER": eager})
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["loads"] > 5 and got["same"] == got["loads"]
        assert (got["parsed"], got["patched"]) == ((0, True) if eager == "0" else (got["loads"], False))
        summaries.append({k: v for k, v in json.loads(summary.read_text()).items() if "seconds" not in k
                          and not k.endswith("_s") and "per_s" not in k})
    assert summaries[0] == summaries[1]


def test_numbas_version_is_read_from_its_dist_info_folder_as_importlib_metadata_reads_it():
    from importlib import metadata

    from streamtrain import numba_startup
    assert numba_startup._version() == tuple(int(p) for p in metadata.version("numba").split(".")[:2])


ALIAS_PROBE = """
import json, sys
from streamtrain import startup
if sys.argv[3] == "patched":
    startup.apply()
sys.path.insert(0, sys.argv[1])
import importlib
kern = importlib.import_module(sys.argv[2])
print(json.dumps({"out": kern.doubled(5).tolist(), "compiled": sum(kern.doubled.stats.cache_misses.values())}))
"""


def test_a_cache_entry_written_under_another_module_name_is_compiled_again(tmp_path):
    """The same file imported as ``b.kern`` (its folder on the path, as a checkout's doctests
    import ``ops/...``) and then as ``a.b.kern``: numba's entry names ``b.kern``, which the
    second process cannot import; patched, the kernel is compiled again instead of failing."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "__init__.py").write_text("")
    (tmp_path / "a" / "b" / "__init__.py").write_text("")
    (tmp_path / "a" / "b" / "kern.py").write_text(ARRAYS)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run(where, name, how):
        return subprocess.run([sys.executable, "-c", ALIAS_PROBE, str(where), name, how], capture_output=True,
                              text=True, timeout=120, cwd=ROOT, env=env)
    first = run(tmp_path / "a", "b.kern", "numba")
    assert first.returncode == 0, first.stderr
    again = run(tmp_path, "a.b.kern", "patched")
    assert again.returncode == 0, again.stderr
    got = json.loads(again.stdout.strip().splitlines()[-1])
    assert got == {"out": [0, 2, 4, 6, 8], "compiled": 1}
    then = run(tmp_path, "a.b.kern", "patched")            # its entry rewritten: loaded from now on
    assert json.loads(then.stdout.strip().splitlines()[-1])["compiled"] == 0
