"""``PartitionOffsets``: per partition, what this trainer owns, applied, owes and committed.

A partition's offset ``n`` is committed only after every message below ``n`` was applied to
the store (or was a bad line, counted and dead-lettered). ``applied(offsets)`` (the job's
commit, after the update) makes offsets *due*; the reader sends them (the dead-letter
producer flushed first, then one synchronous ``consumer.commit``) once ``COMMIT_EVERY``
batches are due, and always before the next ``poll`` (``commits.py``) — and before ``seek``,
``close`` and ``committed_offsets()``. So at most ``COMMIT_EVERY`` trained batches are
ever uncommitted (what a crash makes the next owner train again). An offset for a partition
this trainer no longer owns is skipped (counted); a failed commit is remembered and retried
once at close (every later commit also carries every owned partition's applied position).
A batch the trainer held when its partition was revoked is applied after the revocation: its
offsets are skipped then, and made due again if the next assignment gives the partition straight
back (kafka-python keeps its position past those rows: else a quiet partition would stay
uncommitted below them), never after a loss (the group moved on: another owner may have
committed since).

A partition's log can go back under a reader (a topic deleted and recreated, a log truncated:
``took`` says 'reset', or 'start' below where the reader was when the partition was revoked: a
restarted broker makes the group rejoin) or be sought elsewhere. Each partition has an *epoch*,
bumped then; a batch's offsets are cut with the epoch of each partition they name (``cut``), and
``applied`` ignores (counts in ``stale``) an offset from an earlier epoch: a batch cut from the
old log and applied after the reset would otherwise push the commit past records of the new log
that were never trained (so would a write-back store raising a batch's offsets to the newest it
made durable: store/durable.py keeps to an epoch too). What was due, failed or committed for
the old log is forgotten at the reset (an orphaned batch made due on assignment, then the log
found lower, would still be sent), and a position found past the log end (``logend.py``) starts
the new epoch before anything of the new log is read (``went_back``: a new log that is empty or
shorter). Offsets without a stamp (a plain dict) are taken as current.

Pure bookkeeping: no consumer, no broker, no lock (the reader's consumer thread is the only
one that calls it). Keys are ``(topic, partition)`` (a kafka ``TopicPartition`` is equal to
its tuple).

>>> o = PartitionOffsets()
>>> o.assign([("t", 0)])
{}
>>> o.took(("t", 0), 5)
'start'
>>> o.applied({("t", 0): 9, ("t", 1): 3}), o.skipped
(False, 1)
>>> o.applied({("t", 0): 12}), o.take_due()
(True, {('t', 0): 12})
"""
from __future__ import annotations

COMMIT_EVERY = 2           # batches due before a commit is sent
# A commit waits at most this long: a request lost with its connection (a broker restarted
# mid-request) would otherwise hold the consumer thread until the client's request timeout
# (minutes); a commit that times out is a failed commit (logged, counted, sent again later)
COMMIT_TIMEOUT_MS = 10_000


def _key(k) -> tuple:
    return (str(k[0]), int(k[1]))


class BatchOffsets(dict):
    """A batch's offsets, {key: next offset}, and ``epochs``, {key: epoch} when it was cut."""

    __slots__ = ("epochs",)

    def __init__(self, offsets=(), epochs=None):
        super().__init__(offsets)
        self.epochs = {} if epochs is None else epochs


