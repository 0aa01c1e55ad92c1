"""streamtrain beside River and Vowpal Wabbit: speed and progressive quality, in one run.

    python bench/compare.py --data criteo [talkingdata movielens] \\
        [--models lr fm deepfm wide_deep dcn pnn nfm] [--peers river-sgd river-ftrl river-fm vw vw-q] \\
        [--examples N] [--repeat R] [--segments K]
    python bench/compare.py --targets [--rows 1000000] [--repeat 3] [--learners vw st-lr ...]

``--targets`` is the speed run of issue 11: every learner a whole process as its users run it
(VW's native driver on a file, ``streamtrain run``, PyTorch), see ``bench/targets.py``. The
run without it is the quality comparison below, where the peers are fed from Python.

Protocol (every learner): one pass, predict-then-learn (progressive validation): each example
(River, VW) or mini-batch (streamtrain) is predicted before it is learnt; logloss (predictions
clipped to [1e-7, 1-1e-7]) and exact AUC are computed here, by the same code, from every
learner's progressive predictions. ``--examples N`` cycles the stream up to N examples (a
throughput run); without it each learner sees the stream once. ``--repeat R`` runs the whole
line-up R times, interleaved, and reports the median examples/s (quality figures are
deterministic and come from the first round).

What is timed:
* streamtrain: end to end from the raw file: ``Job(config).run()`` with the example file's
  defaults, file reader (gunzip, byte-level parsing, hashing), memory store, progressive metrics.
* peers: only their own per-example work on examples prepared before the clock starts, from
  the file's raw values in each peer's own format (River dicts, VW text lines:
  ``bench/raw_inputs.py``); see ``bench/peers.py``. Reading and parsing the file is *not* charged to the peers. VW here
  is fed one line per Python call (``vw``/``vw-q``): that measures the Python loop around VW,
  not VW as its users run it (``--targets`` does that).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from streamtrain.scores import auc, logloss

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peers as peermod  # noqa: E402
import raw_inputs  # noqa: E402
import report  # noqa: E402
import streams  # noqa: E402
import targets  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


# ---- streamtrain -----------------------------------------------------------------------------
def run_streamtrain(model: str, s: streams.Stream, n: int | None, sets: list[str]) -> dict:
    from streamtrain import config as C
    from streamtrain.job import Job
    over = s.sets() + ["metrics.enabled=false", "log.every_seconds=1000000"]
    if n:
        over += ["reader.loop=true", f"reader.limit={n}"]
    cfg = C.validate(C.load(ROOT / "examples" / f"{model}.json", over + list(sets)))
    preds, labels = [], []

    def keep(job, batch, result):
        preds.append(np.array(result.predictions, np.float64).reshape(-1))
        labels.append(batch.labels)

    t0 = time.perf_counter()
    job = Job(cfg)
    job.hooks.append(keep)
    summary = job.run()
    seconds = time.perf_counter() - t0
    y, p = np.concatenate(labels), np.concatenate(preds)
    return {"learner": model, "examples": summary["examples"], "seconds": seconds,
            "y": y, "p": p, "batch_size": cfg["batch_size"]}


# ---- one data set ----------------------------------------------------------------------------
def prepare(s: streams.Stream, wanted_peers) -> dict:
    """Each peer's input from the file's raw values, as its users write it (``bench/raw_inputs.py``)."""
    rows = raw_inputs.rows_of(s)
    out = {"labels": np.asarray(rows.labels), "n": len(rows.labels)}
    if any(p in peermod.RIVER for p in wanted_peers):
        out["dicts"] = raw_inputs.river_dicts(rows)
    if any(p in peermod.VW for p in wanted_peers):
        out["lines"] = raw_inputs.vw_lines(rows)
    return out


def bench(data: str, args) -> list[dict]:
    s = streams.stream(data)
    prepared = prepare(s, args.peers)
    rounds: dict[str, list] = {}
    first: dict[str, dict] = {}
    for r in range(args.repeat):
        line_up = [("st", m) for m in args.models] + [("peer", p) for p in args.peers]
        if r % 2:                                  # alternate the order between rounds
            line_up.reverse()
        for kind, name in line_up:
            n = args.examples or prepared["n"]
            if kind == "st":
                res = run_streamtrain(name, s, args.examples, args.set)
            else:
                if name == "river-fm" and args.examples:
                    n = min(n, args.river_fm_examples)
                seconds, p = peermod.run_peer(name, prepared, n, args.vw_mode)
                y = np.resize(prepared["labels"], n)
                res = {"learner": name, "examples": n, "seconds": seconds, "y": y, "p": p}
            res["rate"] = res["examples"] / res["seconds"]
            rounds.setdefault(name, []).append(res["rate"])
            if name not in first:
                res["logloss"], res["auc"] = logloss(res["y"], res["p"]), auc(res["y"], res["p"])
                if args.json:
                    res["curve"] = report.curve(res["y"], res["p"])
                if args.segments:
                    cuts = np.linspace(0, len(res["y"]), args.segments + 1).astype(int)
                    res["segments"] = [logloss(res["y"][a:b], res["p"][a:b]) for a, b in zip(cuts, cuts[1:])]
                del res["y"], res["p"]
                first[name] = res
            print(f"  [{data} round {r + 1}] {name:10} {res['examples']:>8} ex {res['seconds']:7.2f} s "
                  f"{res['rate']:>9.0f} ex/s", file=sys.stderr, flush=True)
    rows = []
    for name in [*args.models, *args.peers]:
        row = dict(first[name])
        row["rate"] = statistics.median(rounds[name])
        row["rates"] = rounds[name]
        row["kind"] = "streamtrain" if name in args.models else "peer"
        rows.append(row)
    return rows


def print_tables(data: str, rows: list[dict], args) -> None:
    st = [r for r in rows if r["kind"] == "streamtrain"]
    pr = [r for r in rows if r["kind"] == "peer"]
    n = args.examples
    print(f"\n### {data}: {'one pass' if not n else f'{n} examples (stream cycled)'}, "
          f"median of {args.repeat} round(s)\n")
    print("| learner | batch | examples | examples/s | progressive logloss | AUC |")
    print("|---|---:|---:|---:|---:|---:|")
    best_st = min(st, key=lambda r: r["logloss"]) if st else None
    best_pr = min(pr, key=lambda r: r["logloss"]) if pr else None
    for r in rows:
        mark = " **best**" if r is best_st or r is best_pr else ""
        label = f"streamtrain {r['learner']}" if r["kind"] == "streamtrain" else r["learner"]
        print(f"| {label}{mark} | {r.get('batch_size', 1)} | {r['examples']} | {r['rate']:.0f} | "
              f"{r['logloss']:.5f} | {r['auc']:.4f} |")
    if any(r["learner"] in peermod.VW for r in pr):
        print("\nvw, vw-q: fed one text line per Python call (`Workspace.learn(line)`): the Python loop "
              "around VW, not VW's native driver on a file (that is `--targets`).")
    if args.segments:
        print(f"\nprogressive logloss over {args.segments} consecutive segments of the stream ({data}):\n")
        print("| learner | " + " | ".join(f"part {i + 1}" for i in range(args.segments)) + " |")
        print("|---|" + "---:|" * args.segments)
        for r in rows:
            label = f"streamtrain {r['learner']}" if r["kind"] == "streamtrain" else r["learner"]
            print(f"| {label} | " + " | ".join(f"{v:.5f}" for v in r["segments"]) + " |")
    if st and pr:
        print(f"\nstreamtrain examples/s ÷ peer examples/s ({data}):\n")
        print("| streamtrain model | " + " | ".join(f"÷ {p['learner']}" for p in pr) + " |")
        print("|---|" + "---:|" * len(pr))
        for r in st:
            print(f"| {r['learner']} | " + " | ".join(f"{r['rate'] / p['rate']:.2f}×" for p in pr) + " |")
        if n:               # a cycled stream is a speed run: its "progressive" figures are not the target
            return
        verdict = "beats" if best_st["logloss"] < best_pr["logloss"] else "does NOT beat"
        auc_ok = "no worse" if best_st["auc"] >= best_pr["auc"] else "WORSE"
        margin = (best_pr["logloss"] - best_st["logloss"]) / best_pr["logloss"]
        print(f"\nquality: best streamtrain ({best_st['learner']}, {best_st['logloss']:.5f} / AUC "
              f"{best_st['auc']:.4f}) {verdict} the best peer ({best_pr['learner']}, "
              f"{best_pr['logloss']:.5f} / AUC {best_pr['auc']:.4f}) on logloss ({margin:+.1%}); AUC {auc_ok}.")


def machine() -> str:
    import numpy
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{platform.system()} {platform.machine()}, {cpu}, {os.cpu_count()} cores; "
            f"python {platform.python_version()}, numpy {numpy.__version__}, {peermod.versions()}; "
            f"BLAS 1 thread")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", nargs="+", default=["criteo"], choices=("criteo", "talkingdata", "movielens"))
    ap.add_argument("--models", nargs="*", default=list(streams.EXAMPLE_MODELS))
    ap.add_argument("--peers", nargs="*", default=list(peermod.PEERS), choices=peermod.PEERS)
    ap.add_argument("--examples", type=int, default=None, help="cycle the stream up to N examples")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--river-fm-examples", type=int, default=5000,
                    help="with --examples: river-fm's rate is measured on this many (it runs ~200 ex/s)")
    ap.add_argument("--vw-mode", choices=("lines", "objects"), default="lines",
                    help="how the Python loop feeds VW one example at a time (not VW's native driver)")
    ap.add_argument("--segments", type=int, default=0, metavar="K",
                    help="also print each learner's progressive logloss over K consecutive parts of the stream")
    ap.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                    help="extra config override for every streamtrain model (experiments only)")
    ap.add_argument("--json", metavar="FILE", help="also write every figure (and each learner's "
                    "progressive-logloss curve) to FILE, for bench/plots.py")
    ap.add_argument("--targets", action="store_true", help="issue 11's speed targets (bench/targets.py)")
    ap.add_argument("--rows", type=int, default=1_000_000, help="with --targets: Criteo rows")
    ap.add_argument("--learners", nargs="*", default=list(targets.LEARNERS), choices=targets.LEARNERS,
                    help="with --targets: the line-up")
    ap.add_argument("--threads", type=int, default=targets.STREAMTRAIN_THREADS,
                    help="with --targets: torch.set_num_threads (default: the threads streamtrain "
                    "runs, training and parsing)")
    args = ap.parse_args(argv)
    from streamtrain import limit_blas_threads
    limit_blas_threads()
    print(f"# {' '.join(['python bench/compare.py', *(argv if argv is not None else sys.argv[1:])])}")
    print(f"# {machine()}; load average {os.getloadavg()[0]:.1f} at start")
    if args.targets:
        got = targets.run_targets(args.rows, args.repeat, args.learners, args.threads)
        targets.print_targets(args.rows, args.repeat, got, args.threads)
        if args.json:
            report.write(args.json, {**report.meta("bench/compare.py", argv), "kind": "targets",
                                     "rows": args.rows, "repeat": args.repeat, "learners": got,
                                     "ratios": targets.ratios(got)})
        return 0
    out = {}
    for data in args.data:
        rows = bench(data, args)
        print_tables(data, rows, args)
        out[data] = rows
    if args.json:
        report.write(args.json, {**report.meta("bench/compare.py", argv), "kind": "quality",
                                 "examples": args.examples, "repeat": args.repeat, "data": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
