"""``Committer``: sends what ``PartitionOffsets`` says is due, on the consumer's thread.

One synchronous ``consumer.commit`` per ``COMMIT_EVERY`` applied batches, and always before the
consumer thread polls (or once the oldest due offset waited ``COMMIT_MAX_WAIT_S`` while it does
not poll), before partitions are revoked, a seek, the close and ``committed_offsets()``; the dead-letter producer is flushed
first (a bad line is in its topic before its offset is committed). A failed commit is logged
and counted, never raised; its offsets are retried once at close.
"""
from __future__ import annotations

import logging
import time

from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

from .offsets import COMMIT_TIMEOUT_MS, PartitionOffsets

COMMIT_MAX_WAIT_S = 0.2     # a due offset waits at most this long for its commit (a quiet topic)

log = logging.getLogger("streamtrain.kafka")


class Committer:
    def __init__(self, offsets: PartitionOffsets, health, count):
        self.offsets, self.health, self.count = offsets, health, count
        self.consumer = None            # set once the consumer is made
        self.dead = None                # the dead-letter producer, if any
        self.due_since = None           # when the oldest offset not sent became due

    def applied(self, *batches: dict) -> None:
        """Everything below each batch's ``offsets`` (oldest first) was applied: due now, sent
        when ``COMMIT_EVERY`` batches are (once, however many batches came together)."""
        skipped, send, gone = self.offsets.skipped, False, set()
        for offsets in batches:
            before = self.offsets.skipped
            send |= self.offsets.applied(offsets)
            if self.offsets.skipped > before:
                gone.update(k for k in offsets if (k[0], k[1]) not in self.offsets.owned)
        if self.due_since is None and self.offsets.due:
            self.due_since = time.monotonic()
        if self.offsets.skipped > skipped:
            log.info("kafka reader: not committing %s (no longer assigned here)", sorted(gone))
        if send:
            self.flush()

    def flush_if_late(self) -> None:
        """Send what is due if the oldest of it has waited ``COMMIT_MAX_WAIT_S``."""
        if self.due_since is not None and time.monotonic() - self.due_since >= COMMIT_MAX_WAIT_S:
            self.flush()

    def flush(self) -> None:
        """Send the due offsets of partitions still owned (a no-op when nothing is due)."""
        self.due_since = None
        due = self.offsets.take_due()
        if due and self.consumer is not None:
            self.send(due)

    def retry(self) -> None:
        """Close: commit once more what failed and is still owned here."""
        retry = self.offsets.take_unconfirmed()
        if retry and self.consumer is not None:
            log.info("kafka reader: retrying the failed commit of %s before closing", retry)
            self.send(retry)

    def send(self, offsets: dict) -> bool:
        """One synchronous commit; a failure is logged and counted, never raised."""
        try:
            if self.dead is not None:
                self.dead.flush()
            self.consumer.commit({TopicPartition(*k): OffsetAndMetadata(int(o), "", -1) for k, o in offsets.items()},
                                 timeout_ms=COMMIT_TIMEOUT_MS)
        except Exception as err:            # KafkaError mostly; never stop the reader over it
            self.count("commit_failures")
            self.offsets.failed(offsets)
            log.warning("kafka reader: commit of %s failed (%s); those messages will be "
                        "delivered again", offsets, err)
            return False
        self.offsets.sent(offsets)
        self.health.committed(offsets)
        self.count("commits")
        return True
