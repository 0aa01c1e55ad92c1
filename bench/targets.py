"""Issue 11's speed targets, side by side in one run: every learner a whole process, as its users run it.

    python bench/compare.py --targets [--rows 1000000] [--repeat 3] [--learners ...]

Data: ``--rows`` Criteo rows cycled from ``criteo_kaggle_head7625.tsv.gz``, written once as an
uncompressed TSV (and, for Vowpal Wabbit, the same rows' raw values in VW's text format,
``|n I1:v ... |c C1=value ...``: ``bench/raw_inputs.py``) under ``$TMPDIR/streamtrain-bench``.

Each learner is one fresh process per round (rounds interleaved, order reversed every other
round; the median of ``--repeat`` is reported):

* ``vw``: ``vowpalwabbit.Workspace(arg_list=["-d", FILE, "-b", "24", "--loss_function",
  "logistic", "--quiet"]).finish()``: VW's own C++ reader and learner (the wheel ships no ``vw``
  binary; this is the same driver). *whole* = the process; *steady* = Workspace construction
  to finish, timed inside the process (import of the Python package excluded).
* ``st-MODEL`` / ``st-MODEL-redis``: ``streamtrain run examples/MODEL.json`` on the TSV (file
  reader, format criteo), as shipped: metrics on (``/metrics`` served on any free port, its
  gauges refreshed), checkpoints off, memory store or the redis store with its embedded
  redis-server. *whole* = the process; *steady* = the job's own
  ``steady_examples_per_s`` (examples after the first batch ÷ time after it).
* ``torch-deepfm`` / ``torch-dcn``: ``bench/torch_peers.py``, batch as streamtrain's,
  ``torch.set_num_threads(STREAMTRAIN_THREADS)``: the threads streamtrain keeps busy (training,
  and parsing a batch ahead). *whole* = the process; *steady* = its training loop only.
"""
from __future__ import annotations

import compileall
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import streams

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
VW_ARGS = ["-b", "24", "--loss_function", "logistic", "--quiet"]
STREAMTRAIN_THREADS = 2        # the training thread and the parse thread
LEARNERS = ("vw", "st-lr", "st-fm", "st-deepfm", "st-dcn", "st-lr-redis", "st-deepfm-redis",
            "torch-deepfm", "torch-dcn")
VW_CODE = ("import sys, time\nfrom vowpalwabbit import Workspace\nt = time.perf_counter()\n"
           "Workspace(arg_list=sys.argv[1:]).finish()\nprint(time.perf_counter() - t)\n")


def _run(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (rc {out.returncode}):\n{out.stderr[-2000:]}")
    return wall, out.stdout


def run_vw(rows: int) -> dict:
    wall, out = _run([sys.executable, "-c", VW_CODE, "-d", str(streams.criteo_vw(rows)), *VW_ARGS])
    return {"examples": rows, "whole_s": wall, "steady_rate": rows / float(out.strip().splitlines()[-1])}


def batch_size(model: str) -> int:
    return json.loads((ROOT / "examples" / f"{model}.json").read_text())["batch_size"]


def run_streamtrain(model: str, rows: int, redis: bool = False) -> dict:
    fd, summary = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    sets = [f"reader.path={streams.criteo_tsv(rows)}", "reader.type=file", "reader.format=criteo",
            "metrics.port=0", "checkpoint.dir=null", "log.every_seconds=1000000"]
    if redis:
        sets.append("store.backend=redis")
    cmd = [sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / f"{model}.json"),
           "--summary", summary, "--log-level", "WARNING"]
    for s in sets:
        cmd += ["--set", s]
    try:
        wall, _ = _run(cmd)
        got = json.loads(Path(summary).read_text())
    finally:
        os.unlink(summary)
    if got["examples"] != rows:
        raise RuntimeError(f"streamtrain {model} trained {got['examples']} of {rows} rows")
    return {"examples": rows, "whole_s": wall, "steady_rate": got["steady_examples_per_s"],
            "logloss": got["logloss"]}


def run_torch(model: str, rows: int, threads: int) -> dict:
    wall, out = _run([sys.executable, str(BENCH / "torch_peers.py"), "--model", model,
                      "--data", str(streams.criteo_tsv(rows)), "--batch-size", str(batch_size(model)),
                      "--threads", str(threads)])
    got = json.loads(out.strip().splitlines()[-1])
    return {"examples": got["examples"], "whole_s": wall, "steady_rate": got["examples"] / got["train_s"],
            "logloss": got["logloss"]}