class PartitionOffsets:
    """The offsets of the partitions a reader owns; see the module's docstring."""

    def __init__(self, commit_every: int = COMMIT_EVERY):
        self.commit_every = commit_every
        self.owned: set = set()         # (topic, partition)
        self.position: dict = {}        # owned -> applied up to (start position, then each
                                        # ``applied`` call's offsets, sent or still due)
        self.due: dict = {}             # applied, not sent
        self.due_batches = 0
        self.committed: dict = {}       # sent and confirmed
        self.unconfirmed: dict = {}     # sent and failed (retried once at close)
        self.rewind: dict = {}          # first abandoned offset: read again when assigned back
        self.seek_later: dict = {}      # sought while not owned: applied on assignment
        self.skipped = 0                # offsets not committed: partition no longer owned
        self.revoked: set = set()       # revoked (not lost) since the last assignment
        self.orphaned: dict = {}        # of those, applied after the revocation (a batch the
                                        # trainer held): due again if assigned straight back
        self.epochs: dict = {}          # bumped when the log goes back (reset) or is sought
        self.stale = 0                  # offsets not applied: cut before their partition's reset
        self.left: dict = {}            # revoked -> its applied position then

    # ---- ownership ---------------------------------------------------------------------------
    def assign(self, keys) -> dict:
        """Partitions now owned: {key: offset to seek to} for those that must be read again
        from elsewhere than the consumer's position (a seek asked before, or abandoned
        messages: kafka-python keeps the position of a partition that stays with it)."""
        seek = {}
        for k in map(_key, keys):
            self.owned.add(k)
            if k in self.orphaned:          # kafka-python keeps its position past those rows
                self.due[k] = max(self.orphaned[k], self.due.get(k, 0))
                # and the applied position with it: a batch cut before the revocation and
                # applied after this carries an older offset of k, which must not lower it
                self.position[k] = max(self.position.get(k, 0), self.due[k])
                self.left.pop(k, None)
            target = self.seek_later.pop(k, None)
            if target is None:
                target = self.rewind.get(k)
            if target is not None:
                seek[k] = target
        self.rewind.clear()
        self.revoked.clear()
        self.orphaned.clear()
        return seek

    def revoke(self, keys, lost: bool = False) -> None:
        """``lost``: the group moved on without this consumer (another may have committed since)."""
        for k in map(_key, keys):
            self.owned.discard(k)
            if lost:
                self.revoked.discard(k)
                self.orphaned.pop(k, None)
            else:
                self.revoked.add(k)
            self.unconfirmed.pop(k, None)
            if k in self.position:          # a log found lower when assigned back went back
                self.left[k] = self.position.pop(k)

    def abandoned(self, first: dict) -> None:
        """Queued messages were dropped: {key: first dropped offset}, read again from there."""
        for k, off in first.items():
            self.rewind[k] = min(self.rewind.get(k, off), off)

    # ---- reading -----------------------------------------------------------------------------
    def took(self, key, offset: int) -> str | None:
        """A message at ``offset`` was fetched: 'start' (the partition's first since it was
        assigned), 'reset' (below the applied position: the log went backwards under us —
        topic recreated or truncated — and is followed, or the next commit would re-commit
        the stale, higher offset and skip new records), else None."""
        key = _key(key)
        if key not in self.position:
            self.position[key] = offset
            if offset < self.left.pop(key, offset):     # the log went back while not owned
                self._went_back(key)
            return "start"
        if offset < self.position[key]:
            self.position[key] = offset
            self._went_back(key)
            return "reset"
        return None

    def went_back(self, key) -> None:
        """The reader found ``key``'s position past its log end (``logend.py``) before it read
        anything of the new log: a new epoch at once (batches of the old log the trainer holds
        are stale from now; the new log's first message is then a 'reset' too)."""
        self._went_back(_key(key))

    def _went_back(self, key) -> None:
        """``key``'s log went back: a new epoch, and what was applied but not sent (due, an
        orphaned batch made due again on assignment), failed or committed for it belongs to
        the old log: never sent (nor sought back to, ``seek``) now."""
        self.epochs[key] = self.epochs.get(key, 0) + 1
        for d in (self.due, self.unconfirmed, self.orphaned, self.committed):
            d.pop(key, None)

    def epoch(self, key) -> int:
        return self.epochs.get(_key(key), 0)

    def cut(self, ends) -> BatchOffsets:
        """A batch's offsets from ``ends``, (key, epoch, next offset) of each piece it holds:
        per partition the largest of its current epoch (a piece fetched from the log before a
        reset names no offset), every owned partition it lacks at its applied position
        (``with_owned``), each stamped with the partition's epoch now."""
        offsets: dict = {}
        for key, epoch, nxt in ends:
            key = _key(key)
            if epoch == self.epochs.get(key, 0):
                offsets[key] = max(offsets.get(key, 0), nxt)
        self.with_owned(offsets)
        return BatchOffsets(offsets, {k: self.epochs.get(k, 0) for k in offsets})

    def with_owned(self, offsets: dict) -> dict:
        """``offsets`` plus each owned partition it lacks at its applied position, so the
        offsets a checkpoint records (the job's union of batch offsets) cover every partition."""
        for k in self.owned:
            if k not in offsets and k in self.position:
                offsets[k] = self.position[k]
        return offsets

    # ---- applying and committing ---------------------------------------------------------------
    def applied(self, offsets: dict) -> bool:
        """Everything below ``offsets`` was applied: due for commit (never backwards; offsets of
        partitions not owned are skipped, those of an earlier epoch ignored: the module's
        docstring). True when a commit should be sent now."""
        keyed = {_key(k): int(o) for k, o in offsets.items()}
        stamped = getattr(offsets, "epochs", None)
        if stamped:
            current = {k: o for k, o in keyed.items()
                       if stamped.get(k, self.epochs.get(k, 0)) == self.epochs.get(k, 0)}
            self.stale += len(keyed) - len(current)
            keyed = current
        owned = {k: o for k, o in keyed.items() if k in self.owned}
        self.skipped += len(keyed) - len(owned)
        for k, o in keyed.items():
            if k in self.revoked:
                self.orphaned[k] = max(o, self.orphaned.get(k, o))
        for k, o in owned.items():
            self.position[k] = self.due[k] = max(o, self.position.get(k, o))
        if owned:
            self.due_batches += 1
        return self.due_batches >= self.commit_every

    def take_due(self) -> dict:
        """The due offsets of partitions still owned (cleared: the caller sends them)."""
        due, self.due, self.due_batches = self.due, {}, 0
        owned = {k: o for k, o in due.items() if k in self.owned}
        self.skipped += len(due) - len(owned)
        return owned

    def sent(self, offsets: dict) -> None:
        for k in offsets:
            self.unconfirmed.pop(k, None)
        self.committed.update(offsets)

    def failed(self, offsets: dict) -> None:
        self.unconfirmed.update(offsets)

    def take_unconfirmed(self) -> dict:
        """Failed commits of partitions still owned (to send once more at close)."""
        retry = {k: o for k, o in self.unconfirmed.items() if k in self.owned}
        self.unconfirmed.clear()
        return retry

    # ---- seeking -------------------------------------------------------------------------------
    def seek(self, offsets: dict) -> dict:
        """Resume from ``offsets``: {owned key: target} where a target is the given offset, or
        what this trainer last committed, or None (the caller asks the broker, else resets).
        Partitions not owned now are sought when assigned. Nothing due or failed is kept."""
        offsets = {_key(k): int(v) for k, v in offsets.items()}
        self.unconfirmed.clear()
        self.rewind.clear()
        self.orphaned.clear()
        plan = {k: offsets.get(k, self.committed.get(k)) for k in sorted(self.owned)}
        self.seek_later = {k: v for k, v in offsets.items() if k not in self.owned}
        return plan

    def sought(self, key, target: int | None) -> None:
        """The consumer now reads ``key`` from ``target`` (None: from its reset policy)."""
        key = _key(key)
        self.epochs[key] = self.epochs.get(key, 0) + 1     # batches cut before name the old place
        self.left.pop(key, None)    # reading below where it was when revoked is the seek, not a reset
        if target is None:
            self.position.pop(key, None)
        else:
            self.position[key] = int(target)
