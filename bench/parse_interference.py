"""What a parse thread costs the training thread, against a parse process.

    python bench/parse_interference.py [--model deepfm] [--rows 300000] [--batches 600] [--rounds 3]

The model's trainer steps through batches parsed (and prepared) beforehand, three ways per
round: alone; with a thread in the same process parsing and preparing the Criteo TSV as fast
as it can (what the file reader's parse thread does, unthrottled); with a *process* doing the
same parse on the other core. Printed: microseconds per step (wall), each way, per round. The
gap between the thread and the process is the GIL's: the step gives it up at every compiled or
large numpy call, and the thread's Python (batching, ``prepare``) holds it meanwhile.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import streams  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
HOG = """import sys, time
from streamtrain.readers import Malformed, open_reader
end = time.time() + {seconds}
while time.time() < end:
    src = open_reader({{'type': 'file', 'path': {path!r}, 'format': 'criteo'}}, {batch}, Malformed())
    for b in src.batches():
        if time.time() > end:
            break
    src.close()
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="deepfm")
    ap.add_argument("--rows", type=int, default=300000)
    ap.add_argument("--batches", type=int, default=600, help="steps timed per way and round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from streamtrain import limit_blas_threads
    from streamtrain.readers import Malformed, open_reader
    limit_blas_threads()
    sys.setswitchinterval(0.001)                 # as ``streamtrain run`` sets it
    trainer, batches = streams.built_trainer(args.model, args.rows)
    batches = batches[:args.batches]
    size = json.loads((ROOT / "examples" / f"{args.model}.json").read_text())["batch_size"]
    path = str(streams.criteo_tsv(args.rows))

    def timed() -> float:
        todo = list(batches)
        for b in todo:
            b.prepared.clear()
            trainer.prepare(b)
        t = time.perf_counter()
        for b in todo:
            trainer.step(b)
        return (time.perf_counter() - t) / len(todo) * 1e6

    def parse_thread(stop: threading.Event) -> None:
        while not stop.is_set():
            src = open_reader({"type": "file", "path": path, "format": "criteo"}, size, Malformed())
            for b in src.batches():
                trainer.prepare(b)
                if stop.is_set():
                    break
            src.close()

    print(f"# python bench/parse_interference.py --model {args.model} --rows {args.rows} "
          f"--batches {args.batches} --rounds {args.rounds}")
    print("| round | alone µs/step | with a parse thread | with a parse process |")
    print("|---:|---:|---:|---:|")
    timed()                                      # warm: numba's cache, the tables' rows
    for r in range(args.rounds):
        alone = timed()
        stop = threading.Event()
        th = threading.Thread(target=parse_thread, args=(stop,), daemon=True)
        th.start()
        time.sleep(0.3)
        with_thread = timed()
        stop.set()
        th.join()
        hog = subprocess.Popen([sys.executable, "-c", HOG.format(seconds=600, path=path, batch=size)], cwd=ROOT)
        time.sleep(1.0)                          # its imports done, parsing
        with_process = timed()
        hog.kill()
        hog.wait()
        print(f"| {r + 1} | {alone:.0f} | {with_thread:.0f} | {with_process:.0f} |", flush=True)


if __name__ == "__main__":
    main()
