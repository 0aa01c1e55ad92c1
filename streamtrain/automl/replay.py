"""The replay buffer: the last batches of an AutoML trainer (``automl.replay`` examples).

A cold newborn (a term the champion lacks) learns them before it joins (``AutoTrainer``), so it
starts from what the champion learnt lately instead of nothing. The buffer is part of the
search's state: a checkpoint holds it (``arrays``, one ``.npz`` beside the parameters, written
in the same atomic directory, and ``describe``, its layout in ``meta.json``), so a newborn
after a restore learns the very examples it would have learnt without the restart. Bounded:
at most ``replay`` examples plus one batch. A checkpoint written before the buffer was saved
has no layout: the buffer then starts empty and refills with the next batches.
"""
from __future__ import annotations

import logging
from collections import deque

from streamtrain.batch import Batch, SparseField

log = logging.getLogger("streamtrain.automl")

VERSION = 1
ARRAYS = "automl_replay"       # the checkpoint's arrays file (``automl_replay.npz``)
KINDS = ("ids", "offsets", "values")


class Replay:
    def __init__(self, keep: int):
        self.keep = int(keep)
        self.batches: deque = deque()
        self.replayed = 0               # examples cold newborns learnt from the buffer

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)

    @property
    def examples(self) -> int:
        return sum(b.size for b in self.batches)

    def remember(self, batch) -> None:
        """Keep the batch's arrays (a reader makes new ones for every batch: no copy), without
        its source offsets and the candidates' prepared feeds; drop the oldest beyond ``keep``."""
        if self.keep <= 0:
            return
        self.batches.append(Batch(labels=batch.labels, sparse=batch.sparse, dense=batch.dense,
                                  dense_names=tuple(batch.dense_names)))
        total = self.examples
        while self.batches and total - self.batches[0].size >= self.keep:
            total -= self.batches.popleft().size

    # ---- checkpoints ---------------------------------------------------------------------------
    def describe(self) -> dict:
        """The buffer's layout (``meta.json``): each batch's rows, dense names and fields."""
        return {"version": VERSION, "replayed": self.replayed, "batches": [
            {"rows": b.size, "dense_names": list(b.dense_names), "dense": b.dense is not None,
             "fields": {f: s.values is not None for f, s in b.sparse.items()}} for b in self.batches]}

    def arrays(self) -> dict:
        """Every array of the buffer, keyed ``<batch>|labels``, ``<batch>|dense`` and
        ``<batch>|<ids, offsets or values>|<field>``."""
        out = {}
        for i, b in enumerate(self.batches):
            out[f"{i}|labels"] = b.labels
            if b.dense is not None:
                out[f"{i}|dense"] = b.dense
            for name, s in b.sparse.items():
                for kind in KINDS:
                    if getattr(s, kind) is not None:
                        out[f"{i}|{kind}|{name}"] = getattr(s, kind)
        return out

    def load(self, layout: dict | None, arrays: dict | None) -> None:
        """The buffer of a checkpoint (``describe`` and ``arrays``); empty when the checkpoint
        has none (written before it was saved) or another version of it."""
        self.batches.clear()
        if not layout or arrays is None:
            return
        self.replayed = int(layout.get("replayed", 0))
        if layout.get("version") != VERSION:
            log.warning("automl: the checkpoint's replay buffer is version %r (this one reads %d): "
                        "it starts empty", layout.get("version"), VERSION)
            return
        for i, b in enumerate(layout["batches"]):
            sparse = {f: SparseField(arrays[f"{i}|ids|{f}"], arrays[f"{i}|offsets|{f}"],
                                     arrays[f"{i}|values|{f}"] if has else None)
                      for f, has in b["fields"].items()}
            self.remember(Batch(labels=arrays[f"{i}|labels"], sparse=sparse,
                                dense=arrays[f"{i}|dense"] if b["dense"] else None,
                                dense_names=tuple(b["dense_names"])))
