"""Graph learning: GraphSAGE speed beside PyTorch Geometric, sampling speed, quality.

    python bench/bench_graph.py [speed] [sampling] [synthetic] [movielens] [--batches N]

* ``speed``: a two-layer GraphSAGE (fanouts [10, 5], hidden 64, 64 node features, 4 classes,
  512 seed nodes per batch; ``examples/graphsage.json`` with dropout 0) trains on the same
  pre-sampled blocks in streamtrain (memory store, Adam) and in PyG (``SAGEConv`` x2, Adam,
  ``torch.set_num_threads(1)`` like streamtrain's single BLAS thread); seeds/s of each, and the
  largest difference of their forward outputs with the same weights (target: <= 1e-5).
* ``sampling``: sampled edges/s of the memory graph store (512 seeds, fanouts [10, 5]).
* ``synthetic``: ``examples/graphsage.json`` one progressive pass over the synthetic SBM stream,
  beside an oracle told the planted communities of each node's neighbours (naive Bayes over
  the planted centres, the neighbours' communities and the intra-community rate).
* ``movielens``: ``examples/graphsage_rec.json`` vs ``examples/dcn.json`` (progressive logloss,
  the protocol of ``bench/compare.py``), with an ablation over the neighbourhood size.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import report  # noqa: E402

FANOUTS, SEEDS, FEATURES, CLASSES = [10, 5], 512, 64, 4


# ---- a graph and its sampled batches -----------------------------------------------------------
def filled_store(nodes=50_000, edges=500_000, features=FEATURES, seed=0):
    from streamtrain.graphstore import make_graph_store
    from streamtrain.readers.graph_synthetic import GraphStream
    stream = GraphStream({"nodes": nodes, "features": features, "communities": CLASSES,
                          "examples": edges, "seed": seed})
    store = make_graph_store({"backend": "memory", "neighbours": 32})
    for u, v in stream.events():
        a, b = stream.ids[u], stream.ids[v]
        store.insert(np.concatenate([a, b]), np.concatenate([b, a]))
    store.set_features(stream.ids, stream.node_features)
    return stream, store


def sampled_batches(stream, store, n, seed=1):
    from streamtrain.batch import Batch
    from streamtrain.graphstore.blocks import Subgraph
    from streamtrain.graphstore.sampling import Sampler
    rng = np.random.default_rng(seed)
    sampler = Sampler(store, FANOUTS, seed)
    out = []
    for _ in range(n):
        nodes = rng.choice(len(stream.ids), SEEDS, replace=False)
        blocks, ids = sampler.sample(stream.ids[nodes])
        sub = Subgraph(blocks, ids, store.features(ids, FEATURES), {"src": np.arange(SEEDS)})
        out.append(Batch(labels=stream.community[nodes].astype(np.float32), subgraph=sub))
    return out


def sage_config():
    from streamtrain import config as C
    return C.validate(C.load(ROOT / "examples" / "graphsage.json",
                             [f"layers.h0.features={FEATURES}", "layers.h1.rate=0.0", "metrics.enabled=false"]))


# ---- speed -------------------------------------------------------------------------------------
def torch_net():
    import torch
    from torch_geometric.nn import SAGEConv

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = torch.nn.ModuleList([SAGEConv(FEATURES, 64, aggr="mean"), SAGEConv(64, CLASSES, aggr="mean")])

        def forward(self, x, blocks):
            h = x
            for i, (conv, (ei, ns, nd)) in enumerate(zip(self.convs, blocks)):
                h = conv((h, h[:nd]), ei, size=(ns, nd))
                if i == 0:
                    h = torch.relu(h)
            return h
    return Net()


def torch_blocks(batch):
    import torch
    sub = batch.subgraph
    blocks = [(torch.from_numpy(np.stack([b.src, b.dst])), b.num_src, b.num_dst) for b in sub.blocks]
    return torch.from_numpy(sub.features), blocks, torch.from_numpy(batch.labels.astype(np.int64))


def copy_weights(net) -> dict:
    """streamtrain parameter values equal to the PyG net's: self = lin_r, neighbours = lin_l."""
    values = {}
    for i, conv in enumerate(net.convs):
        values[f"self{i}.W"] = conv.lin_r.weight.detach().numpy().T.copy()
        values[f"neigh{i}.W"] = conv.lin_l.weight.detach().numpy().T.copy()
        values["act0.b" if i == 0 else "out.b"] = conv.lin_l.bias.detach().numpy().copy()
    return values


