"""AutoML on the stream against its peers, and what the search costs (issue 28).

    python bench/automl_peers.py --data criteo talkingdata movielens [--learners st-auto st-lr autovw river-sh river-bandit]
        [--max-examples N] [--json FILE]
    python bench/automl_peers.py --cost [--rows 300000] [--repeat 3] [--json FILE]

One pass, predict-then-learn, over each public stream (``bench/streams.py``; or one nobody tuned
on, ``bench/unseen_streams.py``); progressive
logloss and exact AUC computed here from every learner's progressive predictions (clipped to
[1e-7, 1 - 1e-7]), examples/s of each learner's own work:

* ``st-auto``: ``streamtrain run examples/auto.json`` (``Job(config).run()`` end to end from the
  raw file, as ``bench/compare.py`` times every streamtrain model); ``st-lr``: ``examples/lr.json``.
* ``autovw``: FLAML's ``AutoVW`` (ChaCha), ``max_live_model_num=4``, its automatic namespace
  interactions, VW ``--loss_function logistic --link logistic -b 24``, every categorical field in
  a namespace of its own (the numeric ones together), labels -1/+1, metric ``mae_clipped`` (with
  a logistic link it ranks configurations as the mean absolute error of the probability does).
  flaml 2.x asks for vowpalwabbit < 9 and hands VW 9 an empty ``interactions`` list, which VW 9
  refuses; ``_patch_pyvw`` drops the empty list (tested with flaml 2.7.0, vowpalwabbit 9.11.9).
* ``river-sh``: River's ``SuccessiveHalvingClassifier`` over 8 logistic regressions (SGD rates
  0.005-0.2, FTRL alphas 0.05-0.5), budget 16 × the stream; ``river-bandit``: River's
  ``BanditClassifier`` over the same 8 with a UCB policy on ROC AUC (it serves the arm of the
  largest reward, so a loss metric would serve the worst arm). Features as ``bench/compare.py``
  gives River (one-hot categorical ids, numeric values).

Peers are fed examples prepared before their clock starts (reading and parsing are not charged
to them); ``--max-examples`` caps the slow ones (AutoVW, River) on the longer streams.

``--cost``: examples/s of ``auto.json`` restricted to LR-family candidates of ``lr.json``'s size
(``automl.live`` 4; the space: rates and L2, no crosses, FM or deep term; ``grace`` beyond the
run, so that no decision ends a candidate and all four learn every batch) against the single ``lr.json`` on ``--rows`` cycled Criteo
rows, each a whole ``Job`` on the file, interleaved, median of ``--repeat``; target ≥ 0.3×.
"""
from __future__ import annotations

import argparse
import json
import statistics
import string
import sys
import time
from pathlib import Path

import numpy as np

from streamtrain.scores import auc, logloss

sys.path.insert(0, str(Path(__file__).resolve().parent))

import compare  # noqa: E402
import raw_inputs  # noqa: E402
import report  # noqa: E402
import streams  # noqa: E402
import unseen_streams  # noqa: E402

LEARNERS = ("st-auto", "st-lr", "autovw", "river-sh", "river-bandit")
VW_ARGS = {"loss_function": "logistic", "link": "logistic", "bit_precision": 24, "quiet": True}


# ---- inputs ----------------------------------------------------------------------------------
def vw_lines_by_field(rows) -> tuple[np.ndarray, list[str]]:
    """VW lines of the raw values (``raw_inputs.py``) with a namespace per categorical column
    (letters, in column order: AutoVW searches interactions between namespaces) and the numeric
    columns together in namespace ``Z``; labels -1/+1."""
    names = list(dict.fromkeys(k for cats in rows.cats for k, _ in cats))
    letters = dict(zip(names, (c for c in string.ascii_letters if c != "Z")))
    if len(letters) < len(names):
        raise SystemExit(f"{len(names)} categorical columns: more than VW namespaces here")
    lines = []
    for y, nums, cats in zip(rows.labels, rows.nums, rows.cats):
        by_ns: dict = {}
        for k, v in cats:
            by_ns.setdefault(letters[k], []).append(v.translate(raw_inputs._VW_SYNTAX))
        # every namespace on every line, an empty column as an empty namespace (AutoVW sizes its
        # interactions from the namespaces it has seen)
        parts = [("1" if y > 0.5 else "-1")] + [f"|{ns} " + " ".join(by_ns.get(ns, ())) for ns in letters.values()]
        if nums:
            parts.append("|Z " + " ".join(f"{k}:{v:g}" for k, v in nums))
        lines.append(" ".join(parts))
    return np.asarray(rows.labels, np.float64), lines


