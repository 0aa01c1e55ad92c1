"""Where a model's time goes: the trainer's own phase clocks, per model and store, in one table.

    python bench/profile_models.py [--rows 200000] [--models lr fm deepfm] [--stores memory redis] [--top 0]

Each model runs once in this process (``Job(config).run()`` on ``--rows`` Criteo rows, the TSV
``bench/compare.py --targets`` uses) and the phases each step reports (``StepResult.seconds``:
feed, pull, forward, backward, push, update, commit) are summed, and "read" is the time the loop
waits for the reader's next batch (the parse thread's); "feed" is the graph's feed (each table's
unique ids and each layer's positions among them, crosses); "between steps" is everything else
in the loop (the job's hooks: drift detectors, metrics; checkpoints; and, with a parse thread,
the main thread waiting for the GIL, which cProfile books to whatever code resumes).
Shares are of the job's wall time from its first batch. ``--top N`` also prints the N functions
with the most own time (cProfile; slows the run, so the shares above come from a run without it).
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import streams  # noqa: E402

PHASES = ("read", "feed", "pull", "forward", "backward", "push", "update", "commit")


def profile(model: str, store: str, rows: int) -> dict:
    job = streams.criteo_job(model, rows, *(["store.backend=redis"] if store == "redis" else []))
    spent: dict[str, float] = defaultdict(float)
    marks = {}

    def keep(job, batch, result):          # from the end of batch 1, like the wall clock (batch 1
        if not marks:                      # loads numba's cached kernels: not a steady-state cost)
            marks["first"] = time.perf_counter()
            return
        for k, v in result.seconds.items():
            spent[k] += v

    batches = job.source.batches

    def timed_batches():                 # the time the loop waits for the reader's next batch
        it = batches()
        while True:
            t0 = time.perf_counter()
            batch = next(it, None)
            if marks:
                spent["read"] += time.perf_counter() - t0
            if batch is None:
                return
            yield batch

    job.source.batches = timed_batches
    job.hooks.append(keep)
    summary = job.run()
    wall = time.perf_counter() - marks["first"]
    steps = sum(spent.values())
    return {"model": model, "store": store, "rate": summary["steady_examples_per_s"], "wall": wall,
            **{k: spent.get(k, 0.0) / wall for k in PHASES}, "between": max(wall - steps, 0.0) / wall}


def top(model: str, store: str, rows: int, n: int) -> str:
    prof = cProfile.Profile()
    prof.runcall(profile, model, store, rows)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(n)
    return out.getvalue()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--models", nargs="+", default=["lr", "fm", "deepfm"])
    ap.add_argument("--stores", nargs="+", default=["memory", "redis"], choices=("memory", "redis"))
    ap.add_argument("--top", type=int, default=0)
    args = ap.parse_args(argv)
    from streamtrain import limit_blas_threads
    limit_blas_threads()
    print(f"# python bench/profile_models.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
    print("| model | store | examples/s after batch 1 | " + " | ".join(PHASES) + " | between steps |")
    print("|---|---|---:|" + "---:|" * (len(PHASES) + 1))
    for model in args.models:
        for store in args.stores:
            r = profile(model, store, args.rows)
            print(f"| {model} | {store} | {r['rate']:.0f} | "
                  + " | ".join(f"{100 * r[k]:.0f} %" for k in PHASES) + f" | {100 * r['between']:.0f} % |",
                  flush=True)
    if args.top:
        for model in args.models:
            for store in args.stores:
                print(f"\n{model} / {store}: top {args.top} functions by own time\n```")
                print(top(model, store, args.rows, args.top).strip())
                print("```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
