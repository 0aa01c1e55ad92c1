"""Which pairs of fields a cross neighbour tries first: the ranking of ``pairrank.py`` offline (issue 28).

    python bench/cross_rank.py [--data clicks24] [--model lr] [--examples 16384] [--windows 3]

Runs ``examples/<model>.json`` on a stream (``clicks24`` by default: 24 categorical columns,
276 pairs, five planted) and feeds its progressive residual ``r = y - p`` and each batch's ids
to ``streamtrain.automl.pairrank.PairRank``, as ``auto.json``'s trainer does with its champion's,
over ``--windows`` windows of ``--examples``. For each window it prints the top pairs with
their score, its ``z`` (the score over its standard deviation without any signal: a pair is
ranked above ``pairrank.Z``) and the planted pairs' ranks, and the ranking's cost per batch.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import automl_search  # noqa: E402

from streamtrain import config as C  # noqa: E402
from streamtrain.automl.pairrank import Z, PairRank  # noqa: E402
from streamtrain.job import Job  # noqa: E402

PLANTED = {frozenset(p) for p in [("hour", "app_category"), ("banner_pos", "site_category"), ("device_type", "C15"),
                                  ("site_id", "C17"), ("app_id", "device_conn_type")]}


def report(rank: PairRank, seen: int) -> None:
    score = rank.scores()
    z = score / rank.noise()
    order = np.argsort(-score, kind="stable")
    names = [f"{rank.fields[rank.a[i]]} x {rank.fields[rank.b[i]]}" for i in order]
    planted = [k + 1 for k, i in enumerate(order) if frozenset((rank.fields[rank.a[i]], rank.fields[rank.b[i]])) in PLANTED]
    print(f"examples {seen}: {int((z > Z).sum())} pairs above z {Z}; planted ranks {planted}")
    for k, i in enumerate(order[:8]):
        print(f"  {k + 1:>3} {score[i]:8.2f} z {z[i]:6.1f} {names[k]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="clicks24")
    ap.add_argument("--model", default="lr")
    ap.add_argument("--examples", type=int, default=16384)
    ap.add_argument("--windows", type=int, default=3)
    args = ap.parse_args(argv)
    over = automl_search.STREAMS.get(args.data) or automl_search.unseen_streams.sets(args.data)
    cfg = C.validate(C.load(automl_search.ROOT / "examples" / f"{args.model}.json",
                            over + ["metrics.enabled=false", "log.every_seconds=1000000"]))
    state = {"rank": None, "cpu": 0.0, "batches": 0, "seen": 0}

    def hook(job, batch, result):
        if state["rank"] is None:
            state["rank"] = PairRank(list(batch.sparse), window=10**12)
        rank = state["rank"]
        t = time.process_time()
        rank.add(batch, batch.labels - np.asarray(result.predictions, np.float64).reshape(-1))
        state["cpu"] += time.process_time() - t
        state["batches"] += 1
        state["seen"] += batch.size
        if rank.count >= args.examples:
            report(rank, state["seen"])
            rank.load(None, None)
    job = Job(cfg, max_examples=args.examples * args.windows)
    job.hooks.append(hook)
    job.run()
    rank = state["rank"]
    print(f"{1000 * state['cpu'] / state['batches']:.1f} CPU-ms per batch of {cfg['batch_size']}, "
          f"{len(rank.a)} pairs, tables {(rank.s.nbytes + rank.n.nbytes) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