# ---- peers -----------------------------------------------------------------------------------
def _patch_pyvw() -> None:
    from vowpalwabbit import Workspace, pyvw

    def make(**kw):
        if not kw.get("interactions"):
            kw.pop("interactions", None)
        return Workspace(**kw)
    pyvw.vw = make


def run_autovw(lines: list[str], n: int) -> tuple[float, np.ndarray]:
    from flaml import AutoVW
    _patch_pyvw()
    model = AutoVW(max_live_model_num=4, search_space={"interactions": AutoVW.AUTOMATIC, **VW_ARGS},
                   metric="mae_clipped", random_seed=0)
    preds = np.empty(n)
    t0 = time.perf_counter()
    for i in range(n):
        preds[i] = model.predict(lines[i])
        model.learn(lines[i])
    return time.perf_counter() - t0, preds


def river_models():
    """River's logistic regressions over the raw values, each scaled and one-hot encoded as
    ``peers.river_model`` does (River's own preprocessing)."""
    import numbers
    from river import compose, linear_model, optim, preprocessing

    def encoded(model):
        return ((compose.SelectType(numbers.Number) | preprocessing.StandardScaler())
                + (compose.SelectType(str, list) | preprocessing.OneHotEncoder(drop_zeros=True))) | model
    return ([encoded(linear_model.LogisticRegression(optimizer=optim.SGD(lr))) for lr in (0.005, 0.02, 0.05, 0.2)]
            + [encoded(linear_model.LogisticRegression(optimizer=optim.FTRLProximal(alpha=a)))
               for a in (0.05, 0.1, 0.2, 0.5)])


def run_river_selection(name: str, dicts: list, labels: np.ndarray, n: int) -> tuple[float, np.ndarray]:
    from river import bandit, metrics, model_selection
    models = river_models()
    if name == "river-sh":
        model = model_selection.SuccessiveHalvingClassifier(models, metrics.LogLoss(), budget=16 * n)
    else:
        # its best_model is the arm of the largest reward: a loss (LogLoss) would pick the worst
        model = model_selection.BanditClassifier(models, metrics.ROCAUC(), bandit.UCB(delta=1.0, seed=0))
    ys = [bool(v > 0.5) for v in labels.tolist()]
    preds = np.empty(n)
    t0 = time.perf_counter()
    for i in range(n):
        preds[i] = model.predict_proba_one(dicts[i]).get(True, 0.0)
        model.learn_one(dicts[i], ys[i])
    return time.perf_counter() - t0, preds


# ---- quality ---------------------------------------------------------------------------------
def quality(data: str, learners, cap: int | None) -> list[dict]:
    s = unseen_streams.stream(data) if data in unseen_streams.NAMES else streams.stream(data)
    if any(not name.startswith("st-") for name in learners):   # the peers' inputs (not read for st-* alone)
        raw = raw_inputs.rows_of(s)             # the raw values, as each peer's users write them
        labels = np.asarray(raw.labels, np.float64)
    rows = []
    for name in learners:
        if name.startswith("st-"):
            res = compare.run_streamtrain(name[3:], s, None, [])
            y, p, n, seconds = res["y"], res["p"], res["examples"], res["seconds"]
        else:
            n = min(len(labels), cap or len(labels))
            if name == "autovw":
                y, lines = vw_lines_by_field(raw)
                seconds, p = run_autovw(lines, n)
            else:
                seconds, p = run_river_selection(name, raw_inputs.river_dicts(raw), labels, n)
            y = labels[:n]
        rows.append({"data": data, "learner": name, "examples": int(n), "seconds": round(seconds, 3),
                     "examples_per_s": round(n / seconds, 1), "logloss": round(logloss(y, p), 5),
                     "auc": round(auc(y, p), 4)})
        print(f"  [{data}] {name:12} {n:>7} ex {seconds:8.2f} s {n / seconds:>9.0f} ex/s "
              f"logloss {rows[-1]['logloss']:.5f}", file=sys.stderr, flush=True)
    return rows