def forward_difference(batch) -> float:
    import torch
    from streamtrain.graph import Graph, Schema
    torch.manual_seed(0)
    net = torch_net()
    x, blocks, _ = torch_blocks(batch)
    with torch.no_grad():
        want = net(x, blocks).numpy()
    g = Graph.from_config(sage_config()["layers"], Schema())
    ctx = g.context(training=False)
    g.feed(ctx, batch)
    ctx.values = copy_weights(net)
    got = g.forward(ctx, upto="out")
    return float(np.abs(got - want).max())


def speed(batches, rounds=3) -> dict:
    import torch
    from streamtrain import limit_blas_threads
    from streamtrain.graph import Graph, Schema
    from streamtrain.store import MemoryStore
    from streamtrain.trainer import Trainer
    torch.set_num_threads(1)
    limit_blas_threads()
    cfg = sage_config()
    g = Graph.from_config(cfg["layers"], Schema())
    store = MemoryStore()
    store.declare(g.params, cfg["default_optimizer"])
    trainer = Trainer(g, store)
    net = torch_net()
    opt = torch.optim.Adam(net.parameters(), lr=cfg["default_optimizer"]["lr"])
    tb = [torch_blocks(b) for b in batches]

    def ours():
        for b in batches:
            trainer.step(b)

    def pyg():
        for x, blocks, y in tb:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(x, blocks)[:SEEDS], y, reduction="sum")
            loss.backward()
            opt.step()

    times = {"streamtrain": [], "pyg": []}
    ours(), pyg()                                        # warm-up (first allocations, caches)
    for _ in range(rounds):                              # interleaved, median of the rounds
        for name, fn in (("streamtrain", ours), ("pyg", pyg)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    n = len(batches) * SEEDS
    return {k: n / float(np.median(v)) for k, v in times.items()}


def sampling(stream, store, n=50) -> float:
    from streamtrain.graphstore.sampling import Sampler
    rng = np.random.default_rng(2)
    seeds = [stream.ids[rng.choice(len(stream.ids), SEEDS, replace=False)] for _ in range(n)]
    sampler = Sampler(store, FANOUTS, 3)
    sampler.sample(seeds[0])
    sampler.edges = 0
    t0 = time.perf_counter()
    for s in seeds:
        sampler.sample(s)
    return sampler.edges / (time.perf_counter() - t0)


# ---- quality -----------------------------------------------------------------------------------
def oracle_accuracy(cfg) -> float:
    """Progressive accuracy of naive Bayes told each node's recent neighbours' communities, the
    planted centres and the intra rate; its graph grows like the job's (after each batch)."""
    from streamtrain.graphstore import make_graph_store
    from streamtrain.readers.graph_synthetic import GraphStream
    r = cfg["reader"]
    stream = GraphStream(r, cfg["batch_size"])
    k, intra = stream.cfg["communities"], stream.cfg["intra"]
    store = make_graph_store({"backend": "memory", "neighbours": cfg["graph"]["store"].get("neighbours", 32)})
    index = {int(i): j for j, i in enumerate(stream.ids)}
    comm_of_id = stream.community
    log_same, log_diff = np.log(intra), np.log((1 - intra) / (k - 1))
    hits = total = 0
    for batch in stream.reader()():
        u_ids, v_ids = batch.sparse["node"].ids, batch.sparse["peer"].ids
        x = batch.dense.astype(np.float64)
        score = -0.5 * ((x[:, None, :] - stream.centres[None]) ** 2).sum(axis=2)      # [B, k]
        lists, counts = store.neighbours(u_ids)
        valid = np.arange(lists.shape[1]) < counts[:, None]
        rows = np.repeat(np.arange(len(u_ids)), valid.sum(axis=1))
        nbr = comm_of_id[np.array([index[int(i)] for i in lists[valid]], np.int64)]
        same = np.zeros((len(u_ids), k))
        np.add.at(same, (rows, nbr), 1)
        score += same * log_same + (counts[:, None] - same) * log_diff
        hits += int((score.argmax(axis=1) == batch.labels).sum())
        total += batch.size
        store.insert(np.concatenate([u_ids, v_ids]), np.concatenate([v_ids, u_ids]))
    return hits / total


def synthetic() -> dict:
    from streamtrain import config as C
    from streamtrain.job import Job
    cfg = C.validate(C.load(ROOT / "examples" / "graphsage.json", ["metrics.enabled=false", "log.every_seconds=1e9"]))
    t0 = time.perf_counter()
    summary = Job(cfg).run()
    return {"graphsage": summary["accuracy"], "examples_per_s": summary["examples"] / (time.perf_counter() - t0),
            "oracle": oracle_accuracy(cfg), "examples": summary["examples"]}


def movielens() -> dict:
    import compare
    import streams
    s = streams.stream("movielens")
    out = {}
    for label, model, sets in (("dcn", "dcn", []), ("graphsage_rec", "graphsage_rec", []),
                               ("graphsage_rec, fanouts [10, 5], 32 neighbours kept", "graphsage_rec",
                                ["graph.fanouts=[10,5]", "graph.store.neighbours=32"]),
                               ("graphsage_rec, 1 neighbour kept per node", "graphsage_rec",
                                ["graph.store.neighbours=1"])):
        r = compare.run_streamtrain(model, s, None, sets)
        out[label] = {"logloss": compare.logloss(r["y"], r["p"]), "auc": compare.auc(r["y"], r["p"]),
                      "examples_per_s": r["examples"] / r["seconds"], "curve": report.curve(r["y"], r["p"])}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("parts", nargs="*", default=["speed", "sampling", "synthetic", "movielens"])
    ap.add_argument("--batches", type=int, default=20, help="batches per speed round")
    ap.add_argument("--json", metavar="FILE", help="also write every figure (and the MovieLens learning "
                    "curves) to FILE, for bench/plots.py")
    args = ap.parse_args(argv)
    got: dict = {}
    print(f"# bench_graph on {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    if {"speed", "sampling"} & set(args.parts):
        stream, store = filled_store()
        print(f"graph: {store.stats()['nodes']} nodes, {store.stats()['edges']} neighbour entries")
        if "sampling" in args.parts:
            got["sampling_edges_per_s"] = sampling(stream, store)
            print(f"sampling (memory store, {SEEDS} seeds, fanouts {FANOUTS}): {got['sampling_edges_per_s']:,.0f} edges/s")
        if "speed" in args.parts:
            batches = sampled_batches(stream, store, args.batches)
            got["forward_max_abs_difference"] = forward_difference(batches[0])
            print(f"forward max |streamtrain - PyG| with the same weights: {got['forward_max_abs_difference']:.2e}")
            r = got["train_seeds_per_s"] = speed(batches)
            print(f"train seeds/s: streamtrain {r['streamtrain']:,.0f}, PyG SAGEConv {r['pyg']:,.0f} "
                  f"(ratio {r['streamtrain'] / r['pyg']:.2f})")
    if "synthetic" in args.parts:
        r = got["synthetic"] = synthetic()
        print(f"synthetic SBM, one progressive pass of {r['examples']}: GraphSAGE accuracy {r['graphsage']:.4f} "
              f"({r['examples_per_s']:,.0f} ex/s), oracle told the neighbours' communities {r['oracle']:.4f}")
    if "movielens" in args.parts:
        got["movielens"] = movielens()
        for label, r in got["movielens"].items():
            print(f"movielens {label}: logloss {r['logloss']:.4f} auc {r['auc']:.4f} ({r['examples_per_s']:,.0f} ex/s)")
    if args.json:
        report.write(args.json, {**report.meta("bench/bench_graph.py", argv), **got})
    return 0


if __name__ == "__main__":
    sys.exit(main())
