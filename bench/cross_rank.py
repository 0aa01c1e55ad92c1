"""Which pairs of fields a cross neighbour should try first: a ranking from the residuals (issue 28).

    python bench/cross_rank.py [--examples 16384] [--shrink 20]

On ``clicks24`` (``bench/unseen_streams.py``: 24 categorical columns, 276 pairs, five planted)
``auto.json`` adds one random pair per cross proposal and tried 6-8 pairs in 100,000 examples,
none planted. This ranks every pair by how much of ``lr.json``'s progressive residual
``r = y - p`` its cells explain beyond either field alone, on the first ``--examples`` (a replay
buffer's worth): ``sum_cells S^2 / (n + shrink) - max over the two fields of the same``, ``S``
the residuals' sum and ``n`` the examples in a cell, and prints the planted pairs' ranks.
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import automl_search  # noqa: E402
import unseen_streams  # noqa: E402

PLANTED = [("hour", "app_category"), ("banner_pos", "site_category"), ("device_type", "C15"),
           ("site_id", "C17"), ("app_id", "device_conn_type")]


def explained(codes: np.ndarray, r: np.ndarray, shrink: float) -> float:
    _, inv, n = np.unique(codes, return_inverse=True, return_counts=True)
    s = np.bincount(inv, r)
    return float((s * s / (n + shrink)).sum())


def rank(columns: dict[str, np.ndarray], r: np.ndarray, shrink: float) -> list[tuple[float, str, str]]:
    """Every pair of ``columns`` (integer codes) with its score, best first."""
    single = {name: explained(c, r, shrink) for name, c in columns.items()}
    out = []
    for a, b in itertools.combinations(sorted(columns), 2):
        codes = columns[a].astype(np.int64) * (int(columns[b].max()) + 1) + columns[b]
        out.append((explained(codes, r, shrink) - max(single[a], single[b]), a, b))
    return sorted(out, reverse=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--examples", type=int, default=16384)
    ap.add_argument("--shrink", type=float, default=20.0)
    args = ap.parse_args(argv)
    out = automl_search.run("clicks24", "lr", [])
    n = args.examples
    r = (np.concatenate(out["y"]) - np.concatenate(out["p"]))[:n]
    with open(unseen_streams.csv_path("clicks24")) as f:
        header = f.readline().strip().split(",")[1:]
        rows = np.array([line.rstrip("\n").split(",")[1:] for _, line in zip(range(n), f)])
    columns = {h: np.unique(rows[:, i], return_inverse=True)[1] for i, h in enumerate(header)}
    ranked = rank(columns, r, args.shrink)
    planted = {frozenset(p) for p in PLANTED}
    for i, (score, a, b) in enumerate(ranked):
        if i < 10 or frozenset((a, b)) in planted:
            print(f"{i + 1:>4} {score:8.2f} {a} x {b}{'  (planted)' if frozenset((a, b)) in planted else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
