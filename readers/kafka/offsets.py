"""The Kafka reader's offsets: what is applied, what is due, what was committed; seeking.

A partition's offset ``n`` is committed only after every message below ``n`` was applied to
the store (or was a bad line, counted and dead-lettered). ``commit(offsets)`` (called by the
job after the update) makes offsets *due*; they are sent (the dead-letter producer flushed
first, then one synchronous ``consumer.commit``) once ``COMMIT_EVERY`` batches are due, and
always before the next ``poll`` — and before ``seek``, ``close``, the end of the stream and
``committed_offsets()``. So at most ``COMMIT_EVERY`` trained batches are ever uncommitted
(what a crash makes the next owner train again). A commit for a partition this trainer no
longer owns is skipped; a failed commit is logged and counted — its messages are delivered
again unless a later commit covers them (every commit carries every owned partition's applied
position); ``close()`` retries the offsets of a failed commit once.

``OffsetsMixin`` is part of ``KafkaSource`` (``source.py`` holds the state it uses:
``_assigned``, ``_applied``, ``_due``, ``_due_batches``, ``_unconfirmed``, ``_committed``).
"""
from __future__ import annotations

import logging
import threading

from kafka import TopicPartition
from kafka.structs import OffsetAndMetadata

log = logging.getLogger("streamtrain.kafka")

COMMIT_EVERY = 2           # batches due before a commit is sent (always sent before poll)
# A commit waits at most this long: a request lost with its connection (a broker restarted
# mid-request) would otherwise hold the training thread until the client's request timeout
# (minutes); a commit that times out is a failed commit (logged, counted, sent again later)
COMMIT_TIMEOUT_MS = 10_000


class OffsetsMixin:
    def commit(self, offsets: dict) -> None:
        """Everything up to ``offsets`` ({(topic, partition): next offset}) was applied."""
        entry = None
        while self._inflight:
            e = self._inflight.popleft()
            if e[0] is offsets:
                entry = e
                break                       # older entries were never committed (cut batches)
        if entry is not None:
            if self._trace is not None and entry[1] is not None:
                self._trace.write(entry[1])
            self.health.applied(entry[2])
        self._commit_now(offsets)

    def committed_offsets(self) -> dict:
        """{(topic, partition): offset} this trainer committed (due offsets are sent first when
        called from the thread that iterates ``batches()``)."""
        if self._loop_thread is None or self._loop_thread is threading.current_thread():
            self._flush_commits()
        return dict(self._committed)

    def seek(self, offsets: dict) -> None:
        """Resume from ``offsets`` ({(topic, partition): offset}, e.g. a checkpoint's).

        Queued and in-flight messages are dropped (they will be read again); owned partitions
        missing from ``offsets`` go back to what this trainer last committed. Partitions not
        owned now are sought when they are assigned.
        """
        offsets = {(str(k[0]), int(k[1])): int(v) for k, v in offsets.items()}
        if self.consumer is None:
            self._seek_later.update(offsets)
            return
        self._flush_commits()
        self._unconfirmed.clear()
        with self._lock:
            self._abandon(lambda seg: True)
            self._rewind.clear()
            self._inflight.clear()
            for tp in sorted(self._assigned):
                key = (tp.topic, tp.partition)
                target = offsets.get(key, self._committed.get(key))
                if target is None:
                    target = self.consumer.committed(tp)
                if target is None:
                    (self.consumer.seek_to_beginning if self.cfg["auto_offset_reset"] == "earliest"
                     else self.consumer.seek_to_end)(tp)
                    self._fetched.pop(tp, None)
                else:
                    self.consumer.seek(tp, target)
                    self._fetched[tp] = target
                    self._applied[key] = target
            self._seek_later = {k: v for k, v in offsets.items()
                                if TopicPartition(*k) not in self._assigned}
        log.info("kafka reader sought to %s", offsets)

    def _commit_now(self, offsets: dict) -> None:
        """Everything below ``offsets`` was applied: its commit is due (sent every ``COMMIT_EVERY``
        batches, and always before the consumer is used again)."""
        with self._lock:
            owned = {TopicPartition(t, p): OffsetAndMetadata(int(o), "", -1)
                     for (t, p), o in offsets.items() if TopicPartition(t, p) in self._assigned}
            self._applied.update({(tp.topic, tp.partition): om.offset for tp, om in owned.items()})
        if len(owned) < len(offsets):
            self.stats["commits_skipped"] += len(offsets) - len(owned)
            log.info("kafka reader: not committing %s (no longer assigned here)",
                     sorted(k for k in offsets if TopicPartition(*k) not in owned))
        if not owned:
            return
        self._due.update(owned)             # newer offsets of a partition replace older ones
        self._due_batches += 1
        if self._due_batches >= COMMIT_EVERY:
            self._flush_commits()

    def _send_commit(self, owned: dict) -> bool:
        """One synchronous commit; a failure is logged and counted, never raised."""
        try:
            if self.dead is not None:
                self.dead.flush()           # a bad line is in the dead-letter topic before its offset
            self.consumer.commit(owned, timeout_ms=COMMIT_TIMEOUT_MS)
        except Exception as err:            # KafkaError mostly; never stop the reader over it
            self.stats["commit_failures"] += 1
            self._unconfirmed.update(owned)
            log.warning("kafka reader: commit of %s failed (%s); those messages will be "
                        "delivered again", {(tp.topic, tp.partition): om.offset
                                            for tp, om in owned.items()}, err)
            return False
        for tp in owned:
            self._unconfirmed.pop(tp, None)
        done = {(tp.topic, tp.partition): om.offset for tp, om in owned.items()}
        self._committed.update(done)
        self.health.committed(done)
        self.stats["commits"] += 1
        return True

    def _flush_commits(self) -> None:
        """Send the due offsets of partitions still owned (a no-op when nothing is due)."""
        if not self._due:
            return
        due, self._due, self._due_batches = self._due, {}, 0
        with self._lock:
            owned = {tp: om for tp, om in due.items() if tp in self._assigned}
        if len(owned) < len(due):
            self.stats["commits_skipped"] += len(due) - len(owned)
        if owned and self.consumer is not None:
            self._send_commit(owned)

    def _retry_unconfirmed(self) -> None:
        """Close: commit once more what failed and is still owned here."""
        with self._lock:
            retry = {tp: om for tp, om in self._unconfirmed.items() if tp in self._assigned}
        if retry:
            log.info("kafka reader: retrying the failed commit of %s before closing",
                     {(tp.topic, tp.partition): om.offset for tp, om in retry.items()})
            self._send_commit(retry)
