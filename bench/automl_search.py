"""One AutoML run and what its search did: events, the served slot, logloss by tenths (issue 28).

    python bench/automl_search.py movielens [--model auto] [--set automl.seed=1 ...] [--quiet]
    python bench/automl_search.py synfm      # a synthetic stream with a planted FM (held out)
    python bench/automl_search.py synlr --seeds 0-9 --best 0.50621   # mean, seeds at or below
    python bench/automl_search.py clicks24 --examples   # every example model, and the best

``Job(config).run()`` of ``examples/<model>.json`` on a public stream (``bench/streams.py``) or
on a synthetic one that no example was tuned on: ``synfm`` (a planted FM) and ``synlr`` (a
planted LR), 10 categorical fields of 300 values, 2 numeric, 100,000 examples; or on a CSV
nobody tuned on, read as a user would (``bench/unseen_streams.py``: ``clicks24``, ``mlp8``,
``numcross``, ``drift``, ``rare``). Prints every
birth, retirement and promotion with the example it happened at, each change of the served
slot, and one JSON line: the progressive logloss and that of each tenth of the stream. A run's
figure depends on ``automl.seed`` alone (runs are deterministic).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import streams  # noqa: E402
import unseen_streams  # noqa: E402

from streamtrain import config as C  # noqa: E402
from streamtrain.job import Job  # noqa: E402
from streamtrain.scores import logloss  # noqa: E402

SYNTHETIC = ["reader.type=synthetic", "reader.fields=10", "reader.cardinality=300", "reader.dense=2",
             "reader.weight_scale=0.6", "reader.examples=100000"]
STREAMS = {"synfm": SYNTHETIC + ["reader.model=fm", "reader.fm_dim=4", "reader.seed=11"],
           "synlr": SYNTHETIC + ["reader.model=lr", "reader.seed=12"]}
# MovieLens' ratings 1-5 as a regression (``bench/ratings.py``'s CSV): squared error in the units
# of the first batch (as ``linear.json``); the figure is the progressive RMSE
def ratings_sets() -> list[str]:
    import ratings
    csv = ratings.ratings()[0]
    return ["reader.type=file", f"reader.path={csv}", "reader.format=csv", "reader.label=rating"] + ratings.MSE_AUTO


def run(data: str, model: str, sets: list[str]) -> dict:
    over = STREAMS[data] if data in STREAMS else ratings_sets() if data == "ratings" else (
        unseen_streams.sets(data) if data in unseen_streams.NAMES else streams.stream(data).sets())
    cfg = C.validate(C.load(ROOT / "examples" / f"{model}.json",
                            over + ["metrics.enabled=false", "log.every_seconds=1000000"] + sets))
    out = {"p": [], "y": [], "served": [], "events": []}

    def keep(job, batch, result):
        out["p"].append(np.array(result.predictions, np.float64).reshape(-1))
        out["y"].append(batch.labels)
        search = getattr(job.trainer, "search", None)
        if search is not None:
            if not out["served"]:       # the first candidates, born before the first batch
                out["events"] += [(0, {"event": "born", "slot": i, "epoch": slot["epoch"], "assign": slot["assign"]})
                                  for i, slot in search.live_slots().items()
                                  if not any(e["slot"] == i for e in job.trainer.events)]
            out["served"].append((job.trainer.examples, search.served, search.champion))
            out["events"] += [(job.trainer.examples, e) for e in job.trainer.events]
    t0 = time.perf_counter()
    job = Job(cfg)
    job.hooks.append(keep)
    job.run()
    out["seconds"] = time.perf_counter() - t0
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data", choices=("criteo", "talkingdata", "movielens", "ratings", *STREAMS, *unseen_streams.NAMES))
    ap.add_argument("--model", default="auto", help="an example's name (default: auto)")
    ap.add_argument("--set", nargs="*", default=[], help="--set style overrides")
    ap.add_argument("--quiet", action="store_true", help="the JSON line only")
    ap.add_argument("--seeds", help="automl.seed values, e.g. 0-9: one JSON line each, then their mean")
    ap.add_argument("--best", type=float, help="with --seeds: count the seeds at or below this logloss")
    ap.add_argument("--examples", action="store_true",
                    help="run every fixed example model (streams.EXAMPLE_MODELS) once, then the best one's figure")
    args = ap.parse_args(argv)
    if args.examples:
        return examples(args)
    if args.seeds:
        return seeds(args)
    report(args, run(args.data, args.model, args.set))
    return 0


def seeds(args) -> int:
    """One quiet run per ``automl.seed`` of ``--seeds`` (``a-b`` or ``a,b,c``), then one JSON
    line: the per-seed figures, their mean and how many are at or below ``--best``."""
    lo, _, hi = args.seeds.partition("-")
    values = list(range(int(lo), int(hi) + 1)) if hi else [int(v) for v in args.seeds.split(",")]
    figures = []
    for n in values:
        sets = args.set + [f"automl.seed={n}"]
        one = argparse.Namespace(**{**vars(args), "quiet": True, "set": sets})
        figures.append(report(one, run(args.data, args.model, sets))["logloss"])
    summary = {"data": args.data, "model": args.model, "set": args.set, "seeds": values, "logloss": figures,
               "mean": round(float(np.mean(figures)), 5)}
    if args.best is not None:
        summary |= {"best": args.best, "at_or_below": sum(f <= args.best for f in figures)}
    print(json.dumps(summary))
    return 0


def examples(args) -> int:
    """One quiet run of each fixed example model, then one JSON line: every figure and the best
    (the ``--best`` that ``--seeds`` compares ``auto.json`` with)."""
    figures = {}
    for model in streams.EXAMPLE_MODELS:
        one = argparse.Namespace(**{**vars(args), "quiet": True, "model": model})
        figures[model] = report(one, run(args.data, model, args.set))["logloss"]
    best = min(figures, key=figures.get)
    print(json.dumps({"data": args.data, "set": args.set, "examples": figures, "best": best,
                      "best_logloss": figures[best]}))
    return 0


def report(args, out: dict) -> dict:
    """Print a run's events (unless ``--quiet``) and its JSON line; return the line's dict."""
    if not args.quiet:
        for at, e in out["events"]:
            extra = {k: e[k] for k in ("reason", "mean_difference", "from") if k in e}
            assign = {k: (len(v) if k == "crosses" else v) for k, v in e["assign"].items()}
            print(f"{at:>7} {e['event']:9} slot {e['slot']} epoch {e['epoch']} {extra} {assign}")
        last = None
        for at, served, champion in out["served"]:
            if (served, champion) != last:
                print(f"  from example {at}: served slot {served}, champion {champion}")
                last = (served, champion)
    y, p = np.concatenate(out["y"]), np.concatenate(out["p"])
    n = len(y)
    score = rmse if args.data == "ratings" else logloss     # (one key for both: "logloss")
    tenths = [round(score(y[i * n // 10:(i + 1) * n // 10], p[i * n // 10:(i + 1) * n // 10]), 5) for i in range(10)]
    line = {"data": args.data, "model": args.model, "set": args.set, "logloss": round(score(y, p), 5),
            "examples": n, "seconds": round(out["seconds"], 1), "tenths": tenths}
    print(json.dumps(line), flush=True)
    return line


def rmse(y, p) -> float:
    return float(np.sqrt(np.mean((np.asarray(p, np.float64) - y) ** 2)))


if __name__ == "__main__":
    sys.exit(main())
