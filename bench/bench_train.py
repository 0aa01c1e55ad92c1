"""Training throughput: examples/s of example models on the Criteo sample, file → memory store.

    python bench/bench_train.py [--examples 1000000] [--models lr fm deepfm] [--batch-size N]

The 7,625-row Criteo file is cycled (``reader.loop``) up to ``--examples``; the whole path is
timed: gunzip, parse, train (predict-then-learn), as ``streamtrain run`` does it.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("STREAMTRAIN_DATA", ROOT.parent / "shared" / "data"))


def run(model: str, examples: int, batch_size: int | None) -> dict:
    from streamtrain import config as cfgmod
    from streamtrain.job import Job

    sets = ["reader.type=file", f"reader.path={DATA / 'criteo_kaggle_head7625.tsv.gz'}",
            "reader.format=criteo", "reader.loop=true", f"reader.limit={examples}",
            "metrics.enabled=false", "log.every_seconds=100000"]
    if batch_size:
        sets.append(f"batch_size={batch_size}")
    cfg = cfgmod.validate(cfgmod.load(ROOT / "examples" / f"{model}.json", sets))
    job = Job(cfg)
    t0 = time.perf_counter()
    summary = job.run()
    summary["wall_s"] = time.perf_counter() - t0
    summary["batch_size"] = cfg["batch_size"]
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1_000_000)
    ap.add_argument("--models", nargs="+", default=["lr", "fm", "deepfm"])
    ap.add_argument("--batch-size", type=int, default=None, help="override the example files' batch_size")
    args = ap.parse_args(argv)
    import numpy
    print(f"# python {platform.python_version()}, numpy {numpy.__version__}, {os.cpu_count()} cores, "
          f"{platform.machine()}; {args.examples} examples of Criteo (cycled)")
    print(f"{'model':10} {'batch':>6} {'examples':>9} {'seconds':>8} {'examples/s':>11} {'logloss':>8}")
    for model in args.models:
        s = run(model, args.examples, args.batch_size)
        print(f"{model:10} {s['batch_size']:>6} {s['examples']:>9} {s['wall_s']:>8.2f} "
              f"{s['examples'] / s['wall_s']:>11.0f} {s['logloss']:>8.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
