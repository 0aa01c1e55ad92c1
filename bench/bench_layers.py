"""Time of the embedding / FM layers, the per-example engine and the store's push on one batch.

    python bench/bench_layers.py [--models fm deepfm] [--repeat 100]

Each model trains 60 batches of the Criteo TSV (``bench/compare.py --targets``' file), then one
more batch is fed, pulled and run forward, and each component is called ``--repeat`` times on
it; the fastest call is reported (µs). The fastest of many short calls moves little with the
machine's load, so two versions of the code compare well one after the other. Components:
the whole training forward pass (the engine's per-example loop included), the ``emb`` and
``fm`` layers' forward and backward called directly, the engine's learn + push, the memory
store's push of the gradients of the 60th step, its pull of the batch's rows (and of the
engine's slots), the finite check of the pushed gradients and, for a model with a batchwise MLP (DeepFM),
its fc layers' forward and backward (summed over the layers) and the push of its dense
parameters alone.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import streams  # noqa: E402


def fastest_us(fn, repeat: int) -> float:
    """The fastest of ``repeat`` calls of ``fn``, in µs."""
    fastest = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        fastest = min(fastest, time.perf_counter() - t0)
    return 1e6 * fastest


def measure_deep(trainer, batch, grads, push, forward, best) -> dict:
    """The batchwise MLP: its layers called directly, and the store's push of its (Adam) parameters."""
    graph, ctx, store = trainer.graph, trainer.ctx, trainer.store
    deep = [layer for layer in graph.train_order if layer.kind == "fc" and layer.name not in graph_skip(ctx)]
    if not deep:
        return {}
    forward()
    outs = {layer.name: [ctx.outputs[src] for src in layer.inputs] for layer in deep}
    fwd = {layer.name: best(lambda layer=layer: layer.forward(ctx, outs[layer.name])) for layer in deep}
    for layer in deep:
        layer.forward(ctx, outs[layer.name])
    bwd = {}
    for layer in deep:
        gy = np.full((batch.size, *layer.output_shape), 0.01, ctx.dtype)
        bwd[layer.name] = best(lambda layer=layer, gy=gy: layer.backward(ctx, gy))
    from streamtrain.context import Gradients
    dense = Gradients(dense=dict(grads.dense))
    return {"fc layers forward (" + ", ".join(fwd) + ")": sum(fwd.values()),
            "fc layers backward": sum(bwd.values()),
            "store push of the dense parameters (Adam)": best(lambda: push(store, dense))}


def measure(model: str, repeat: int) -> dict:
    from streamtrain.state import Status
    import json
    size = json.loads((streams.ROOT / "examples" / f"{model}.json").read_text())["batch_size"]
    trainer, batches = streams.built_trainer(model, max(30000, 62 * size))      # 62 batches at least
    graph, ctx, store = trainer.graph, trainer.ctx, trainer.store
    pushed = {}
    push = type(store).push
    store.push = lambda grads: (pushed.__setitem__("grads", grads), push(store, grads))[1]
    for batch in batches[:60]:
        trainer.step(batch)
    del store.push
    batch = batches[61]
    graph.feed(ctx, batch)
    dense, tables = graph.needs(ctx)
    ctx.values = store.pull(dense, tables)
    if ctx.engine is not None:
        ctx.states = store.pull_states(ctx.engine.params)
    graph.forward(ctx)

    def best(fn) -> float:
        return fastest_us(fn, repeat)

    def forward():
        for name in ctx.status:
            ctx.status[name] = Status.NULL
        ctx.outputs.clear()
        graph.forward(ctx)

    out = {"training forward pass": best(forward)}
    emb, fm = graph.layers["emb"], graph.layers["fm"]
    xs = [ctx.outputs.get(emb.inputs[0])]
    out["emb forward"] = best(lambda: emb.forward(ctx, xs))
    v = emb.forward(ctx, xs)
    out["fm forward"] = best(lambda: fm.forward(ctx, [v]))
    fm.forward(ctx, [v])
    gy = np.full((batch.size, 1), 0.1, ctx.dtype)
    out["fm backward"] = best(lambda: fm.backward(ctx, gy))
    gv = fm.backward(ctx, gy)[0]
    out["emb backward (rows + squares)"] = best(lambda: emb.backward(ctx, gv))
    if ctx.engine is not None:
        z0, y = np.zeros(batch.size, ctx.dtype), batch.labels.astype(ctx.dtype)

        def learn_push():
            ctx.engine.learn(ctx, z0, y)
            ctx.engine.push(ctx)
        out["engine learn + push"] = best(learn_push)
    out["store push"] = best(lambda: push(store, pushed["grads"]))
    out["store pull (the batch's rows and dense parameters)"] = best(lambda: store.pull(dense, tables))
    if ctx.engine is not None:
        out["store pull_states (the engine's slots)"] = best(lambda: store.pull_states(ctx.engine.params))
    out["gradients all_finite"] = best(pushed["grads"].all_finite)
    out.update(measure_deep(trainer, batch, pushed["grads"], push, forward, best))
    return out


def graph_skip(ctx) -> set:
    """The layers the per-example engine learns (none without one)."""
    return ctx.engine.skip if ctx.engine is not None else set()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["fm", "deepfm"])
    ap.add_argument("--repeat", type=int, default=100)
    args = ap.parse_args(argv)
    from streamtrain import limit_blas_threads
    limit_blas_threads()
    print(f"# python bench/bench_layers.py {' '.join(argv if argv is not None else sys.argv[1:])}\n")
    results = {m: measure(m, args.repeat) for m in args.models}
    print("| component (µs, fastest of --repeat) | " + " | ".join(args.models) + " |")
    print("|---|" + "---:|" * len(args.models))
    for key in dict.fromkeys(k for r in results.values() for k in r):
        print(f"| {key} | " + " | ".join(f"{results[m][key]:.0f}" if key in results[m] else "-"
                                         for m in args.models) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