def run_one(name: str, rows: int, threads: int) -> dict:
    if name == "vw":
        return run_vw(rows)
    if name.startswith("torch-"):
        return run_torch(name[len("torch-"):], rows, threads)
    model = name[len("st-"):]
    redis = model.endswith("-redis")
    return run_streamtrain(model.removesuffix("-redis"), rows, redis)


# the targets: (numerator, denominator, target ratio of examples/s)
TARGETS = [("st-lr", "vw", 2.0), ("st-fm", "vw", 1.0), ("st-deepfm", "vw", 0.5),
           ("st-deepfm", "torch-deepfm", 1.5), ("st-dcn", "torch-dcn", None),
           ("st-lr-redis", "st-lr", 0.5), ("st-deepfm-redis", "st-deepfm", 0.5)]


def byte_compile() -> None:
    """As ``pip install`` of a wheel does: with PYTHONDONTWRITEBYTECODE=1 (set in some sandboxes and
    CI images) an editable install compiles every module from source at each start."""
    for package in ("streamtrain", "ops", "readers"):
        compileall.compile_dir(ROOT / package, quiet=1)


def run_targets(rows: int, repeat: int, learners: list[str], threads: int) -> dict:
    byte_compile()
    streams.criteo_tsv(rows)
    if "vw" in learners:
        streams.criteo_vw(rows)
    results: dict[str, list[dict]] = {name: [] for name in learners}
    for r in range(repeat):
        order = learners if r % 2 == 0 else list(reversed(learners))
        for name in order:
            res = run_one(name, rows, threads)
            results[name].append(res)
            print(f"  [round {r + 1}] {name:16} whole {res['whole_s']:7.2f} s "
                  f"{res['examples'] / res['whole_s']:>9.0f} ex/s; steady {res['steady_rate']:>9.0f} ex/s",
                  file=sys.stderr, flush=True)
    return {name: {"whole_rate": statistics.median(r["examples"] / r["whole_s"] for r in runs),
                   "whole_s": statistics.median(r["whole_s"] for r in runs),
                   "best_rate": max(r["examples"] / r["whole_s"] for r in runs),
                   "rounds_s": [round(r["whole_s"], 2) for r in runs],
                   "steady_rate": statistics.median(r["steady_rate"] for r in runs),
                   "logloss": runs[0].get("logloss"), "batch": _batch(name)}
            for name, runs in results.items()}


def _batch(name: str) -> int:
    if name == "vw":
        return 1
    return batch_size(name.split("-")[1])


def ratios(got: dict) -> list[dict]:
    """Each target ratio of examples/s the run can tell (whole process and steady state)."""
    return [{"learner": a, "against": b, "target": target,
             "whole": got[a]["whole_rate"] / got[b]["whole_rate"],
             "whole_vs_fastest": got[a]["whole_rate"] / got[b]["best_rate"],
             "steady": got[a]["steady_rate"] / got[b]["steady_rate"]}
            for a, b, target in TARGETS if a in got and b in got]


def print_targets(rows: int, repeat: int, got: dict, threads: int) -> None:
    print(f"\n### {rows} Criteo rows (cycled, uncompressed), whole process per learner, "
          f"median of {repeat}; torch threads {threads}\n")
    print("| learner | batch | whole process s | rounds s | examples/s whole | examples/s steady | logloss (cycled) |")
    print("|---|---:|---:|---|---:|---:|---:|")
    for name, g in got.items():
        ll = f"{g['logloss']:.5f}" if g.get("logloss") is not None else "-"
        rounds = ", ".join(f"{t:.2f}" for t in g.get("rounds_s", []))
        print(f"| {name} | {g['batch']} | {g['whole_s']:.2f} | {rounds} | {g['whole_rate']:.0f} | "
              f"{g['steady_rate']:.0f} | {ll} |")
    # a peer's whole-process time can swing between rounds (VW's 256 MB table of -b 24 on a
    # shared host: 2.0-3.7 s on a quiet one); met is judged against its fastest round
    print("\n| ratio of examples/s | whole process | ÷ its fastest round | steady state | target | met |")
    print("|---|---:|---:|---:|---:|---|")
    for r in ratios(got):
        target = r["target"]
        met = "-" if target is None else ("yes" if r["whole_vs_fastest"] >= target else "**no**")
        print(f"| {r['learner']} ÷ {r['against']} | {r['whole']:.2f}× | {r['whole_vs_fastest']:.2f}× | "
              f"{r['steady']:.2f}× | {'-' if target is None else f'≥ {target}×'} | {met} |")
