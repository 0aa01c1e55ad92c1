"""Steady-state training speed with and without the per-example engine, and where its time goes.

    python bench/bench_per_example.py [--examples 200000] [--models lr fm deepfm] [--repeat 3]
                                      [--batch-size N] [--kernels]

The Criteo sample is parsed into batches first (cycled up to ``--examples``); then only
``Trainer.step`` is timed, after 5 warm-up batches (numba's cache load is paid there), for
each example model as committed (``sequential: true``) and with ``sequential: false``. Prints
examples/s (wall, and per CPU second of this process, which a loaded machine disturbs less) and,
for the engine, its milliseconds per batch: the compiled loop, the rest of ``learn`` (the layers'
terms, gathering rows and states, the counting sort) and ``push``. Best of ``--repeat`` runs.
``--batch-size`` overrides the example files' batch sizes.

``--kernels`` times only the compiled ``kernels.learn`` and ``kernels.combine``, on the arguments
they received in real training (up to 20 batches after the warm-up, copied): per batch the
minimum over ``--repeat`` calls in this thread's CPU time (each call from fresh copies of the
arrays it updates), summed; microseconds per example. The least noisy A/B of a kernel change
on a loaded machine.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("STREAMTRAIN_DATA", ROOT.parent / "shared" / "data"))
WARMUP = 5
SPENT: dict = defaultdict(float)


KERNEL_BATCHES = 20


def batches_of(model: str, examples: int, sets: list[str]):
    from streamtrain import config as cfgmod
    from streamtrain.readers.source import open_reader
    sets = ["reader.type=file", f"reader.path={DATA / 'criteo_kaggle_head7625.tsv.gz'}",
            "reader.format=criteo", "reader.loop=true", f"reader.limit={examples}", "metrics.enabled=false", *sets]
    cfg = cfgmod.validate(cfgmod.load(ROOT / "examples" / f"{model}.json", sets))
    return cfg, list(open_reader(cfg["reader"], cfg["batch_size"]).batches())


def trainer_of(model: str, examples: int, sets: list[str]):
    from streamtrain.graph import Graph, Schema
    from streamtrain.store.memory import MemoryStore
    from streamtrain.trainer import Trainer
    cfg, batches = batches_of(model, examples, sets)
    graph = Graph.from_config(cfg["layers"], Schema.of(batches[0]))
    store = MemoryStore()
    store.declare(graph.params, cfg["default_optimizer"])
    return cfg, batches, Trainer(graph, store, seed=cfg.get("seed", 0))


def run(model: str, examples: int, sequential: bool, sets: list[str]) -> dict:
    cfg, batches, trainer = trainer_of(model, examples, [f"layers.loss.sequential={str(sequential).lower()}", *sets])
    for b in batches[:WARMUP]:
        trainer.step(b)
    SPENT.clear()
    wall, cpu = time.perf_counter(), time.process_time()
    for b in batches[WARMUP:]:
        trainer.step(b)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    n = sum(b.size for b in batches[WARMUP:])
    nb = len(batches) - WARMUP
    return {"wall": n / wall, "cpu": n / cpu, "batch": cfg["batch_size"],
            **{k: v / nb * 1e3 for k, v in SPENT.items()}}


def kernels(model: str, examples: int, repeat: int, sets: list[str]) -> dict:
    """µs per example of ``kernels.learn`` and ``kernels.combine`` on their captured arguments."""
    import numpy as np

    from streamtrain.online import kernels as k
    learn, combine, calls = k.learn, k.combine, {"learn": [], "combine": []}
    def copy(args):          # arrays, also inside the records (namedtuples) learn takes
        return [a.copy() if isinstance(a, np.ndarray) else type(a)(*copy(a)) if hasattr(a, "_fields") else a
                for a in args]
    k.learn = lambda *a: (calls["learn"].append(copy(a)), learn(*a))[1]
    k.combine = lambda *a: (calls["combine"].append(copy(a)), combine(*a))[1]
    try:
        cfg, batches, trainer = trainer_of(model, examples, sets)
        for i, b in enumerate(batches[:WARMUP + KERNEL_BATCHES]):
            if i == WARMUP:
                calls["learn"].clear(), calls["combine"].clear()
            trainer.step(b)
    finally:
        k.learn, k.combine = learn, combine
    n = sum(len(a[0]) for a in calls["learn"])
    out = {"batch": cfg["batch_size"]}
    for name, fn in (("learn", learn), ("combine", combine)):
        total = 0.0
        for args in calls[name]:
            best = float("inf")
            for _ in range(repeat):
                fresh = copy(args)           # learn updates its parameter arrays in place
                t = time.thread_time()
                fn(*fresh)
                best = min(best, time.thread_time() - t)
            total += best
        out[name] = total / n * 1e6
    return out


def _timed(name, fn):
    def wrapper(*args, **kw):
        t = time.process_time()
        try:
            return fn(*args, **kw)
        finally:
            SPENT[name] += time.process_time() - t
    return wrapper


def _time_engine() -> None:
    """Count process time in the engine's learn, push and its compiled loop (once per process)."""
    from streamtrain.online import engine, kernels
    engine.PerExample.learn = _timed("learn", engine.PerExample.learn)
    engine.PerExample.push = _timed("push", engine.PerExample.push)
    kernels.learn = _timed("loop", kernels.learn)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200_000)
    ap.add_argument("--models", nargs="+", default=["lr", "fm", "deepfm"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-size", type=int, help="instead of each example file's batch_size")
    ap.add_argument("--kernels", action="store_true", help="time only kernels.learn and kernels.combine")
    args = ap.parse_args(argv)
    sets = [f"batch_size={args.batch_size}"] if args.batch_size else []
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    import numpy
    flags = (f" --batch-size {args.batch_size}" if args.batch_size else "") + (" --kernels" if args.kernels else "")
    print(f"# python bench/bench_per_example.py --examples {args.examples} --models {' '.join(args.models)} "
          f"--repeat {args.repeat}{flags}\n# numpy {numpy.__version__}, {os.cpu_count()} cores; Criteo cycled; "
          f"steady state (after {WARMUP} batches), best of {args.repeat}")
    if args.kernels:
        print("| model | batch | learn µs/example | combine µs/example |\n|---|---:|---:|---:|")
        for model in args.models:
            r = kernels(model, args.examples, args.repeat, sets)
            print(f"| {model} | {r['batch']} | {r['learn']:.3f} | {r['combine']:.3f} |", flush=True)
        return 0
    _time_engine()
    print("| model | batch | sequential ex/s (wall) | per CPU s | off: ex/s (wall) | per CPU s | "
          "loop ms/batch | rest of learn | push |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for model in args.models:
        on = max((run(model, args.examples, True, sets) for _ in range(args.repeat)), key=lambda r: r["cpu"])
        off = max((run(model, args.examples, False, sets) for _ in range(args.repeat)), key=lambda r: r["cpu"])
        print(f"| {model} | {on['batch']} | {on['wall']:.0f} | {on['cpu']:.0f} | {off['wall']:.0f} | {off['cpu']:.0f} | "
              f"{on['loop']:.3f} | {on['learn'] - on['loop']:.3f} | {on['push']:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
