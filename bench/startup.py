"""Start-up: seconds from launching ``streamtrain run CONFIG`` to its first batch, as a user runs it.

    python bench/startup.py [--config examples/synthetic.json] [--repeat 5]

The clock starts just before the process is spawned and stops when it logs "model built" (the
job builds the graph from its first batch, then trains it at once). The run stops after one
batch (``--max-examples``); metrics and checkpoints are off so no port or directory is needed.
One warm-up run first (numba's cache, the OS page cache), then the median of ``--repeat``.
Before it, the package's modules are byte-compiled (``compileall``), as ``pip install`` of a wheel
does: with ``PYTHONDONTWRITEBYTECODE=1`` in the environment (some sandboxes and CI images set
it) an editable install would otherwise compile every module from source at each start (~0.1 s).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from targets import byte_compile

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-m", "streamtrain"]


def time_to_first_batch(config: str, max_examples: int = 256) -> float:
    cmd = CLI + ["run", config, "--max-examples", str(max_examples), "--log-format", "text",
                 "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            cwd=ROOT)
    first = None
    for line in proc.stderr:
        if first is None and "model built" in line:
            first = time.perf_counter() - t0
    if proc.wait() != 0 or first is None:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {proc.returncode}) or never built a model")
    return first


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="examples/synthetic.json")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    byte_compile()
    time_to_first_batch(args.config)                            # warm-up
    times = [time_to_first_batch(args.config) for _ in range(args.repeat)]
    print(f"streamtrain run {args.config}: first batch after {statistics.median(times):.3f} s "
          f"(median of {len(times)}: {', '.join(f'{t:.3f}' for t in times)}; {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
