"""Start-up: ``streamtrain run CONFIG`` for 256 examples, as a user runs it, to its first trained
batch and to the process's exit.

    python bench/startup.py [--config examples/synthetic.json] [--repeat 5] [--cold] [--json FILE]

The clock starts just before the process is spawned. *First batch*: the process's first
progress line (logged once the first batch is trained); *exit*: the process has ended. The run
stops after 256 examples (``--max-examples``); metrics and checkpoints are off so no port or
directory is needed. One warm-up run first (numba's cache, the OS page cache), then the median
of ``--repeat``. Before it, the package's modules are byte-compiled (``compileall``), as ``pip
install`` of a wheel does: with ``PYTHONDONTWRITEBYTECODE=1`` in the environment (some sandboxes
and CI images set it) an editable install would otherwise compile every module from source at
each start (~0.1 s).

``--cold``: the first run after an install instead: numba's cache is pointed at an empty
directory (``NUMBA_CACHE_DIR``), so every kernel is compiled; it reports when the process said
it was compiling, its first progress line and its exit.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from targets import byte_compile

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "streamtrain"]
EXAMPLES = 256


def one_run(config: str, env: dict | None = None) -> dict:
    """Seconds from spawn to: the compile notice (if any), the first progress line, the exit."""
    cmd = CLI + ["run", config, "--max-examples", str(EXAMPLES), "--log-format", "text",
                 "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            cwd=ROOT, env=env)
    got: dict = {}
    for line in proc.stderr:
        now = time.perf_counter() - t0
        if "compiling" in line and "compile" not in got:
            got["compile"] = now
        if " ex/s=" in line and "first_batch" not in got and "done:" not in line:
            got["first_batch"] = now
    rc = proc.wait()
    got["exit"] = time.perf_counter() - t0
    if rc != 0 or "first_batch" not in got:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {rc}) or logged no progress line")
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/synthetic.json")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cold", action="store_true", help="numba's cache empty: the first run after install")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE")
    args = ap.parse_args(argv)
    byte_compile()
    runs = []
    if args.cold:
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory() as cache:
                runs.append(one_run(args.config, {**os.environ, "NUMBA_CACHE_DIR": cache}))
    else:
        one_run(args.config)                                      # warm-up
        runs = [one_run(args.config) for _ in range(args.repeat)]
    med = {k: statistics.median(r[k] for r in runs) for k in ("first_batch", "exit")}
    said = [r["compile"] for r in runs if "compile" in r]
    kind = "cold (empty numba cache)" if args.cold else "warm"
    print(f"streamtrain run {args.config} --max-examples {EXAMPLES}, {kind}, median of {len(runs)}: "
          f"first batch {med['first_batch']:.3f} s, exit {med['exit']:.3f} s"
          + (f", 'compiling' said at {statistics.median(said):.3f} s" if said else "")
          + f" ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f})")
    print("  exit: " + ", ".join(f"{r['exit']:.3f}" for r in runs))
    if args.json:
        import report
        report.write(args.json, {**report.meta("bench/startup.py", argv), "kind": "startup",
                                 "cold": args.cold, "runs": runs, **med})
    return 0


if __name__ == "__main__":
    sys.exit(main())