# ---- cost ------------------------------------------------------------------------------------
LR_ONLY = ["automl.space=" + json.dumps([     # four candidates of lr.json's size: rates only
    {"name": "wide_l2", "paths": ["layers.wide.optimizer.l2"], "values": [0.0, 0.1, 1.0, 10.0], "start": 0.0},
    {"name": "wide_rate", "paths": ["layers.wide.optimizer.alpha"], "values": [0.1, 0.2, 0.35, 0.7, 1.4, 2.8],
     "start": 0.7},
    {"name": "rest_rate", "paths": ["layers.linear.optimizer.alpha", "layers.bias.optimizer.alpha"],
     "values": [0.2, 0.35, 0.7, 1.4, 2.8], "start": 0.7}])]


def cost(rows: int, repeat: int) -> dict:
    """Examples/s of live=4 LR-family candidates against the single lr.json, whole Jobs."""
    rates: dict = {"lr": [], "auto-lr4": []}
    live = []
    for r in range(repeat):
        for name in (("lr", "auto-lr4") if r % 2 == 0 else ("auto-lr4", "lr")):
            job = (streams.criteo_job("lr", rows) if name == "lr" else
                   streams.criteo_job("auto", rows, *LR_ONLY, "batch_size=8192", "automl.grace=1000000000"))
            counted = []
            if name != "lr":
                job.hooks.append(lambda job, batch, result, counted=counted: counted.append(len(job.trainer.candidates)))
            t0 = time.perf_counter()
            summary = job.run()
            rates[name].append(summary["examples"] / (time.perf_counter() - t0))
            if counted:
                live.append(round(float(np.mean(counted)), 2))
    lr, auto = statistics.median(rates["lr"]), statistics.median(rates["auto-lr4"])
    out = {"rows": rows, "repeat": repeat, "lr_examples_per_s": round(lr, 1),
           "auto_lr4_examples_per_s": round(auto, 1), "ratio": round(auto / lr, 3), "rates": rates,
           "mean_live": live}
    print(f"lr {lr:,.0f} ex/s; auto (live 4, LR family; mean live candidates per batch {live}) "
          f"{auto:,.0f} ex/s: {auto / lr:.2f}x (target >= 0.3x)")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", default=["criteo"], choices=("criteo", "talkingdata", "movielens", *unseen_streams.NAMES))
    ap.add_argument("--learners", nargs="*", default=list(LEARNERS), choices=LEARNERS)
    ap.add_argument("--max-examples", type=int, default=None, help="cap the peers' examples per stream")
    ap.add_argument("--cost", action="store_true", help="the cost figure instead of the quality table")
    ap.add_argument("--rows", type=int, default=300_000, help="--cost: cycled Criteo rows")
    ap.add_argument("--repeat", type=int, default=3, help="--cost: interleaved rounds (median)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args(argv)
    head = report.meta("bench/automl_peers.py", argv)
    head["versions"]["flaml"] = _flaml_version()
    print(f"# {head['command']}\n# {head['host']}; {head['versions']}")
    if args.cost:
        out = {**head, "cost": cost(args.rows, args.repeat)}
    else:
        rows = [r for data in args.data for r in quality(data, args.learners, args.max_examples)]
        print("\n| stream | learner | examples | examples/s | progressive logloss | AUC |\n|---|---|---:|---:|---:|---:|")
        for r in rows:
            print(f"| {r['data']} | {r['learner']} | {r['examples']:,} | {r['examples_per_s']:,.0f} | "
                  f"{r['logloss']:.5f} | {r['auc']:.4f} |")
        out = {**head, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


def _flaml_version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("flaml")
    except PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":
    sys.exit(main())
