"""The benchmark plots of BENCHMARKS.md and the docs, drawn from the benchmarks' ``--json`` files.

    python bench/plots.py [--results bench/results] [--out docs/img]

Reads (each optional: a plot whose file is missing is skipped, and said so):

* ``targets.json`` (``compare.py --targets --json``) → ``throughput.png``: examples/s of each
  model against Vowpal Wabbit and PyTorch; with ``redis_store.json`` → ``redis.png``;
* ``quality.json`` (``compare.py --data ... --json``) → ``quality.png``: progressive logloss
  over each stream, every streamtrain model against VW and River;
* ``serve.json`` (``bench_serve.py --json``) → ``serving-latency.png``;
* ``graph.json`` (``bench_graph.py movielens --json``) → ``graph-learning-curve.png``.

matplotlib is in the ``bench`` extra only; the daemon never imports it.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OURS, PEER = "#1f77b4", "#7f7f7f"


def caption(fig, data: dict) -> None:
    """The run's provenance under the plot: command, host, date."""
    host = data.get("host", {})
    text = (f"{data.get('command', '?')}\n{host.get('cpu', '?')}, {host.get('cores', '?')} cores, "
            f"load {host.get('load_average', '?')}; {data.get('date', '?')}")
    fig.text(0.01, 0.005, text, fontsize=6.5, color="#555555", va="bottom")


def save(fig, path: Path) -> None:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def throughput(data: dict, out: Path) -> None:
    got = data["learners"]
    groups = [("LR", ["st-lr", "st-lr-redis", "vw"]), ("FM", ["st-fm", "vw"]),
              ("DeepFM", ["st-deepfm", "st-deepfm-redis", "torch-deepfm", "vw"])]
    labels = {"st-lr": "streamtrain", "st-fm": "streamtrain", "st-deepfm": "streamtrain",
              "st-lr-redis": "streamtrain, Redis store", "st-deepfm-redis": "streamtrain, Redis store",
              "vw": "Vowpal Wabbit (linear)", "torch-deepfm": "PyTorch DeepFM"}
    colours = {"streamtrain": OURS, "streamtrain, Redis store": "#6baed6", "Vowpal Wabbit (linear)": PEER,
               "PyTorch DeepFM": "#ff7f0e"}
    fig, ax = plt.subplots(figsize=(8, 4.2))
    y, ticks, seen = 0, [], set()
    for model, names in groups:
        start = y
        for name in [n for n in names if n in got]:
            label = labels[name]
            rate = got[name]["whole_rate"]
            ax.barh(y, rate, color=colours[label], label=None if label in seen else label)
            ax.text(rate, y, f" {rate / 1000:,.0f}k", va="center", fontsize=8)
            seen.add(label)
            y += 1
        ticks.append(((start + y - 1) / 2, model))
        y += 0.8
    ax.set_yticks([t for t, _ in ticks], [m for _, m in ticks])
    ax.invert_yaxis()
    ax.set_xlabel("examples/s, whole process (higher is better)")
    ax.set_title(f"Training throughput, {data['rows']:,} Criteo rows, one pass")
    ax.legend(loc="lower right", fontsize=8)
    ax.set_xlim(0, max(g["whole_rate"] for g in got.values()) * 1.18)
    fig.subplots_adjust(bottom=0.2, left=0.1, right=0.97)
    caption(fig, data)
    save(fig, out / "throughput.png")


def redis(targets: dict | None, store: dict | None, out: Path) -> None:
    panels = [p for p in (targets, store) if p]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    axes = list(axes[0])
    if targets:
        ax = axes.pop(0)
        got = targets["learners"]
        models = [(m, f"st-{m.lower()}", f"st-{m.lower()}-redis") for m in ("LR", "DeepFM")]
        models = [m for m in models if m[1] in got and m[2] in got]
        x = np.arange(len(models))
        mem = [got[a]["whole_rate"] for _, a, _ in models]
        red = [got[b]["whole_rate"] for _, _, b in models]
        ax.bar(x - 0.2, mem, 0.4, color=OURS, label="memory store")
        ax.bar(x + 0.2, red, 0.4, color="#6baed6", label="Redis store")
        for i, (m, r) in enumerate(zip(mem, red)):
            ax.text(i + 0.2, r, f"{r / m:.2f}×", ha="center", va="bottom", fontsize=8)
        ax.set_xticks(x, [m for m, _, _ in models])
        ax.set_ylabel("examples/s, whole process")
        ax.set_title("Training: Redis ÷ memory", fontsize=10)
        ax.set_ylim(0, max(mem) * 1.2)
        ax.legend(fontsize=8)
    if store:
        ax = axes.pop(0)
        dims = sorted(store["dims"], key=int)
        cols = [("mget", "raw MGET"), ("pull", "store pull"), ("mset", "raw MSET"), ("warm", "store push (step)")]
        x = np.arange(len(dims))
        for i, (key, label) in enumerate(cols):
            ax.bar(x + (i - 1.5) * 0.2, [store["dims"][d][key] for d in dims], 0.2, label=label,
                   color=["#c7c7c7", OURS, "#8c8c8c", "#6baed6"][i])
        ax.set_xticks(x, [f"dim {d}" for d in dims])
        ax.set_ylabel("rows/s")
        ax.set_title(f"Store against raw redis-py ({store['rows']:,} rows per call)", fontsize=10)
        ax.set_ylim(0, max(max(r[k] for k, _ in cols) for r in store["dims"].values()) * 1.35)
        ax.legend(fontsize=7, ncol=2, loc="upper center")
    fig.subplots_adjust(bottom=0.25, wspace=0.35, left=0.1, right=0.97)
    caption(fig, targets or store)
    save(fig, out / "redis.png")


