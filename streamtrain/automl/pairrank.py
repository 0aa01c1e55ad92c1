"""Which pair of fields a cross neighbour adds first, ranked from the champion's residuals (issue 28).

On a stream of more categorical fields than a cross dimension's layer crosses in full
(``max_fields``) the first champion crosses no pair, and of F fields' F (F - 1) / 2 pairs a
neighbour drawn at random rarely hits one that matters (24 fields: 276 pairs). ``PairRank``
adds, after every batch, the champion's progressive residual ``r = y - p`` of each example
into a hashed table of ``cells`` cells per pair of fields (the cell of the example's two values)
and per field (the cell of its value), with ``np.bincount``, over a tumbling window of
``window`` examples. At the window's end each pair is scored by how much of the residual its
cells explain beyond either field alone:

    score(a, b) = sum over cells of (S^2 - n v) / (n + shrink)  -  max(the same over a's cells, over b's)

(``S`` the residuals' sum and ``n`` the examples of a cell, ``v`` the window's mean squared
residual: ``n v`` is what S^2 is without any signal, so a pair of many thinly seen cells is not
credited with its own noise; the ``shrink`` prior damps thin cells): what a cross of a and b
could learn that the champion, which has a and b, has not. The pairs whose score is more than
``Z`` standard deviations of a no-signal score (``noise``), best first (at most ``TOP``), are
the search's ``ranked`` (``publish``: shared state, checkpointed), the order in which
``Space.propose`` adds pairs (``in_rank``), and a new ranking makes the next proposal the
crosses' turn. The tables start again for the next window (``promoted``: at a promotion, the
ranked pairs sharing a field with a newly crossed one wait for it, and the crosses' turn comes
again if any pair is left). They are local to a trainer
(its examples); a checkpoint holds their non-empty cells (``arrays``). A stream of at most
``max_fields`` fields has no ranking (``wide_cross``).
"""
from __future__ import annotations

import numpy as np

ARRAYS = "automl_pairrank"      # the checkpoint's arrays file
TOP = 64                        # pairs ranked at most (the search's state stays small)
Z = 3.0                         # a pair is ranked only if its score is Z standard deviations above no signal
BUDGET = 1 << 21                # cells of all tables at most (32 MB): fewer per pair on a very wide stream
_K1, _K2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9)


def first_ids(field, rows: int) -> np.ndarray:
    """Each row's first id of a CSR field (0 where the row has none)."""
    offsets, ids = field.offsets, field.ids
    have = offsets[1:] > offsets[:-1]
    if not len(ids):
        return np.zeros(rows, np.uint64)
    return np.where(have, ids[np.minimum(offsets[:-1], len(ids) - 1)], 0).astype(np.uint64)


def wide_cross(config: dict | None, dim, fields: list[str]) -> bool:
    """A cross dimension (``space.Dim``) whose layer names no ``pairs`` and crosses none of
    ``fields`` at the start (more of them than its ``max_fields``): its pairs follow a ranking."""
    layer = next((c for c in (config or {}).get("layers", []) if dim.cross and c.get("name") == dim.cross), None)
    return layer is not None and layer.get("pairs") is None and len(fields) > layer.get("max_fields", 8)


def in_rank(dim, value, options: list, ranked, rng: np.random.Generator) -> tuple[list, range]:
    """A cross dimension's ``options`` (the neighbours of ``value``) in proposal order: each pair
    of ``ranked`` added (best first), then the other options in a random order."""
    have = {tuple(p) for p in value}
    first = [] if len(have) >= dim.max_pairs else [
        [list(p) for p in sorted(have | {tuple(q)})] for q in ranked if tuple(q) not in have]
    rest = [v for v in options if v not in first]
    options = first + [rest[int(i)] for i in rng.permutation(len(rest))]
    return options, range(len(options))


def unsettled(ranked: list, space, before: dict, after: dict) -> list:
    """``ranked`` once a champion of the assignment ``before`` gives way to one of ``after``:
    without the pairs that share a field with one it newly crosses (a column implying a crossed
    one, as a site's domain its category, explains what the new cross explains now): they wait
    for the next window, on the new champion's residuals."""
    names = [d.name for d in space.dims if d.cross is not None]
    new = {f for n in names for p in after[n] if p not in before[n] for f in p}
    return [p for p in ranked if not new & set(p)]


def promoted(search, before: dict, after: dict) -> None:
    """A champion of ``after`` promoted over one of ``before``: the ranked pairs left
    (``unsettled``); when it crosses a new pair and a pair is left, the next proposal is the
    crosses' turn (the next ranked pair is tried on the new champion)."""
    left = unsettled(search.ranked, search.space, before, after)
    names = [d.name for d in search.space.dims if d.cross is not None]
    if left and any(p not in before[n] for n in names for p in after[n]):
        search.cross_due = True
    search.ranked = left


def cross_turn(space) -> int:
    """The turn (``Space.units``) of the first cross dimension."""
    return next(u for u, (d, _) in enumerate(space.units()) if space.dims[d].cross is not None)


