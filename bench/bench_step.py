"""The trainer's own work per batch, without the reader: examples/s of ``Trainer.step`` alone.

    python bench/bench_step.py [--rows 30000] [--models fm deepfm] [--passes 3] [--set KEY=VALUE ...]

The rows (the Criteo TSV ``bench/compare.py --targets`` uses) are parsed into batches first;
then each model trains over them ``--passes`` times in this process (the first pass creates the
table rows and compiles nothing new: numba's cache is warm after one run). Reported per model:
examples/s over passes 2.. (median, and of the fastest pass) and, for the fastest pass, the time
per batch of ``step`` (feed, pull, forward, backward, push) and its phases
(``StepResult.seconds``; "feed" is the rest of the step). Without the parse
thread, its GIL and the job loop's bookkeeping, the figure moves much less with the machine's
load than a whole run does, so two versions of the code compare well one after the other.
``--set`` overrides the job config as ``streamtrain run --set`` does (``batch_size=2048``).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import streams  # noqa: E402

PHASES = ("pull", "forward", "backward", "push", "update")


def measure(model: str, rows: int, passes: int, sets=()) -> dict:
    trainer, batches = streams.built_trainer(model, rows, *sets)
    per_pass = []
    for _ in range(passes):
        spent = dict.fromkeys((*PHASES, "feed"), 0.0)
        total = 0.0
        for batch in batches:
            t0 = time.perf_counter()
            result = trainer.step(batch)
            dt = time.perf_counter() - t0
            total += dt
            for k in PHASES:
                spent[k] += result.seconds.get(k, 0.0)
            spent["feed"] += dt - sum(result.seconds.values())
        per_pass.append((total, spent))
    timed = per_pass[1:] or per_pass
    total = statistics.median(t for t, _ in timed)
    best, phases = min(timed, key=lambda p: p[0])
    examples = sum(b.size for b in batches)
    return {"model": model, "batches": len(batches), "rate": examples / total, "best": examples / best,
            "per_batch_us": 1e6 * best / len(batches),
            **{k: 1e6 * phases[k] / len(batches) for k in (*PHASES, "feed")}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=30_000)
    ap.add_argument("--models", nargs="+", default=["fm", "deepfm"])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    from streamtrain import limit_blas_threads
    limit_blas_threads()
    print(f"# python bench/bench_step.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
    print("| model | examples/s (median pass) | examples/s (best pass) | µs per batch (best) | "
          + " | ".join(("feed", *PHASES)) + " |")
    print("|---|---:|---:|---:|" + "---:|" * (len(PHASES) + 1))
    for model in args.models:
        r = measure(model, args.rows, args.passes, args.sets)
        print(f"| {model} | {r['rate']:.0f} | {r['best']:.0f} | {r['per_batch_us']:.0f} | "
              + " | ".join(f"{r[k]:.0f}" for k in ("feed", *PHASES)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
