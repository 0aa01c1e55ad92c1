"""The thread CPU of each part of ``Trainer.step`` where it runs: in the step, batch after batch.

    python bench/step_parts.py [--model deepfm] [--rows 30000] [--passes 3] [--set KEY=VALUE ...]

The rows (the Criteo TSV ``bench/compare.py --targets`` uses) are parsed and prepared first (as
the reader's parse thread does: ``Trainer.prepare``), one pass trains over them, then every
layer's forward and backward, the store's pull / pull_states / push, the per-example engine's
learn and push and their pieces, the progressive metrics and the finite check are wrapped with
a ``time.thread_time`` counter and ``--passes`` more passes run. Printed: the step's CPU µs per
batch and each part's, largest first (a part holds the parts it calls: the loss layer's forward
holds the engine's learn).

``bench/bench_layers.py`` reports the fastest of many calls of one batch's components: caches
warm, the figure steadies on a busy machine, good for an A/B of a kernel. Here each part runs
once per batch between all the others, as in a job, and small numpy calls cost several times
their warm figure (``np.broadcast_to`` in the engine's linear terms: ~3 µs warm, ~25 µs here):
what a change of Python around the kernels saves shows here. Thread CPU, not wall: the load
moves it less, but it still moves (a sibling hyperthread, cache contention); compare two
versions interleaved, several rounds, each wrapper adds ~1 µs to its part.
"""
from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import streams  # noqa: E402

CLOCK = time.thread_time


def _wrap(spent: Counter, obj, attr: str, label: str) -> None:
    inner = getattr(obj, attr)

    def timed(*args, **kwargs):
        t0 = CLOCK()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[label] += CLOCK() - t0
    setattr(obj, attr, timed)


def instrument(trainer, spent: Counter) -> None:
    """Wrap the step's parts (instance attributes, and the engine's module functions)."""
    from streamtrain import context
    from streamtrain.online import engine as engine_module
    from streamtrain.online import kernels
    from streamtrain.store import memory
    for layer in trainer.graph.order:
        _wrap(spent, layer, "forward", f"forward {layer.name} ({layer.kind})")
        _wrap(spent, layer, "backward", f"backward {layer.name} ({layer.kind})")
        if hasattr(layer, "linear_terms"):
            _wrap(spent, layer, "linear_terms", f"engine: linear_terms {layer.name}")
    for attr in ("pull", "pull_states", "push"):
        _wrap(spent, trainer.store, attr, f"store.{attr}")
    if isinstance(trainer.store, memory.MemoryStore):
        for attr in ("step_dense", "step_table_rows", "take_rows"):
            _wrap(spent, memory, attr, f"store: {attr}")
    _wrap(spent, trainer.progressive, "update", "progressive.update")
    _wrap(spent, context.Gradients, "all_finite", "all_finite")
    for attr in ("feed", "gradients", "update"):
        _wrap(spent, trainer.graph, attr, f"graph.{attr}")
    engine = trainer.ctx.engine
    if engine is not None:
        _wrap(spent, engine, "learn", "engine.learn")
        _wrap(spent, engine, "push", "engine.push")
        _wrap(spent, kernels, "learn", "engine: compiled loop")
        for attr in ("_block", "_by_example"):
            _wrap(spent, engine_module, attr, f"engine: {attr}")


def measure(model: str, rows: int, passes: int, sets=()) -> tuple[float, Counter, int]:
    trainer, batches = streams.built_trainer(model, rows, *sets)
    for batch in batches:
        trainer.prepare(batch)
    for batch in batches:                    # numba's cached kernels load, rows are created
        trainer.step(batch)
    spent: Counter = Counter()
    instrument(trainer, spent)
    t0 = CLOCK()
    for _ in range(passes):
        for batch in batches:
            trainer.step(batch)
    return CLOCK() - t0, spent, passes * len(batches)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepfm")
    ap.add_argument("--rows", type=int, default=30_000)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    from streamtrain import limit_blas_threads
    limit_blas_threads()
    total, spent, n = measure(args.model, args.rows, args.passes, args.sets)
    load = Path("/proc/loadavg").read_text().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"# python bench/step_parts.py {' '.join(argv if argv is not None else sys.argv[1:])}  (load {load})\n")
    print("| part | thread CPU µs per batch |\n|---|---:|")
    print(f"| the whole step | {1e6 * total / n:.0f} |")
    for label, seconds in spent.most_common():
        print(f"| {label} | {1e6 * seconds / n:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
