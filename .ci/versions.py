#!/usr/bin/env python3
"""The tests again with every runtime dependency at its floor (``lowest``) or at its newest
release (``newest``), without changing the environment: those versions are installed into a
scratch directory put first on PYTHONPATH, so they shadow what the environment has.

    python .ci/versions.py lowest            # what .ci/run does: LOWEST_TESTS at the floors
    python .ci/versions.py newest            # by hand: the whole suite at the newest releases
    python .ci/versions.py lowest -- tests/test_optim.py -x     # other pytest arguments

The dependencies are ``[project] dependencies`` and the ``serve`` extra of pyproject.toml; a
floor is a requirement's ``>=`` bound (each has one, or this fails), so pyproject.toml is the one
place the floors are written. Before the tests, every dependency's version as imported is
checked against what was asked for (numba's too: ``streamtrain/numba_startup.py`` patches its
internals, and tests/test_startup.py holds the patch to being applied at each version).
pytest's exit code 5 (no tests collected) is reported and forgiven, as in .ci/run.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from packaging.markers import Marker          # (packaging comes with build, a dev dependency)

ROOT = Path(__file__).resolve().parents[1]
# The files that go through each dependency: numpy/numba/scipy (kernels, layers, optimizers,
# parsers, the per-example core and the numba start-up patch), prometheus-client (metrics, a
# live scrape), uvicorn/starlette/orjson/httptools/uvloop (serving), kafka-python/crc32c
# (Kafka reader, faults), redis/hiredis (the Redis store and graph store, faults), threadpoolctl
# (BLAS threads at start-up). The whole suite takes twice as long: tests/ by hand with ``--``.
LOWEST_TESTS = [
    "tests/test_startup.py", "tests/test_ops_conformance.py", "tests/test_optim.py",
    "tests/test_sequential.py", "tests/test_sequential_steps.py", "tests/test_dense_kernels.py",
    "tests/test_embedding_kernels.py",
    "tests/test_ids_hashing.py", "tests/test_ids_index.py", "tests/test_readers_criteo_kernel.py",
    "tests/test_readers_numbers.py", "tests/test_readers_line_ends.py", "tests/test_readers_formats.py",
    "tests/test_gnn_ops.py", "tests/test_drift.py", "tests/test_metrics_job.py", "tests/test_metrics_live.py",
    "tests/test_job.py", "tests/test_version.py",
    "tests/test_serve_http.py", "tests/test_serve_inputs.py", "tests/test_serve_redis.py",
    "tests/test_kafka_clients.py", "tests/test_kafka_decode.py", "tests/test_kafka_e2e.py",
    "tests/test_kafka_fastpath.py", "tests/test_kafka_recovery.py", "tests/test_faults_kafka.py",
    "tests/test_redis_store.py", "tests/test_redis_writeback.py", "tests/test_redis_sync.py",
    "tests/test_faults_redis.py", "tests/test_gnn_graphstore.py",
    # Left to the suite stage (newest versions) to keep .ci/run under 15 minutes (it took 15 min
    # 9 s with them): the broker restart (49 s at the floors; the poll-retry path at the floor
    # is test_kafka_decode's) and the environment-variable options (17 s of two `streamtrain
    # run` subprocesses: config parsing, which no dependency touches)
    "--deselect", "tests/test_faults_kafka.py::test_broker_restart_mid_run",
    "--deselect", "tests/test_job.py::test_env_variables_stand_in_for_options",
]


def requirements() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["serve"]]


def split(requirement: str) -> tuple[str, str, str]:
    """(name, floor, marker) of ``name>=floor[,...][; marker]``."""
    spec, _, marker = requirement.partition(";")
    match = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*>=\s*([^,\s]+)\s*(,.*)?", spec)
    if not match:
        raise SystemExit(f"pyproject.toml: {requirement!r} has no '>=' floor")
    return match.group(1), match.group(2), marker.strip()


def pins(which: str) -> list[str]:
    out = []
    for name, floor, marker in map(split, requirements()):
        pin = f"{name}=={floor}" if which == "lowest" else name
        out.append(f"{pin}; {marker}" if marker else pin)
    return out


CHECK = """
import sys
from importlib import metadata
from packaging.version import Version
want = dict(arg.split("=", 1) for arg in sys.argv[1:])
got = {name: metadata.version(name) for name in want}
wrong = {n: (got[n], v) for n, v in want.items() if v != "*" and Version(got[n]) != Version(v)}
print("versions:", ", ".join(f"{n} {v}" for n, v in got.items()))
import numpy, numba, scipy
from streamtrain import startup
startup.apply()                      # what the command line applies at its start
from numba.core import caching
print("imported: numpy", numpy.__version__, "numba", numba.__version__, "scipy", scipy.__version__,
      "from", numba.__file__.rsplit("/numba/", 1)[0], "; numba patch applied:",
      getattr(caching.Cache.load_overload, "_streamtrain", False))
sys.exit(f"versions asked for but not imported: {wrong}" if wrong else 0)
"""


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("lowest", "newest"):
        print(__doc__, file=sys.stderr)
        return 2
    which, rest = argv[0], argv[1:]
    tests = rest[rest.index("--") + 1:] if "--" in rest else (LOWEST_TESTS if which == "lowest" else ["tests"])
    asked = pins(which)
    with tempfile.TemporaryDirectory(prefix=f"streamtrain-{which}-") as scratch:
        print(f"== {which} versions into {scratch}: {' '.join(asked)}", flush=True)
        upgrade = ["--upgrade"] if which == "newest" else []
        done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *upgrade, "--target", scratch, *asked])
        if done.returncode != 0:
            return done.returncode
        env = {**os.environ, "PYTHONPATH": scratch}
        names = [f"{name}={floor if which == 'lowest' else '*'}" for name, floor, marker in map(split, requirements())
                 if not marker or Marker(marker).evaluate()]
        if subprocess.run([sys.executable, "-c", CHECK, *names], env=env, cwd=ROOT).returncode != 0:
            return 1
        rc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "-rs", "--durations=15", *tests],
                            env=env, cwd=ROOT).returncode
    if rc == 5:
        print("WARNING: pytest collected no tests (exit 5)", file=sys.stderr)
        return 0
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
