"""Regression side by side: ``streamtrain run linear`` and Vowpal Wabbit's native driver on the
MovieLens 100K ratings (1-5) in time order, one pass, progressive RMSE, whole process.

    STREAMTRAIN_DATA=../shared/data python bench/regression.py [--json FILE]

The CSV is the one ``tests/test_regression.py`` writes (``rating,user,item,age,gender,
occupation``); Vowpal Wabbit reads the same rows as its users write them, one namespace per
column (``3 |u 196 |i 242 |a 40 |g M |o writer``), ``-b 24``, squared loss (its default), through
``Workspace(arg_list=["-d", FILE, ...])`` (the ``vw`` binary's driver) in a process of its own;
its progressive predictions (``-p``) give the RMSE. Learners:

* ``linear``: ``examples/linear.json`` as shipped;
* ``linear+crosses``: the same terms with every pair of the five fields crossed (``lr.json``
  with ``layers.loss.type=mse`` and the ``"auto"`` label units: what ``linear.json`` was before);
* ``vw``, ``vw-q``: Vowpal Wabbit plain, and with ``-q ui`` (user x item).
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
STREAMTRAIN = {"linear": ("linear", []), "linear+crosses": ("lr", MSE_AUTO)}
VW = {"vw": [], "vw-q": ["-q", "ui"]}
VW_CODE = ("import sys\nfrom vowpalwabbit import Workspace\n"
           "Workspace(arg_list=sys.argv[1:]).finish()\n")


def ratings() -> tuple[Path, Path, np.ndarray]:
    """(the CSV, the VW text file, the labels), written once under the bench directory."""
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
    return {"learner": name, "rmse": got["rmse"], "mae": got["mae"], "seconds": seconds}


def run_vw(name: str, vw: Path, y: np.ndarray) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        preds = Path(tmp) / "preds.txt"
        args = ["-d", str(vw), "-b", "24", "-p", str(preds), "--quiet", *VW[name]]
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", VW_CODE, *args], check=True)
        seconds = time.perf_counter() - t
        p = np.loadtxt(preds, usecols=0)
    if len(p) != len(y):
        raise RuntimeError(f"{name} wrote {len(p)} predictions for {len(y)} examples")
    return {"learner": name, "rmse": float(np.sqrt(np.mean((p - y) ** 2))), "mae": float(np.mean(np.abs(p - y))),
            "seconds": seconds}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--learners", nargs="*", default=[*STREAMTRAIN, *VW], choices=[*STREAMTRAIN, *VW])
    ap.add_argument("--repeat", type=int, default=3, help="rounds (learners interleaved); seconds: the median")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    csv, vw, y = ratings()
    before = np.concatenate([[0.0], np.cumsum(y)[:-1] / np.arange(1, len(y))])
    rows = [{"learner": "running mean", "rmse": float(np.sqrt(np.mean((y - before) ** 2))),
             "mae": float(np.mean(np.abs(y - before))), "seconds": 0.0}]
    rounds = [[run_streamtrain(name, csv) if name in STREAMTRAIN else run_vw(name, vw, y) for name in args.learners]
              for _ in range(args.repeat)]
    for runs in zip(*rounds):           # each learner's rounds: one figure (deterministic), the median time
        rows.append(dict(runs[0], seconds=float(np.median([r["seconds"] for r in runs])),
                         rounds=[round(r["seconds"], 3) for r in runs]))
    print(f"MovieLens 100K ratings, {len(y):,} in time order, one pass: progressive RMSE (MAE), whole process "
          f"(median of {args.repeat} rounds)")
    for r in rows:
        print(f"  {r['learner']:<16} {r['rmse']:.4f} ({r['mae']:.4f})  {r['seconds']:.2f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"command": " ".join(["python", "bench/regression.py", *(argv or sys.argv[1:])]),
                                               "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
