"""The compiled per-example loop alone (``kernels.learn``) on captured real batches: ns/example.

    python bench/bench_kernel.py capture FILE [--model fm] [--batches 40] [--examples 200000]
    python bench/bench_kernel.py time FILE [--repeat 7] [--against kernels_base]
    python bench/bench_kernel.py loops FILE [--loops 1]     # for valgrind --tool=callgrind

``capture`` trains the example model (Criteo sample cycled, memory store) and pickles the
arguments ``learn`` received for ``--batches`` batches after 5 warm-up batches (parameters as
pulled, before the batch's updates). ``time`` replays them: per batch the minimum over
``--repeat`` calls of this thread's CPU time (each from fresh copies of the arrays ``learn``
updates), summed, as ns/example; and a checksum of the outputs (every logit, residual and
final parameter array), which a change meant to keep the arithmetic must leave as it is.

``--against NAME`` is the A/B to trust on a busy machine: copy the other version's kernels.py
beside this one under that name (``kernels_base``, say; not to be committed) and each batch is run by
both, call after call in turn, so both see the same load; it prints both figures, their ratio
and both checksums. Run it a few times: the same code against itself (A/A) moves the ratio by
up to ±6 % (FM) and ±10 % (LR) at load 4 on 2 cores.

``loops`` calls ``learn`` on every batch ``--loops`` times, nothing else: instruction counts
under ``valgrind --tool=callgrind`` (no hardware counters in this VM: perf stat says "not
supported"). Set ``NUMBA_CPU_NAME=znver3`` and ``NUMBA_CPU_FEATURES`` (llvmlite's
``get_host_cpu_features().flatten()``) for the valgrind run and one run outside it first:
valgrind's CPU looks different to LLVM, so numba would otherwise compile (minutes under
valgrind) code for another CPU. The jitted functions show as ``???:0x…``; the learn wrapper's
inclusive count over (examples + the first batch's, which loads the kernel) is instr/example.
numba's cache of a kernel is keyed on its own file's content: after editing a module it calls
(``optim/*.py``, a helper module), remove ``streamtrain/online/__pycache__/kernels.learn-*``.

The file holds the arguments in the form ``learn`` takes them when captured; a change of
``learn``'s signature needs a new capture.
"""
from __future__ import annotations

import argparse
import hashlib
import pickle
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

WARMUP = 5


def _copy(args):
    """Fresh copies of the arrays, also inside the records (namedtuples) ``learn`` takes."""
    return [a.copy() if isinstance(a, np.ndarray) else type(a)(*_copy(a)) if hasattr(a, "_fields") else a
            for a in args]


def capture(path: str, model: str, batches: int, examples: int) -> None:
    from bench_per_example import trainer_of

    from streamtrain.online import kernels as k
    learn, calls = k.learn, []
    k.learn = lambda *a: (calls.append(_copy(a)), learn(*a))[1]
    try:
        _, data, trainer = trainer_of(model, examples, [])
        for i, b in enumerate(data[:WARMUP + batches]):
            if i == WARMUP:
                calls.clear()
            trainer.step(b)
    finally:
        k.learn = learn
    with open(path, "wb") as f:
        pickle.dump({"model": model, "calls": calls}, f, protocol=pickle.HIGHEST_PROTOCOL)
    n = sum(len(a[0]) for a in calls)
    print(f"captured {len(calls)} batches, {n} examples of {model} into {path}")


def _load(path: str):
    with open(path, "rb") as f:
        got = pickle.load(f)
    return got["model"], got["calls"]


def _flat(x):
    if isinstance(x, np.ndarray):
        yield x
    elif isinstance(x, (tuple, list)):
        for a in x:
            yield from _flat(a)


def checksum(outputs) -> str:
    h = hashlib.sha1()
    for a in _flat(outputs):
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def timed(path: str, repeat: int) -> None:
    from streamtrain.online import kernels as k
    model, calls = _load(path)
    n = sum(len(a[0]) for a in calls)
    total, outputs = 0.0, []
    for args in calls:
        best = float("inf")
        for _ in range(repeat):
            fresh = _copy(args)
            t = time.thread_time()
            out = k.learn(*fresh)
            best = min(best, time.thread_time() - t)
        outputs.append((out, fresh))
        total += best
    print(f"{model}: learn {total / n * 1e9:.0f} ns/example ({len(calls)} batches, {n} examples, "
          f"best of {repeat}); checksum {checksum(outputs)}")


def against(path: str, repeat: int, other: str) -> None:
    """``learn`` of ``kernels`` and of module ``other`` (a copy of another version's kernels.py
    put beside it), call by call in turn on each batch: both see the same machine load."""
    import importlib

    from streamtrain.online import kernels as k
    b = importlib.import_module(f"streamtrain.online.{other}")
    model, calls = _load(path)
    n = sum(len(a[0]) for a in calls)
    totals = {"new": 0.0, other: 0.0}
    sums = {"new": [], other: []}
    for args in calls:
        best = dict.fromkeys(totals, float("inf"))
        for r in range(repeat):
            for name, fn in (("new", k.learn), (other, b.learn)) if r % 2 else ((other, b.learn), ("new", k.learn)):
                fresh = _copy(args)
                t = time.thread_time()
                out = fn(*fresh)
                best[name] = min(best[name], time.thread_time() - t)
                if r == 0:
                    sums[name].append((out, fresh))
        for name in totals:
            totals[name] += best[name]
    print(f"{model}: learn new {totals['new'] / n * 1e9:.0f} ns/example, {other} {totals[other] / n * 1e9:.0f} "
          f"(ratio {totals['new'] / totals[other]:.3f}; {len(calls)} batches, best of {repeat} each, alternating); "
          f"checksums {checksum(sums['new'])} {checksum(sums[other])}")


def loops(path: str, times: int) -> None:
    from streamtrain.online import kernels as k
    _, calls = _load(path)
    fresh = [_copy(a) for a in calls for _ in range(times)]
    k.learn(*_copy(calls[0]))            # load the compiled kernel before the counted part
    t = time.perf_counter()
    for args in fresh:
        k.learn(*args)
    print(f"{len(fresh)} calls in {time.perf_counter() - t:.3f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("capture", "time", "loops"))
    ap.add_argument("file")
    ap.add_argument("--model", default="fm")
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--examples", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--loops", type=int, default=1)
    ap.add_argument("--against", help="time: also a module beside online/kernels.py, call by call in turn")
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits
    threadpool_limits(1)
    if args.what == "capture":
        capture(args.file, args.model, args.batches, args.examples)
    elif args.what == "time" and args.against:
        against(args.file, args.repeat, args.against)
    elif args.what == "time":
        timed(args.file, args.repeat)
    else:
        loops(args.file, args.loops)
    return 0


if __name__ == "__main__":
    sys.exit(main())
