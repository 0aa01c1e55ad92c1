"""Which pushed batches are durable: the store's half of "offsets committed only after the update".

The job tells its store, after each batch's push (or a batch with nothing to push), the source
offsets that batch was read up to (``ParamStore.applied``), and commits what
``ParamStore.durable_offsets`` hands back. A store whose push reaches its server before it
returns (memory, the redis store writing through) makes them durable at once. A store that
writes back holds them until the flush that wrote the batch's rows:

* ``held``: batches trained since the last flush began (their rows only in the local copy);
* ``flying``: batches whose rows a background flush is writing (``flush_begin`` took them);
* ``durable``: batches whose rows are in the store, not handed to the job yet.

Batches move ``held`` → ``flying`` → ``durable`` in order, never back past a commit: a background
flush that fails puts its batches back in front of ``held`` (a later flush writes their rows).
"""
from __future__ import annotations


class Durable:
    """The offsets of pushed batches, in push order, by how far their rows are written."""

    def __init__(self):
        self.held: list[dict] = []
        self.flying: list[dict] = []
        self.durable: list[dict] = []
        self.newest: dict = {}      # per key, (epoch, newest offset) of a held batch made durable

    def __bool__(self) -> bool:
        """Batches pushed whose rows are not all written yet."""
        return bool(self.held or self.flying)

    def hold(self, offsets: dict, written: bool) -> None:
        (self.durable if written else self.held).append(offsets)

    def begun(self) -> None:
        """A background flush began: it writes every held batch's rows."""
        self.flying, self.held = self.flying + self.held, []

    def landed(self) -> None:
        """The background flush is done: its batches are durable."""
        self._written(self.flying)
        self.flying = []

    def failed(self) -> None:
        """The background flush failed: its batches wait for the next flush, first."""
        self.held[:0], self.flying = self.flying, []

    def flushed(self) -> None:
        """A flush wrote every row pushed so far (one in flight finished first)."""
        self._written(self.flying + self.held)
        self.flying, self.held = [], []

    def take(self) -> list[dict]:
        out, self.durable = self.durable, []
        return out

    def _written(self, batches: list[dict]) -> None:
        """Held batches made durable, in order, each key raised to the newest one before: a
        Kafka batch's other partitions carry their last *committed* position, older than the
        held batches trained before it, so a commit never goes back. (A batch written at once
        is committed as it is: a recreated topic's offsets may go down.) A batch whose offsets
        carry ``epochs`` (readers/kafka/offsets.py: bumped when a partition's log went back) is
        raised only within its epoch: a later epoch starts afresh, an earlier one is left as it is
        (the source ignores it)."""
        for offsets in batches:
            epochs = getattr(offsets, "epochs", None) or {}
            for key, off in offsets.items():
                epoch = epochs.get(key, 0)
                seen = self.newest.get(key)
                if seen is not None and seen[0] == epoch:
                    off = offsets[key] = max(off, seen[1])
                if seen is None or epoch >= seen[0]:
                    self.newest[key] = (epoch, off)
        self.durable += batches


def committed(into: dict, epochs: dict, offsets: dict) -> None:
    """``into`` (offsets committed so far; ``epochs`` theirs) updated with a durable batch's:
    a key of an older epoch than the one held is not kept (a batch cut before its partition's
    log went back: the source ignored it too)."""
    stamped = getattr(offsets, "epochs", None)
    if not stamped:
        into.update(offsets)
        return
    for key, off in offsets.items():
        epoch = stamped.get(key, 0)
        if epoch >= epochs.get(key, 0):
            into[key], epochs[key] = off, epoch
