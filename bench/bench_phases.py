"""Steady-state time per batch of each phase of a training step, on batches parsed beforehand.

    python bench/bench_phases.py [--examples 30000] [--models lr fm deepfm] [--rounds 10]

The Criteo sample is parsed into batches first (each model's own batch size, cycled up to
``--examples``); then the job's trainer steps through them ``--rounds`` times (after one warm-up
round: numba's cache load) and, per round, the whole step, the graph's feed (unique ids and
positions), the phases each step reports (``StepResult.seconds``: pull, forward, backward,
push) and the job's hooks (the drift detectors) are summed.
Printed: microseconds per batch, each the minimum over the rounds (a loaded machine only ever
adds time), and examples/s of the fastest round. No reader thread runs, so the figures are
the trainer's own work, without the GIL or scheduling interplay with the parse thread that
``bench/profile_models.py`` includes.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_per_example import ROOT, batches_of  # noqa: E402

PHASES = ("step", "feed", "pull", "forward", "backward", "push", "hooks")


def run(model: str, examples: int, rounds: int) -> dict:
    from streamtrain import config as cfgmod
    from streamtrain.job import Job
    cfg, batches = batches_of(model, examples, [])
    sets = [f"reader.path={ROOT / 'README.md'}", "reader.format=criteo", "reader.type=file",
            "metrics.enabled=false", "checkpoint.dir=null"]
    job = Job(cfgmod.validate(cfgmod.load(ROOT / "examples" / f"{model}.json", sets)))
    job._build(batches[0])
    trainer, graph = job.trainer, job.trainer.graph
    feed = graph.feed

    def timed_feed(ctx, batch):                  # timed here: a trainer without a feed clock too
        t = time.perf_counter()
        feed(ctx, batch)
        spent["feed"] += time.perf_counter() - t

    graph.feed = timed_feed
    best, fastest = {}, float("inf")
    for r in range(rounds + 1):
        spent = dict.fromkeys(PHASES, 0.0)
        t0 = time.perf_counter()
        for b in batches:
            t1 = time.perf_counter()
            result = trainer.step(b)
            spent["step"] += time.perf_counter() - t1
            for k, v in result.seconds.items():
                if k in spent and k != "feed":
                    spent[k] += v
            th = time.perf_counter()
            for hook in job.hooks:
                hook(job, b, result)
            spent["hooks"] += time.perf_counter() - th
        wall = time.perf_counter() - t0
        if r:                                    # round 0 warms up
            fastest = min(fastest, wall)
            best = {k: min(v, best.get(k, v)) for k, v in spent.items()}
    n = sum(b.size for b in batches)
    return {"batch": cfg["batch_size"], "rate": n / fastest,
            **{k: v / len(batches) * 1e6 for k, v in best.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=30_000)
    ap.add_argument("--models", nargs="+", default=["lr", "fm", "deepfm"])
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args(argv)
    from streamtrain import limit_blas_threads
    limit_blas_threads()
    logging.getLogger("streamtrain").setLevel(logging.ERROR)      # drift alarms of a cycled stream
    print(f"# python bench/bench_phases.py --examples {args.examples} --models {' '.join(args.models)} "
          f"--rounds {args.rounds}")
    print("| model | batch | examples/s (fastest round) | " + " | ".join(f"{p} µs" for p in PHASES) + " |")
    print("|---|---:|---:|" + "---:|" * len(PHASES))
    for model in args.models:
        r = run(model, args.examples, args.rounds)
        print(f"| {model} | {r['batch']} | {r['rate']:.0f} | " + " | ".join(f"{r[p]:.0f}" for p in PHASES) + " |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