def quality(data: dict, out: Path) -> None:
    sets = list(data["data"])
    fig, axes = plt.subplots(1, len(sets), figsize=(5.2 * len(sets), 4.8), squeeze=False)
    blues = plt.cm.Blues(np.linspace(0.45, 0.95, 7))
    peers = {"vw": "#d62728", "vw-q": "#ff7f0e", "river-sgd": "#2ca02c", "river-ftrl": "#9467bd", "river-fm": "#8c564b"}
    for ax, name in zip(axes[0], sets):
        rows = [r for r in data["data"][name] if "curve" in r]
        best = min(r["logloss"] for r in rows)
        shown, lows, k = [], [], 0
        for r in rows:
            c = r["curve"]
            x, y = np.asarray(c["examples"]), np.asarray(c["logloss"])
            keep = x >= 0.1 * x[-1]                     # the first tenth is a handful of examples
            ours = r["kind"] == "streamtrain"
            if not ours and r["logloss"] > 1.5 * best:  # off the scale (river-fm on Criteo): named only
                ax.plot([], [], ls="--", color=peers.get(r["learner"], PEER),
                        label=f"{r['learner']} {r['logloss']:.4f} (off the scale)")
                continue
            colour = blues[k % len(blues)] if ours else peers.get(r["learner"], PEER)
            k += ours
            ax.plot(x[keep], y[keep], lw=1.3 if ours else 1.6, ls="-" if ours else "--", color=colour,
                    label=f"{'st ' if ours else ''}{r['learner']} {r['logloss']:.4f}")
            shown.append(y[keep].max())
            lows.append(y[keep].min())
        lo, hi = min(lows), max(shown)
        ax.set_ylim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
        ax.set_title(f"{name}: progressive logloss (lower is better)", fontsize=10)
        ax.set_xlabel("examples seen (from a tenth of the stream)")
        ax.legend(fontsize=6.5, ncol=2, loc="upper right")
    fig.subplots_adjust(bottom=0.2, wspace=0.22, left=0.05, right=0.99)
    caption(fig, data)
    save(fig, out / "quality.png")


def serving(data: dict, out: Path) -> None:
    lat = np.asarray(data["single_latency_ms"])
    fig, (ax, cdf) = plt.subplots(1, 2, figsize=(9, 3.8))
    top = np.percentile(lat, 99.5)
    ax.hist(lat[lat <= top], bins=np.geomspace(lat.min(), top, 60), color=OURS)
    ax.set_xscale("log")
    for q, style in ((50, "-"), (99, "--")):
        v = np.percentile(lat, q)
        ax.axvline(v, color="k", ls=style, lw=1)
        ax.text(v, ax.get_ylim()[1] * 0.9, f" p{q} {v:.2f} ms", fontsize=8)
    ax.set_xlabel("latency, ms, log scale (up to p99.5)")
    ax.set_ylabel("requests")
    ax.set_title(f"Single-record /v1/predict at {data['single']['rate']:.0f}/s", fontsize=10)
    s = np.sort(lat)
    cdf.plot(s, np.arange(1, len(s) + 1) / len(s), color=OURS)
    cdf.set_xscale("log")
    cdf.set_xlabel("latency, ms (log)")
    cdf.set_ylabel("fraction of requests")
    trainer = "a trainer beside it" if data.get("trainer") else "no trainer"
    cdf.set_title(f"{data['model']} from Redis, {trainer}; batched {data['batched']['records_per_s']:,} rec/s",
                  fontsize=9)
    cdf.grid(alpha=0.3)
    fig.subplots_adjust(bottom=0.25, wspace=0.3, left=0.08, right=0.97)
    caption(fig, data)
    save(fig, out / "serving-latency.png")


def graph(data: dict, out: Path) -> None:
    runs = data["movielens"]
    fig, (ax, gap) = plt.subplots(1, 2, figsize=(10, 4.2))
    base = np.asarray(runs["dcn"]["curve"]["logloss"]) if "dcn" in runs else None
    for label, r in runs.items():
        c = r["curve"]
        main = label in ("dcn", "graphsage_rec")
        style = {"lw": 1.6 if main else 1.0, "ls": "-" if main else ":"}
        ax.plot(c["examples"], c["logloss"], label=f"{label}: {r['logloss']:.4f}", **style)
        if base is not None and len(c["logloss"]) == len(base):
            gap.plot(c["examples"], np.asarray(c["logloss"]) - base, **style)
    finals = [r["logloss"] for r in runs.values()]
    ax.set_ylim(min(finals) - 0.01, max(finals) + 0.05)
    ax.set_xlabel("examples seen (MovieLens-100K in time order)")
    ax.set_ylabel("progressive logloss (lower is better)")
    ax.set_title("GraphSAGE (graphsage_rec.json) against DCN, one pass", fontsize=10)
    ax.legend(fontsize=7)
    gap.axhline(0, color="k", lw=0.8)
    gap.set_xlabel("examples seen")
    gap.set_ylabel("progressive logloss − DCN's (below 0: better)")
    gap.set_title("The same, as the difference to DCN", fontsize=10)
    fig.subplots_adjust(bottom=0.22, left=0.07, right=0.98, wspace=0.3)
    caption(fig, data)
    save(fig, out / "graph-learning-curve.png")


def load(path: Path) -> dict | None:
    if not path.exists():
        print(f"skipped: no {path}", file=sys.stderr)
        return None
    return json.loads(path.read_text())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    targets, store = load(args.results / "targets.json"), load(args.results / "redis_store.json")
    if targets:
        throughput(targets, args.out)
    if targets or store:
        redis(targets, store, args.out)
    for name, draw in (("quality.json", quality), ("serve.json", serving), ("graph.json", graph)):
        data = load(args.results / name)
        if data:
            draw(data, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
