"""The mini-batch every reader produces and every layer reads (Angel's PlaceHolder)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:                    # annotations only: the batch stays a leaf module
    from .graphstore.blocks import Subgraph


@dataclass
class SparseField:
    """One categorical field of a batch in CSR form.

    Row ``b`` holds ``ids[offsets[b]:offsets[b+1]]`` (empty when the value is missing,
    several for a multi-valued field), with optional per-id ``values`` (default 1).
    Ids are 64-bit hashes of (field, value), unique across fields.
    """

    ids: np.ndarray                    # uint64 [nnz]
    offsets: np.ndarray                # int64 [B+1], offsets[0] == 0
    values: np.ndarray | None = None   # float32 [nnz] or None

    @property
    def rows(self) -> int:
        return len(self.offsets) - 1

    def take(self, rows: np.ndarray) -> "SparseField":
        """The sub-field of the given rows (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        starts, ends = self.offsets[rows], self.offsets[rows + 1]
        lengths = ends - starts
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        # positions of every kept id, without a Python loop over rows
        pos = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        values = None if self.values is None else self.values[pos]
        return SparseField(self.ids[pos], offsets, values)


def once_per_batch(batch, key, pinned: tuple, make, fallback: dict | None = None):
    """``make()``, made once per batch for every graph that asks with the same ``key`` and the
    very same ``pinned`` arrays, in the batch's shared memo (``Prepared.shared``; without one, in
    ``fallback``, or made each time). The arrays are kept with the result, so while the batch
    lives no other array has their ids: the memo's key holds those ids, and a hit is checked
    against the arrays themselves."""
    memo = getattr(getattr(batch, "prepared", None), "shared", None)
    if memo is None:
        memo = fallback
    if memo is None:
        return make()
    full = (key, *map(id, pinned))
    got = memo.get(full)
    if got is None or any(a is not b for a, b in zip(got[0], pinned)):
        got = memo[full] = (pinned, make())
    return got[1]


@dataclass(frozen=True)
class Feed:
    """``Graph.prepare``'s work for one batch and one model graph: each table's unique ids, each
    layer's positions among them, and batch-only work kept in the step's memo (grids)."""

    table_ids: dict
    table_pos: dict
    memo: dict


@dataclass
class Prepared:
    """What the parse thread worked out for a batch ahead of its step (``Graph.prepare``), by the
    model graph it was worked out for: a graph takes only its own (an AutoML job has several
    candidates' graphs on one batch); a graph without one feeds the batch in its step."""

    feeds: dict = field(default_factory=dict)          # Graph -> Feed
    # work that depends on the batch alone, whichever graph asks (the fields' layout, a table's
    # unique ids): the candidates of an AutoML job over the same fields take the same arrays,
    # so the memory store looks their ids up once (``MemoryStore._share_ids``)
    shared: dict = field(default_factory=dict)

    def of(self, graph) -> Feed | None:
        return self.feeds.get(graph)

    def add(self, graph, feed: Feed) -> None:
        self.feeds[graph] = feed

    def clear(self) -> None:
        self.feeds.clear()
        self.shared.clear()


@dataclass
class Batch:
    """A mini-batch: labels, sparse fields (CSR), dense features, where it came from."""

    labels: np.ndarray                                 # float32 [B]
    sparse: dict[str, SparseField] = field(default_factory=dict)
    dense: np.ndarray | None = None                    # float32 [B, D]
    dense_names: tuple[str, ...] = ()
    offsets: dict = field(default_factory=dict)        # source position to commit after the update
    timestamps: np.ndarray | None = None               # float64 [B] event time, seconds
    subgraph: Subgraph | None = None                   # sampled blocks (graphstore/blocks.py)
    prepared: Prepared = field(default_factory=Prepared, repr=False, compare=False)   # done ahead, by graph

    def __post_init__(self):
        if self.dense is None:
            self.dense = np.zeros((len(self.labels), 0), dtype=np.float32)

    @property
    def size(self) -> int:
        return len(self.labels)

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, rows) -> "Batch":
        """The rows given, as a new batch (offsets are not carried over)."""
        rows = np.asarray(rows, dtype=np.int64)
        return Batch(
            labels=self.labels[rows],
            sparse={k: f.take(rows) for k, f in self.sparse.items()},
            dense=self.dense[rows],
            dense_names=self.dense_names,
            timestamps=None if self.timestamps is None else self.timestamps[rows],
        )
