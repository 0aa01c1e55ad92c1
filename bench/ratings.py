"""MovieLens 100K's ratings (1-5) in time order, one pass, side by side with Vowpal Wabbit's native
driver, whole process: as a regression (progressive RMSE) and as 5 classes (progressive
multi-class logloss and accuracy).

    STREAMTRAIN_DATA=../shared/data python bench/ratings.py [--repeat 3] [--json FILE]

The CSV is the one ``tests/conftest.py`` writes (``rating,user,item,age,gender,occupation``);
Vowpal Wabbit reads the same rows as its users write them, one namespace per column (``3 |u 196
|i 242 |a 40 |g M |o writer``), ``-b 24``, through ``Workspace(arg_list=["-d", FILE, ...])`` (the
``vw`` binary's driver) in a process of its own; its progressive predictions (``-p``) give the
figures. Learners:

* regression: ``linear`` (``examples/linear.json``), ``linear+crosses`` (the same terms with
  every pair of the five fields crossed: ``lr.json`` with ``layers.loss.type=mse`` and the
  ``"auto"`` label units, what ``linear.json`` was before 2026-12-06), ``auto`` (``examples/auto.json``
  with the same loss settings: the champion and challengers, ``automl.seed`` 0), ``vw`` (squared
  loss, its default) and ``vw-q`` (``-q ui``);
* classes (``label_map`` 1-5 to 0-4): ``multiclass`` (``examples/multiclass.json``: learnt example
  by example), ``multiclass-batch`` (the same terms learnt per batch, ``layers.loss.sequential=
  false``) and ``vw-oaa`` (``--oaa 5 --probabilities --loss_function logistic``: one against all,
  the probabilities normalised).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("STREAMTRAIN_DATA", ROOT.parent / "shared" / "data"))
WORK = Path(tempfile.gettempdir()) / "streamtrain-bench"
MSE_AUTO = ["layers.loss.type=mse", "layers.loss.label_offset=auto", "layers.loss.label_scale=auto"]
CLASSES = [f"reader.label_map={json.dumps({str(r): r - 1 for r in range(1, 6)})}"]
STREAMTRAIN = {"linear": ("linear", []), "linear+crosses": ("lr", MSE_AUTO), "auto": ("auto", MSE_AUTO),
               "multiclass": ("multiclass", CLASSES),
               "multiclass-batch": ("multiclass", CLASSES + ["layers.loss.sequential=false"])}
VW = {"vw": [], "vw-q": ["-q", "ui"], "vw-oaa": ["--oaa", "5", "--probabilities", "--loss_function", "logistic"]}
VW_CODE = ("import sys\nfrom vowpalwabbit import Workspace\n"
           "Workspace(arg_list=sys.argv[1:]).finish()\n")


def ratings() -> tuple[Path, Path, np.ndarray]:
    """(the CSV, the VW text file, the ratings), written once under the bench directory."""
    src = DATA / "movielens_100k"
    data = np.loadtxt(src / "u.data", dtype=np.int64)
    data = data[np.argsort(data[:, 3], kind="stable")]
    csv, vw = WORK / "movielens_ratings.csv", WORK / "movielens_ratings.vw"
    if not (csv.exists() and vw.exists()):
        WORK.mkdir(parents=True, exist_ok=True)
        users = {}
        for row in (src / "u.user").read_text(encoding="latin-1").splitlines():
            uid, age, gender, occupation, _ = row.split("|")
            users[int(uid)] = (f"{int(age) // 10 * 10}", gender, occupation)
        csv.write_text("rating,user,item,age,gender,occupation\n"
                       + "".join(f"{r},{u},{i},{','.join(users[u])}\n" for u, i, r, _ in data))
        vw.write_text("".join(f"{r} |u {u} |i {i} |a {users[u][0]} |g {users[u][1]} |o {users[u][2]}\n"
                              for u, i, r, _ in data))
    return csv, vw, data[:, 2].astype(np.float64)


def figures(p: np.ndarray, y: np.ndarray) -> dict:
    """RMSE and MAE of predicted ratings, or multi-class logloss and accuracy of ``[n, 5]``
    probabilities of the ratings 1-5."""
    if p.ndim == 1:
        return {"rmse": float(np.sqrt(np.mean((p - y) ** 2))), "mae": float(np.mean(np.abs(p - y)))}
    k = y.astype(np.int64) - 1
    return {"logloss": float(-np.mean(np.log(np.clip(p[np.arange(len(k)), k], 1e-15, 1)))),
            "accuracy": float(np.mean(p.argmax(axis=1) == k))}


def run_streamtrain(name: str, csv: Path) -> dict:
    model, sets = STREAMTRAIN[name]
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.json"
        args = [sys.executable, "-m", "streamtrain", "run", model, "--set", f"reader.path={csv}",
                "--set", "reader.label=rating", "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
                "--summary", str(summary), "--log-level", "ERROR"]
        for s in sets:
            args += ["--set", s]
        t = time.perf_counter()
        subprocess.run(args, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - t
        got = json.loads(summary.read_text())
    keys = ("logloss", "accuracy") if model == "multiclass" else ("rmse", "mae")
    return {"learner": name, **{k: got[k] for k in keys}, "seconds": seconds}


def run_vw(name: str, vw: Path, y: np.ndarray) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        preds = Path(tmp) / "preds.txt"
        args = ["-d", str(vw), "-b", "24", "-p", str(preds), "--quiet", *VW[name]]
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", VW_CODE, *args], check=True)
        seconds = time.perf_counter() - t
        lines = preds.read_text().splitlines()
    if name == "vw-oaa":          # "1:0.06 2:0.11 ..." per line
        p = np.array([[float(t.split(":")[1]) for t in line.split()] for line in lines])
    else:
        p = np.array([float(line.split()[0]) for line in lines])
    if len(p) != len(y):
        raise RuntimeError(f"{name} wrote {len(p)} predictions for {len(y)} examples")
    return {"learner": name, **figures(p, y), "seconds": seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", nargs="*", default=[*STREAMTRAIN, *VW], choices=[*STREAMTRAIN, *VW])
    ap.add_argument("--repeat", type=int, default=3, help="rounds (learners interleaved); seconds: the median")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    csv, vw, y = ratings()
    before = np.concatenate([[0.0], np.cumsum(y)[:-1] / np.arange(1, len(y))])
    prior = np.bincount(y.astype(np.int64), minlength=6)[1:] / len(y)
    rows = [{"learner": "running mean", **figures(before, y), "seconds": 0.0},
            {"learner": "class frequencies", "logloss": float(-(prior * np.log(prior)).sum()),
             "accuracy": float(prior.max()), "seconds": 0.0}]
    rounds = [[run_streamtrain(name, csv) if name in STREAMTRAIN else run_vw(name, vw, y) for name in args.learners]
              for _ in range(args.repeat)]
    for runs in zip(*rounds):           # each learner's rounds: one figure (deterministic), the median time
        rows.append(dict(runs[0], seconds=float(np.median([r["seconds"] for r in runs])),
                         rounds=[round(r["seconds"], 3) for r in runs]))
    print(f"MovieLens 100K ratings, {len(y):,} in time order, one pass, whole process (median of {args.repeat} rounds)")
    for r in rows:
        a, b = ("rmse", "mae") if "rmse" in r else ("logloss", "accuracy")
        print(f"  {r['learner']:<18} {a} {r[a]:.4f}  {b} {r[b]:.4f}  {r['seconds']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(["python", "bench/ratings.py", *(argv or sys.argv[1:])]),
                                               "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