def publish(search, ranked: list | None) -> None:
    """A new ranking (``PairRank.add``; None: none yet) is the search's (``Search.ranked``); when
    it ranks a pair, the next proposal is the crosses' turn (``Search.cross_due``)."""
    if ranked is not None:
        search.ranked, search.cross_due = ranked, bool(ranked)


class PairRank:
    def __init__(self, fields, cells: int = 4096, window: int = 16384, shrink: float = 20.0):
        if cells & (cells - 1):
            raise ValueError(f"cells must be a power of two, got {cells}")
        self.fields = sorted(fields)
        self.a, self.b = np.triu_indices(len(self.fields), 1)     # itertools.combinations' order
        self.rows = len(self.a) + len(self.fields)                # every pair's table, then every field's
        while cells > 64 and self.rows * cells > BUDGET:
            cells //= 2
        self.cells, self.window, self.shrink = int(cells), int(window), float(shrink)
        self.shift = np.uint64(64 - (self.cells.bit_length() - 1))
        self.base = (np.arange(self.rows, dtype=np.int64) * self.cells)[:, None]
        self.s = np.zeros(self.rows * self.cells)                 # residuals' sum per cell
        self.n = np.zeros(self.rows * self.cells, np.int64)       # examples per cell
        self.count = 0                                            # examples in the window so far
        self.q = 0.0                                              # their residuals' sum of squares

    def _cells(self, batch) -> np.ndarray:
        """The flat cell of every example in every table: [rows x B]."""
        ids = np.stack([first_ids(batch.sparse[f], batch.size) for f in self.fields])
        keys = np.concatenate([(ids[self.a] * _K1) ^ ids[self.b], ids])
        keys = (keys ^ (keys >> np.uint64(29))) * _K2
        return ((keys >> self.shift).astype(np.int64) + self.base).ravel()

    def add(self, batch, residual: np.ndarray) -> list[list[str]] | None:
        """Add one batch (its ids and the champion's residual per example); the ranked pairs
        when the window is complete (the tables then start again), else None."""
        if any(f not in batch.sparse for f in self.fields):
            return None
        r = np.asarray(residual, np.float64).reshape(-1)
        cells = self._cells(batch)
        size = self.rows * self.cells
        self.s += np.bincount(cells, np.tile(r, self.rows), minlength=size)
        self.n += np.bincount(cells, minlength=size)
        self.count += batch.size
        self.q += float(r @ r)
        if self.count < self.window:
            return None
        ranked = self.ranked()
        self.load(None, None)
        return ranked

    def scores(self) -> np.ndarray:
        """Every pair's score (``combinations(fields, 2)``'s order) on the window so far."""
        v = self.q / max(self.count, 1)         # a cell's S^2 is n v in expectation with no signal
        explained = ((self.s * self.s - self.n * v) / (self.n + self.shrink)).reshape(self.rows, self.cells).sum(axis=1)
        pairs, single = explained[:len(self.a)], explained[len(self.a):]
        return pairs - np.maximum(single[self.a], single[self.b])

    def noise(self) -> np.ndarray:
        """Each pair's score's standard deviation without any signal: a cell's (S^2 - n v) / (n +
        shrink) then has variance 2 v^2 (n / (n + shrink))^2 (S normal, of variance n v)."""
        v = self.q / max(self.count, 1)
        w = (self.n / (self.n + self.shrink)) ** 2
        return v * np.sqrt(2.0 * w.reshape(self.rows, self.cells)[:len(self.a)].sum(axis=1))

    def ranked(self) -> list[list[str]]:
        """The pairs whose score is more than ``Z`` standard deviations of no signal (``noise``),
        best first (ties: in ``combinations``' order), at most ``TOP``."""
        score = self.scores()
        order = np.argsort(-score, kind="stable")[:TOP]
        keep = score > Z * self.noise()
        return [[self.fields[self.a[i]], self.fields[self.b[i]]] for i in order if keep[i]]

    # ---- checkpoints -------------------------------------------------------------------------
    def describe(self) -> dict:
        return {"fields": self.fields, "cells": self.cells, "window": self.window, "count": self.count, "q": self.q}

    def arrays(self) -> dict:
        """The tables' non-empty cells."""
        at = np.flatnonzero(self.n)
        return {"at": at, "s": self.s[at], "n": self.n[at]}

    def load(self, layout: dict | None, arrays: dict | None) -> None:
        """The tables of a checkpoint; empty (a new window) when it has none or of another shape."""
        self.s[:] = 0.0
        self.n[:] = 0
        self.count, self.q = 0, 0.0
        if not layout or arrays is None or layout != {**self.describe(), "count": layout.get("count"), "q": layout.get("q")}:
            return
        at = arrays["at"]
        self.s[at], self.n[at] = arrays["s"], arrays["n"]
        self.count, self.q = int(layout["count"]), float(layout["q"])
