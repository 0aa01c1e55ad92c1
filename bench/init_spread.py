"""How far a model's progressive logloss moves with its initial values alone: the spread a
one-pass figure carries before any change of the code is judged by it.

    python bench/init_spread.py --data movielens --models dcn pnn [--salts 8]

Every parameter's initial value is a pure function of its name (``streamtrain.params``); here
the name is salted (``name + str(salt)``, salt 0 = the name itself, i.e. the figure of
``compare.py``) for the run's duration, nothing else changes: same stream, same example file,
same order. Prints each run's logloss to 7 digits and, per model, mean, standard deviation and
range over the salts. The model files and streams are those of the checkout whose
``streamtrain`` is imported (run it with another checkout's interpreter to measure that one).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
from pathlib import Path

import numpy as np

import streamtrain
from streamtrain import params

CHECKOUT = Path(streamtrain.__file__).resolve().parents[1]      # the checkout measured
EXAMPLES = CHECKOUT / "examples"
sys.path.insert(0, str(CHECKOUT / "bench"))                      # its streams, as its compare.py reads them

import streams  # noqa: E402


def logloss(y, p) -> float:
    """``streamtrain.scores.logloss``'s definition (clip to [1e-7, 1-1e-7]), written out here so
    that a checkout older than that module is scored by the same code."""
    p = np.clip(np.asarray(p, np.float64), 1e-7, 1 - 1e-7)
    y = np.asarray(y, np.float64)
    return float(-(y * np.log(p) + (1 - y) * np.log1p(-p)).mean())


@contextlib.contextmanager
def salted(salt: int):
    """Initial values drawn as if every parameter's name ended in ``salt`` (0: unchanged)."""
    plain = params.hash_str
    if salt:
        params.hash_str = lambda name: plain(f"{name}{salt}")
    try:
        yield
    finally:
        params.hash_str = plain


def progressive_logloss(model: str, s: streams.Stream) -> float:
    from streamtrain import config as C
    from streamtrain.job import Job
    over = s.sets() + ["metrics.enabled=false", "log.every_seconds=1000000"]
    cfg = C.validate(C.load(EXAMPLES / f"{model}.json", over))
    preds, labels = [], []

    def keep(job, batch, result):
        preds.append(np.array(result.predictions, np.float64).reshape(-1))
        labels.append(batch.labels)

    job = Job(cfg)
    job.hooks.append(keep)
    with contextlib.redirect_stderr(io.StringIO()):      # drift alarms
        job.run()
    return logloss(np.concatenate(labels), np.concatenate(preds))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", nargs="+", default=["movielens"], choices=["criteo", "talkingdata", "movielens"])
    ap.add_argument("--models", nargs="+", default=["dcn", "pnn"])
    ap.add_argument("--salts", type=int, default=8, help="salts 0..N-1 (0: the unsalted figure)")
    args = ap.parse_args(argv)
    print(f"# {CHECKOUT}")
    for data in args.data:
        s = streams.stream(data)
        for model in args.models:
            got = []
            for salt in range(args.salts):
                with salted(salt):
                    got.append(progressive_logloss(model, s))
                print(f"{data} {model} salt {salt}: {got[-1]:.7f}", flush=True)
            sd = statistics.stdev(got) if len(got) > 1 else 0.0
            print(f"{data} {model}: mean {statistics.mean(got):.7f} sd {sd:.7f} "
                  f"range {min(got):.7f}-{max(got):.7f} over {len(got)} salts", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
