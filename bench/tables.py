"""BENCHMARKS.md's tables, printed from the benchmarks' ``--json`` files, to paste in place.

    python bench/tables.py [--results bench/results]

Prints, for each file found, the table of its BENCHMARKS.md section and the line that states
its host, versions and date; a file that is missing is said and skipped.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def provenance(d: dict) -> str:
    h, v = d.get("host", {}), d.get("versions", {})
    vers = ", ".join(f"{k} {x}" for k, x in v.items())
    return (f"`{d.get('command')}`\n\nHost: {h.get('cpu')}, {h.get('cores')} cores, load average "
            f"{h.get('load_average')}; {vers}; {d.get('date')}.\n")


def targets(d: dict) -> None:
    got, ratios = d["learners"], {(r["learner"], r["against"]): r for r in d["ratios"]}
    print("| learner | batch | whole process s | examples/s whole | examples/s steady | ratio (whole) | target |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, g in got.items():
        r = next((r for (a, _), r in ratios.items() if a == name and "redis" not in name), None)
        ratio = f"**{r['whole']:.2f}×** {r['against']}" if r else ""
        mine = next((r for (_, b), r in ratios.items() if b == name and name.startswith("torch-")), None)
        if mine:                                     # a PyTorch peer: streamtrain's ratio over it
            r, ratio = mine, f"{mine['learner']} **{mine['whole']:.2f}×** it"
        target = f"≥ {r['target']}×" if r and r["target"] else ""
        print(f"| {name} | {g['batch']} | {g['whole_s']:.2f} | {g['whole_rate']:,.0f} | "
              f"{g['steady_rate']:,.0f} | {ratio} | {target} |")
    print("\n| model | memory store examples/s | Redis store examples/s | Redis ÷ memory (whole) | steady | target |")
    print("|---|---:|---:|---:|---:|---:|")
    for model in ("lr", "deepfm"):
        r = ratios.get((f"st-{model}-redis", f"st-{model}"))
        if r:
            print(f"| {model} | {got[f'st-{model}']['whole_rate']:,.0f} | {got[f'st-{model}-redis']['whole_rate']:,.0f} "
                  f"| **{r['whole']:.2f}×** | {r['steady']:.2f}× | ≥ {r['target']}× |")


def redis_store(d: dict) -> None:
    print("| dim | MGET rows/s | MSET rows/s | pull rows/s | push* rows/s | pull ÷ MGET (target ≥ 0.6) | push* ÷ MSET (target ≥ 0.3) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for dim, r in sorted(d["dims"].items(), key=lambda kv: int(kv[0])):
        print(f"| {dim} | {r['mget']:,.0f} | {r['mset']:,.0f} | {r['pull']:,.0f} | {r['warm']:,.0f} | "
              f"{r['pull'] / r['mget']:.2f} | {r['warm'] / r['mset']:.2f} |")


def serve(d: dict) -> None:
    s, a = d["single"], d["param_age_s"]
    print("| single p50 | single p99 | first sends p50 / p99 | server CPU / request | batched records/s | parameter age p50 / p99 |")
    print("|---:|---:|---:|---:|---:|---:|")
    print(f"| {s['p50_ms']:.2f} ms | {s['p99_ms']:.2f} ms | {s['first_send']['p50_ms']:.2f} / "
          f"{s['first_send']['p99_ms']:.2f} ms | {s['server_cpu_ms_per_request']:.2f} ms | "
          f"{d['batched']['records_per_s']:,} | {a['p50']:.3f} / {a['p99']:.3f} s |")


def graph(d: dict) -> None:
    if "train_seeds_per_s" in d:
        t = d["train_seeds_per_s"]
        print(f"train: {t['streamtrain']:,.0f} against {t['pyg']:,.0f} seeds/s: "
              f"**{t['streamtrain'] / t['pyg']:.2f}×**; forward difference {d['forward_max_abs_difference']:.2e}")
    if "sampling_edges_per_s" in d:
        print(f"sampling: {d['sampling_edges_per_s']:,.0f} edges/s")
    if "synthetic" in d:
        print(f"synthetic: accuracy {d['synthetic']['graphsage']:.4f} against {d['synthetic']['oracle']:.4f}")
    for label, r in d.get("movielens", {}).items():
        print(f"movielens {label}: {r['logloss']:.4f} (AUC {r['auc']:.4f})")


def kafka(d: dict) -> None:
    k = d["lines_per_message"]
    for store, t in d["train"].items():
        med, runs = t["median"], t["runs"]
        print(f"| train `{d['model']}` from ({store} store) | examples/s, median of {len(runs['file'])} "
              f"interleaved runs | runs | ÷ file | target |")
        print("|---|---:|---|---:|---:|")
        rows = (("file", "file", None), ("Kafka, 1 line per message", "kafka_1", 0.75),
                (f"Kafka, {k} lines per message", f"kafka_{k}", 0.9))
        for label, key, target in rows:
            ratio = "" if key == "file" else f"**{med[key] / med['file']:.2f}×**"
            print(f"| {label} | {med[key]:,.0f} | {', '.join(f'{x:,.0f}' for x in runs[key])} | {ratio} | "
                  f"{'' if target is None else f'≥ {target}×'} |")


def quality(d: dict) -> None:
    sets = list(d["data"])
    names = [r["learner"] for r in d["data"][sets[0]]]
    kinds = {r["learner"]: r["kind"] for r in d["data"][sets[0]]}
    print("| learner | " + " | ".join(sets) + " |")
    print("|---|" + "---:|" * len(sets))
    for name in names:
        cells = [next(f"{r['logloss']:.5f}" for r in d["data"][s] if r["learner"] == name) for s in sets]
        print(f"| {'streamtrain ' if kinds[name] == 'streamtrain' else ''}{name} | " + " | ".join(cells) + " |")


def automl_peers(d: dict) -> None:
    sets = list(dict.fromkeys(r["data"] for r in d["rows"]))
    print("| learner | " + " | ".join(f"{s} logloss (AUC)" for s in sets) + " | examples/s |")
    print("|---|" + "---:|" * (len(sets) + 1))
    for name in dict.fromkeys(r["learner"] for r in d["rows"]):
        got = {r["data"]: r for r in d["rows"] if r["learner"] == name}
        cells = [f"{got[s]['logloss']:.5f} ({got[s]['auc']:.3f})" if s in got else "" for s in sets]
        rate = " / ".join(f"{got[s]['examples_per_s']:,.0f}" for s in sets if s in got)
        print(f"| {name} | " + " | ".join(cells) + f" | {rate} |")


def automl_cost(d: dict) -> None:
    c = d["cost"]
    print("| single lr.json examples/s | auto, live 4 LR-family, examples/s | ratio | target |")
    print("|---:|---:|---:|---:|")
    print(f"| {c['lr_examples_per_s']:,.0f} | {c['auto_lr4_examples_per_s']:,.0f} | **{c['ratio']:.2f}×** | ≥ 0.3× |")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "results")
    args = ap.parse_args(argv)
    for name, show in (("targets.json", targets), ("redis_store.json", redis_store), ("serve.json", serve),
                       ("graph.json", graph), ("quality.json", quality), ("kafka.json", kafka),
                       ("automl_peers.json", automl_peers), ("automl_cost.json", automl_cost)):
        path = args.results / name
        if not path.exists():
            print(f"skipped: no {path}", file=sys.stderr)
            continue
        d = json.loads(path.read_text())
        print(f"## {name}\n\n{provenance(d)}")
        show(d)
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
