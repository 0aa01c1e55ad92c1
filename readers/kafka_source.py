"""The Kafka reader: an endless stream of log lines → mini-batches; offsets committed after the update.

Recovery contract (bytewax's, per partition): what this reader resumes from is only the
offset committed for the partition, and it commits a partition's offset ``n`` only after every
message below ``n`` was applied to the store (or was a bad line, counted and dead-lettered).

The loop (one thread; kafka-python's network thread runs beside it):

1. ``poll`` with a timeout that ends at the open batch's deadline (``max_wait_ms`` after its
   first line arrived), or after ``IDLE_POLL_S`` when nothing is pending: a quiet stream
   blocks in ``poll``, it never spins.
2. Fetched messages queue up as ``Segment``s (one per Kafka record batch and partition).
3. A batch closes at ``batch_size`` lines, or at the deadline with what is there; it is cut at
   a message boundary, parsed in one vectorised call, and yielded with
   ``offsets = {(topic, partition): next offset}``. Bad lines are counted by reason (and sent
   to the dead-letter topic); a batch with no good line is committed at once, not yielded.
4. The job trains the batch, then calls ``commit(batch.offsets)``: the trace (debug) is written
   and the offsets of partitions still owned become due. They are committed (the dead-letter
   producer flushed first, then one synchronous ``consumer.commit``) once ``COMMIT_EVERY``
   batches are due, and always before the next ``poll`` — and before ``seek``, ``close``,
   the end of the stream and ``committed_offsets()``. So at most ``COMMIT_EVERY`` (2) trained
   batches are ever uncommitted (what a crash makes the next owner train again), a quiet
   stream's batch is committed before the reader blocks in ``poll``, and no applied offset is
   left uncommitted when ``poll`` can run the rebalance listener. A commit costs a round trip
   and ~1 ms of CPU (kafka-python's IO thread), so committing every other batch at full speed
   saves about half of that; a commit is still only ever sent after its batches' updates.

Rebalances: the listener runs inside ``poll`` (never while a batch is being trained, since
``poll`` is not called then). Revoked partitions lose their queued, untrained messages
(abandoned: the next owner reads them again from the committed offset; a partition that comes
back to this consumer is sought back to its first abandoned offset, since kafka-python keeps
its position); the in-flight batch has already been committed by then (due commits are sent
before ``poll``). A commit for a partition this trainer no longer owns is skipped; a failed
commit is logged and counted — its messages are delivered again unless a later commit covers
them (every commit carries every owned partition's applied position); ``close()`` retries the
offsets of a failed commit once.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque

import numpy as np

from streamtrain.errors import ReaderError

from .formats import make_parser
from .kafka_config import consumer_settings, normalized
from .kafka_lag import StreamHealth
from .kafka_records import Segment, install
from .lines import NAMES, Chunk
from .malformed import Malformed

log = logging.getLogger("streamtrain.kafka")

COMMIT_EVERY = 2           # batches due before a commit is sent (always sent before poll)
IDLE_POLL_S = 0.5          # longest poll while nothing is pending (stop / end checks between)
HEALTH_EVERY_S = 0.5


def _listener_class():
    from kafka import ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def __init__(self, source):
            self.source = source

        def on_partitions_revoked(self, revoked):
            self.source._on_revoked(revoked, "revoked")

        def on_partitions_lost(self, lost):
            self.source._on_revoked(lost, "lost")

        def on_partitions_assigned(self, assigned):
            self.source._on_assigned(assigned)

    return Listener


class KafkaSource:
    """A ``Source`` over a Kafka topic: ``batches()``, ``commit()``, ``seek()``, ``close()``,
    plus ``lag()`` / ``freshness()`` / ``stats`` for the metrics module."""

    def __init__(self, cfg: dict, batch_size: int, malformed: Malformed | None = None):
        self.cfg = normalized(cfg)
        self.batch_size = int(batch_size)
        self.malformed = malformed if malformed is not None else Malformed()
        self.parser = make_parser(self.cfg["format"], self.cfg["format_options"], self.malformed)
        if self.parser.needs_header:
            raise ReaderError("csv over Kafka has no header line: give option 'columns'")
        self.max_wait = float(self.cfg["max_wait_ms"]) / 1000.0
        self.health = StreamHealth()
        self.stats = {k: 0 for k in ("messages", "lines", "batches", "empty_batches", "commits",
                                     "commit_failures", "commits_skipped", "revocations",
                                     "abandoned_messages", "dead_lettered")}
        self.consumer = None
        self.fast = False
        self.dead = None
        self._trace = None
        self._lock = threading.RLock()
        self._pending: deque[Segment] = deque()
        self._pending_lines = 0
        self._inflight: deque = deque()     # (offsets, rows, timestamps) yielded, not committed
        self._assigned: set = set()         # TopicPartition
        self._fetched: dict = {}            # TopicPartition -> next offset this reader will see
        self._end: dict = {}                # TopicPartition -> end offset when first assigned
        self._seek_later: dict = {}         # (topic, partition) -> offset, applied on assignment
        self._rewind: dict = {}             # (topic, partition) -> first abandoned offset
        self._committed: dict = {}          # (topic, partition) -> offset committed by us
        self._applied: dict = {}            # owned (topic, partition) -> applied up to (start
                                            # position, then each commit() call's offsets, sent
                                            # or still due); cleared on revocation
        self._due: dict = {}                # TopicPartition -> OffsetAndMetadata applied, not sent
        self._due_batches = 0
        self._unconfirmed: dict = {}        # TopicPartition -> OffsetAndMetadata of failed commits
        self._loop_thread = None            # the thread iterating batches() (uses the consumer)
        self._stop = False
        self._started = time.monotonic()
        self._last_message = None
        self._next_health = 0.0
        self._gen = None

    # ---- the Source interface --------------------------------------------------------------
    def describe(self) -> str:
        c = self.cfg
        return (f"kafka {','.join(c['topic'])} group={c['group']} bootstrap={','.join(c['bootstrap'])} "
                f"format={c['format']} max_wait_ms={c['max_wait_ms']}")

    def batches(self):
        self._gen = self._batches()
        return self._gen

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
                self._write_trace(entry[1])
            self.health.applied(entry[2])
        self._commit_now(offsets)

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
        from kafka import TopicPartition
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

    def request_stop(self) -> None:
        """End ``batches()`` at the next safe point (queued, untrained messages are abandoned)."""
        self._stop = True

    def close(self) -> None:
        gen, self._gen = self._gen, None
        try:
            if gen is not None:
                gen.close()
        finally:
            try:
                if self.consumer is not None:
                    try:
                        self._flush_commits()
                        self._retry_unconfirmed()
                    finally:
                        self.consumer.close(autocommit=False)
                        self.consumer = None
            finally:
                if self.dead is not None:
                    self.dead.close()
                    self.dead = None
                if self._trace is not None:
                    self._trace.close()
                    self._trace = None

    # ---- lag and freshness (any thread) -----------------------------------------------------
    def lag(self) -> dict:
        """{(topic, partition): messages not yet applied} for the partitions this trainer owns."""
        return self.health.lag()

    def freshness(self) -> dict:
        return self.health.freshness()

    def committed_offsets(self) -> dict:
        """{(topic, partition): offset} this trainer committed (due offsets are sent first when
        called from the thread that iterates ``batches()``)."""
        if self._loop_thread is None or self._loop_thread is threading.current_thread():
            self._flush_commits()
        return dict(self._committed)

    # ---- the loop ---------------------------------------------------------------------------
    def _open(self):
        from kafka import KafkaConsumer
        from kafka.errors import KafkaError

        settings = consumer_settings(self.cfg)
        fast = self.cfg["fast_decode"]
        per_poll = max(1, int(np.ceil(self.batch_size / max(1, self.cfg["lines_per_message"]))))
        settings.setdefault("max_poll_records", 1000 if fast else max(500, 2 * per_poll))
        try:
            consumer = KafkaConsumer(**settings)
        except KafkaError as err:
            raise ReaderError(f"kafka reader: cannot reach {','.join(self.cfg['bootstrap'])}: {err}") from err
        self.fast = fast and install(consumer)
        consumer.subscribe(topics=self.cfg["topic"], listener=_listener_class()(self))
        self.consumer = consumer
        if self.cfg["dead_letter"]:
            from .deadletter import DeadLetter
            self.dead = DeadLetter(self.cfg["bootstrap"], self.cfg["dead_letter"], self.cfg["producer"])
        if self.cfg["trace_file"]:
            self._trace = open(self.cfg["trace_file"], "a")
        log.info("kafka reader: %s (fast decode: %s)", self.describe(), self.fast)
        return consumer

    def _batches(self):
        consumer = self.consumer or self._open()
        self._loop_thread = threading.current_thread()
        while not self._stop:
            got = consumer.poll(timeout_ms=self._poll_timeout_ms(), update_offsets=True)
            now = time.monotonic()
            if got:
                self._take(got, now)
            if now >= self._next_health:
                self._update_health()
                self._next_health = now + HEALTH_EVERY_S
            while self._pending_lines >= self.batch_size and not self._stop:
                yield from self._emit(self.batch_size)
            if self._stop:
                break
            if self._pending and now >= self._pending[0].arrived + self.max_wait:
                yield from self._emit(self.batch_size)
            # nothing applied is left uncommitted when poll may revoke partitions
            self._flush_commits()
            if self._at_end(now):
                while self._pending and not self._stop:
                    yield from self._emit(self.batch_size)
                self._flush_commits()
                self._update_health()
                log.info("kafka reader: end of stream (%s)", "stop_at_end" if self.cfg["stop_at_end"]
                         else "idle_timeout_s")
                return
        self._flush_commits()

    def _poll_timeout_ms(self) -> int:
        if not self._pending:
            return int(IDLE_POLL_S * 1000)
        left = self._pending[0].arrived + self.max_wait - time.monotonic()
        return max(0, int(np.ceil(left * 1000)))

    def _take(self, got: dict, now: float) -> None:
        with self._lock:
            for tp, items in got.items():
                if tp not in self._assigned:
                    continue
                segs = items if self.fast else [Segment.from_records(items)]
                for seg in segs:
                    seg.arrived = now
                    self._pending.append(seg)
                    self._pending_lines += seg.n_lines
                    key = (tp.topic, tp.partition)
                    if key not in self._applied:
                        self.health.start(key, seg.offset)
                        self._applied[key] = seg.offset
                    elif seg.offset < self._applied[key]:
                        # the log went backwards under us (topic recreated or truncated, and
                        # the consumer reset after OffsetOutOfRange): follow it, or the next
                        # commit would re-commit the stale, higher offset and skip new records
                        log.warning("kafka reader: %s[%d] restarts at offset %d, below the applied "
                                    "offset %d (topic recreated?); following it", tp.topic,
                                    tp.partition, seg.offset, self._applied[key])
                        self._applied[key] = seg.offset
                        self.stats["offset_resets"] = self.stats.get("offset_resets", 0) + 1
                    self._fetched[tp] = seg.next_offset
                    self.stats["messages"] += len(seg)
                    self.stats["lines"] += seg.n_lines
            self._last_message = now

    def _cut(self, limit: int) -> list[Segment]:
        """Take queued segments holding at most ``limit`` lines (at least one message)."""
        take, lines = [], 0
        with self._lock:
            while self._pending and lines < limit:
                seg = self._pending[0]
                n = seg.n_lines
                if lines + n > limit:
                    k = int(np.searchsorted(seg.lines, limit - lines, side="right"))
                    if k == 0 and take:
                        break
                    k = max(k, 1)
                    if k < len(seg):
                        head, tail = seg.split(k)
                        self._pending[0] = tail
                        self._pending_lines -= head.n_lines
                        take.append(head)
                        break
                self._pending.popleft()
                self._pending_lines -= n
                take.append(seg)
                lines += n
        return take

    def _emit(self, limit: int):
        take = self._cut(limit)
        if not take:
            return
        batch, rows = self._parse(take)
        if batch.size == 0:                 # only bad or blank lines: nothing to apply
            self.stats["empty_batches"] += 1
            self._commit_now(batch.offsets)
            return
        self.stats["batches"] += 1
        self._inflight.append((batch.offsets, rows, batch.timestamps))
        yield batch

    def _parse(self, segs: list[Segment]):
        """Parse the segments' lines as one chunk; (batch, (topics, partitions, offsets) of rows)."""
        chunk = Chunk(segs[0].buf if len(segs) == 1 else b"".join(s.buf for s in segs))
        batch = self.parser.parse_chunk(chunk)
        offsets: dict = {}
        for s in segs:
            key = (s.topic, s.partition)
            offsets[key] = max(offsets.get(key, 0), s.next_offset)
        # owned partitions with nothing in this batch keep their applied position, so the
        # offsets a checkpoint records (the job's union of batch offsets) cover every partition
        with self._lock:
            for tp in self._assigned:
                key = (tp.topic, tp.partition)
                if key not in offsets:
                    if key in self._applied:
                        offsets[key] = self._applied[key]
        batch.offsets = offsets
        # which message every line came from
        starts = np.cumsum([0] + [len(s.buf) for s in segs[:-1]])
        ends = np.concatenate([s.ends + b for s, b in zip(segs, starts)])
        topics = sorted({s.topic for s in segs})
        msg_topic = np.concatenate([np.full(len(s), topics.index(s.topic)) for s in segs])
        msg_part = np.concatenate([np.full(len(s), s.partition) for s in segs])
        msg_off = np.concatenate([s.offsets for s in segs])
        msg_ts = np.concatenate([s.ts for s in segs])
        kept = np.flatnonzero((chunk.reason == 0) & ~chunk.blank)
        rows = None
        if len(kept) == batch.size:
            m = np.searchsorted(ends, chunk.line_end[kept])
            batch.timestamps = msg_ts[m]
            if self._trace is not None:
                rows = (np.array(topics)[msg_topic[m]], msg_part[m], msg_off[m])
        else:                               # a parser that keeps lines differently: no per-row data
            log.warning("kafka reader: %d good lines but %d rows parsed; no timestamps for this batch",
                        len(kept), batch.size)
        bad = np.flatnonzero(chunk.reason)
        if bad.size and self.dead is not None:
            m = np.searchsorted(ends, chunk.line_end[bad])
            for i, j in zip(bad.tolist(), m.tolist()):
                self.dead.send(chunk.line(i), NAMES[int(chunk.reason[i])],
                               (topics[msg_topic[j]], int(msg_part[j]), int(msg_off[j])))
            self.stats["dead_lettered"] += len(bad)
        return batch, rows

    def _commit_now(self, offsets: dict) -> None:
        """Everything below ``offsets`` was applied: its commit is due (sent every ``COMMIT_EVERY``
        batches, and always before the consumer is used again)."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

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
            self.consumer.commit(owned)
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

    def _write_trace(self, rows) -> None:
        topics, parts, offs = rows
        self._trace.write("".join(f"{t} {p} {o}\n" for t, p, o in
                                  zip(topics.tolist(), parts.tolist(), offs.tolist())))
        self._trace.flush()

    # ---- end of stream ----------------------------------------------------------------------
    def _at_end(self, now: float) -> bool:
        idle = self.cfg["idle_timeout_s"]
        if idle and self._joined_once() and now - (self._last_message or self._started) >= idle:
            return True
        if not self.cfg["stop_at_end"]:
            return False
        with self._lock:
            assigned = set(self._assigned)
        if not assigned:
            return False
        for tp in assigned:
            if tp not in self._end:
                # the high watermark of the first fetch response: ListOffsets(latest) is not
                # trustworthy on every broker (Tansu 0.6 answers with a batch's base offset)
                hw = self.consumer.highwater(tp)
                if hw is None:
                    return False
                self._end[tp] = hw
            pos = self._fetched.get(tp)
            if pos is None:
                pos = self.consumer.position(tp)
                if pos is None:
                    return False
                self._fetched[tp] = pos
                self.health.start((tp.topic, tp.partition), pos)
            if pos < self._end[tp]:
                return False
        return True

    def _joined_once(self) -> bool:
        return bool(self._assigned) or self._last_message is not None

    # ---- rebalance callbacks (run inside poll) -----------------------------------------------
    def _abandon(self, pred) -> int:
        """Drop queued segments; remember where each partition must be read again from."""
        kept, dropped = deque(), 0
        for seg in self._pending:
            if pred(seg):
                dropped += len(seg)
                self._pending_lines -= seg.n_lines
                key = (seg.topic, seg.partition)
                self._rewind[key] = min(self._rewind.get(key, seg.offset), seg.offset)
            else:
                kept.append(seg)
        self._pending = kept
        self.stats["abandoned_messages"] += dropped
        return dropped

    def _on_revoked(self, tps, how: str) -> None:
        tps = set(tps)
        keys = {(tp.topic, tp.partition) for tp in tps}
        with self._lock:
            self.stats["revocations"] += 1
            dropped = self._abandon(lambda seg: (seg.topic, seg.partition) in keys)
            self._assigned -= tps
            for tp in tps:
                self._unconfirmed.pop(tp, None)
                self._fetched.pop(tp, None)
                self._applied.pop((tp.topic, tp.partition), None)
        self.health.forget(keys)
        log.info("kafka reader: partitions %s %s; %d queued untrained messages abandoned",
                 sorted(keys), how, dropped)

    def _on_assigned(self, tps) -> None:
        with self._lock:
            self._assigned |= set(tps)
            for tp in tps:
                key = (tp.topic, tp.partition)
                # kafka-python keeps the position of a partition that stays with this consumer
                # across a rebalance: read the messages abandoned at revocation again
                target = self._seek_later.pop(key, None)
                if target is None:
                    target = self._rewind.get(key)
                if target is not None:
                    self.consumer.seek(tp, target)
                    self._fetched[tp] = target
            self._rewind.clear()
        log.info("kafka reader: assigned %s", sorted((tp.topic, tp.partition) for tp in tps))

    def _update_health(self) -> None:
        with self._lock:
            assigned = list(self._assigned)
        for tp in assigned:
            try:
                self.health.highwater((tp.topic, tp.partition), self.consumer.highwater(tp))
            except Exception:               # revoked meanwhile
                pass
