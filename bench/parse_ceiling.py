"""The most any hand-over of parsed batches could win: the job's loop without a parse thread.

    python bench/parse_ceiling.py [--models deepfm fm] [--rows 300000] [--rounds 4]

Each round runs, per model, three fresh processes, interleaved: the job as ``streamtrain run``
builds it (``streams.criteo_job``: file reader, its parse thread preparing each batch ahead);
the same job fed the same batches parsed and prepared *before* its loop (kept in memory: no
parse work and no second thread while it trains); and that again beside a process that parses
the file meanwhile, at most half of its time (each batch, then as long a sleep): a parse
process's load on the cores, without its hand-over. Printed per run: the loop's wall time
from the second batch to the end, and the training thread's own CPU seconds
(``time.thread_time``). The wall gap is what the parse thread costs the trainer (the GIL, and
on a busy host the CPU); a parse process could at best win it back, minus its hand-over
(``bench/parse_handover.py``).
"""
from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import streams  # noqa: E402

WAYS = ("parse-thread", "preloaded", "preloaded+process")
HOG = """import sys, time
from streamtrain.readers import Malformed, open_reader
while True:
    src = open_reader({{'type': 'file', 'path': {path!r}, 'format': 'criteo'}}, {batch}, Malformed())
    t = time.perf_counter()
    for b in src.batches():
        time.sleep(time.perf_counter() - t)
        t = time.perf_counter()
    src.close()
"""


def _preloaded(job):
    """The job's source replaced by its batches parsed now; each prepared once the graph exists."""
    from streamtrain.readers.source import Source
    src = job.source
    batches = list(src.batches())
    src.close()

    def gen():
        yield batches[0]                         # the graph is built from it
        for b in batches[1:]:
            job.trainer.prepare(b)
        gc.freeze()
        yield from batches[1:]
    job.source = Source(gen, src.malformed, "preloaded")


def one_run(model: str, way: str, rows: int) -> str:
    from streamtrain import startup
    startup.apply()
    sys.setswitchinterval(0.001)                 # as ``streamtrain run`` sets it
    job = streams.criteo_job(model, rows)
    marks = {}

    def hook(j, batch, result):
        if j.trainer.batches == 2 and not marks:
            marks.update(t=time.perf_counter(), c=time.thread_time())
    job.hooks.append(hook)
    hog = None
    if way.startswith("preloaded"):
        if way.endswith("process"):
            code = HOG.format(path=str(streams.criteo_tsv(rows)), batch=job.config["batch_size"])
            hog = subprocess.Popen([sys.executable, "-c", code])
        _preloaded(job)
    gc.freeze()
    try:
        summary = job.run()
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    wall, cpu = time.perf_counter() - marks["t"], time.thread_time() - marks["c"]
    return f"{wall:.2f} {cpu:.2f} {summary['logloss']:.6f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["deepfm", "fm"])
    ap.add_argument("--rows", type=int, default=300000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "WAY"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(one_run(*args.one, args.rows))
        return
    streams.criteo_tsv(args.rows)
    print(f"# python bench/parse_ceiling.py --models {' '.join(args.models)} --rows {args.rows} "
          f"--rounds {args.rounds}")
    print("| round | model | way | load | loop wall s | training thread CPU s | logloss |")
    print("|---:|---|---|---:|---:|---:|---:|")
    for r in range(args.rounds):
        for model in args.models:
            for way in WAYS:
                load = os.getloadavg()[0]
                out = subprocess.run([sys.executable, __file__, "--rows", str(args.rows), "--one", model, way],
                                     capture_output=True, text=True, check=True)
                wall, cpu, loss = out.stdout.split()[-3:]
                print(f"| {r + 1} | {model} | {way} | {load:.1f} | {wall} | {cpu} | {loss} |", flush=True)


if __name__ == "__main__":
    main()
