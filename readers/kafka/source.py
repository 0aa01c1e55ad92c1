"""``KafkaSource``: the Kafka reader's poll loop.

Recovery contract (bytewax's, per partition): what this reader resumes from is only the
offset committed for the partition, and it commits a partition's offset ``n`` only after every
message below ``n`` was applied to the store (or was a bad line, counted and dead-lettered).

The loop (one thread uses the consumer; kafka-python's network thread runs beside it, and a
worker thread parses the next full batch while one trains):

1. ``poll`` with a timeout that ends at the open batch's deadline (``max_wait_ms`` after its
   first line arrived), or after ``IDLE_POLL_S`` when nothing is pending: a quiet stream
   blocks in ``poll``, it never spins.
2. Fetched messages queue up as ``Segment``s (``pending.py``; one per Kafka record batch and
   partition on the fast path, ``fastpath.py``).
3. A batch closes at ``batch_size`` lines, or at the deadline with what is there; it is cut at
   a message boundary, parsed in one vectorised call (``batching.py``; a full batch in the
   worker, ``_full_batches``, with the job's ``prepare``), and yielded with
   ``offsets = {(topic, partition): next offset}``. Bad lines are counted by reason (and sent
   to the dead-letter topic, ``deadletter.py``); a batch with no good line is committed at
   once, not yielded.
4. The job trains the batch, then calls ``commit(batch.offsets)`` (``offsets.py``: when
   commits are sent); rebalances are handled in ``rebalance.py``.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
from kafka import KafkaConsumer
from kafka.errors import KafkaError

from streamtrain.backoff import STOPPED, Backoff
from streamtrain.errors import ReaderError

from ..compose import Prepare
from ..formats import make_parser
from ..malformed import Malformed
from .batching import Parsed
from .clients import consumer_settings, producer_settings, quiet_library_logs
from .config import normalized
from .connect import connect, coordinator_known
from .deadletter import DeadLetter
from .fastpath import FastPath
from .lag import StreamHealth
from .offsets import OffsetsMixin
from .oversize import OversizeSearch, skip_too_large
from .pending import Pending
from .rebalance import Listener, RebalanceMixin
from .segment import Segment
from .trace import TraceFile

log = logging.getLogger("streamtrain.kafka")

POLL_BACKOFF = Backoff(initial_s=0.1, max_s=5.0)     # a broker that does not answer a poll
IDLE_POLL_S = 0.5          # longest poll while nothing is pending (stop / end checks between)
HEALTH_EVERY_S = 0.5
KEEP_ALIVE_SHARE = 0.25    # poll again after this share of max_poll_interval_ms, backlog or not


class KafkaSource(OffsetsMixin, RebalanceMixin):
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
                                     "abandoned_messages", "dead_lettered", "keep_alive_polls", "too_large")}
        self.consumer = None
        self.fastpath = FastPath()
        self.oversize = None                # finds records too large to fetch (oversize.py)
        self.dead = None
        self._trace = None
        self._lock = threading.RLock()
        self._pending = Pending()
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
        self._worker = None                 # parses (and prepares) the next batch while one trains
        self._ahead = None                  # that next batch: (its segments, a future of its Parsed)
        self.prepare = Prepare()            # the job's per-batch work, done in the worker too
        self._stop = False
        # a job whose store writes back sets this: ``due_only`` -> flush (when due, or always)
        # and commit what was trained; called in this loop's thread between batches, before
        # every poll, at the end of the stream and before partitions are revoked
        self.before_poll = None
        self._started = time.monotonic()
        self._last_message = None
        self._next_health = 0.0
        self._gen = None
        self._polled = time.monotonic()      # when the loop last called poll()
        self._keep_alive_s = 0.0             # set from max_poll_interval_ms when the consumer opens
        self._connected = False              # the last poll knew the group coordinator (``ready``)
        self.waiting = None                  # what the reader waits for at start-up (/healthz)

    @property
    def fast(self) -> bool:
        """True while poll() hands out Segments (the fast path is on)."""
        return self.fastpath.active

    # ---- the Source interface --------------------------------------------------------------
    def describe(self) -> str:
        c = self.cfg
        sec = (c.get("security") or {}).get("security_protocol", "PLAINTEXT")
        return (f"kafka {','.join(c['topic'])} group={c['group']} bootstrap={','.join(c['bootstrap'])} "
                f"format={c['format']} max_wait_ms={c['max_wait_ms']} security={sec}")

    def batches(self):
        self._gen = self._batches()
        return self._gen

    def ready(self) -> bool:
        """Connected: the consumer is made and its last poll knew the group's coordinator (a
        broker that went away makes it unknown: ``/readyz`` answers 503 until it is back)."""
        return self.consumer is not None and self._connected

    def _wait(self, what: str | None) -> None:
        self.waiting = what

    def request_stop(self) -> None:
        """End ``batches()`` at the next safe point (queued, untrained messages are abandoned)."""
        self._stop = True

    def close(self) -> None:
        gen, self._gen = self._gen, None
        try:
            if gen is not None:
                gen.close()
            if self._worker is not None:
                self._worker.shutdown(wait=True)
                self._worker = None
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

    # ---- the loop ---------------------------------------------------------------------------
    def _open(self):
        quiet_library_logs()
        settings = consumer_settings(self.cfg)
        fast = self.cfg["fast_decode"]
        per_poll = max(1, int(np.ceil(self.batch_size / max(1, self.cfg["lines_per_message"]))))
        settings.setdefault("max_poll_records", 1000 if fast else max(500, 2 * per_poll))
        if "receive_message_max_bytes" in KafkaConsumer.DEFAULT_CONFIG:
            # kafka-python 2.3-3.0 refuse a network frame over 1 MB by default: let a fetch through
            settings.setdefault("receive_message_max_bytes", settings["fetch_max_bytes"] + (1 << 20))
        self._keep_alive_s = KEEP_ALIVE_SHARE * settings["max_poll_interval_ms"] / 1000
        consumer = connect(lambda: KafkaConsumer(**settings), self.cfg["bootstrap"], lambda: self._stop, self._wait)
        if consumer is None:                # asked to stop before a broker answered
            return None
        if fast:
            self.fastpath.install(consumer)
        self.oversize = OversizeSearch.install(consumer)
        consumer.subscribe(topics=self.cfg["topic"], listener=Listener(self))
        self.consumer = consumer
        if self.cfg["dead_letter"]:
            self.dead = DeadLetter(self.cfg["dead_letter"], producer_settings(self.cfg))
        if self.cfg["trace_file"]:
            self._trace = TraceFile(self.cfg["trace_file"])
        log.info("kafka reader: %s (fast decode: %s)", self.describe(), self.fast)
        return consumer

    def _poll(self, consumer, timeout_ms: int) -> dict:
        """``consumer.poll``, waiting out an unreachable broker: kafka-python 3 raises a retriable
        error (a connection reset while it looks up the group coordinator) from ``poll`` when the
        broker goes away mid-rejoin. That is retried with backoff (logged, counted in
        ``poll_errors``) until the broker answers or the reader is asked to stop (then ``{}``);
        any other error propagates."""
        def failed(err, attempt, pause):
            self._connected = False
            self.stats["poll_errors"] = self.stats.get("poll_errors", 0) + 1
            (log.warning if attempt == 1 or attempt % 20 == 0 else log.debug)(
                "kafka reader: poll failed (%s, attempt %d); retrying in %.1f s", err, attempt, pause)

        got = POLL_BACKOFF.retry(lambda: consumer.poll(timeout_ms=timeout_ms, update_offsets=True),
                                 transient=lambda err: isinstance(err, KafkaError) and err.retriable,
                                 on_retry=failed, stopped=lambda: self._stop)
        return {} if got is STOPPED else got

    def _batches(self):
        consumer = self.consumer or self._open()
        if consumer is None:
            return
        self._loop_thread = threading.current_thread()
        while not self._stop:
            got = self._poll(consumer, self._poll_timeout_ms())
            now = self._polled = time.monotonic()
            self._connected = coordinator_known(consumer)
            if got:
                self._take(got, now)
            self._check_oversize(consumer)
            if now >= self._next_health:
                self._update_health()
                self._next_health = now + HEALTH_EVERY_S
            yield from self._full_batches(consumer)
            if self._stop:
                break
            if self._pending and now >= self._pending.first_arrived + self.max_wait:
                yield from self._emit(self.batch_size)
            # nothing applied is left uncommitted when poll may revoke partitions
            if self.before_poll is not None:
                self.before_poll(True)
            self._flush_commits()
            if self._at_end(now):
                while self._pending and not self._stop:
                    yield from self._emit(self.batch_size)
                    self._keep_alive(consumer)
                if self.before_poll is not None:
                    self.before_poll(False)
                self._flush_commits()
                self._update_health()
                log.info("kafka reader: end of stream (%s)", "stop_at_end" if self.cfg["stop_at_end"]
                         else "idle_timeout_s")
                return
        self._flush_commits()

    def _full_batches(self, consumer):
        """Every full batch the queue holds, each parsed (and prepared: the job's
        ``prepare.fn``) in the worker thread while the one before it trains. A batch ahead holds
        messages taken off the queue, where a rebalance could not abandon them, so the consumer
        is never polled while there is one: a due keep-alive poll waits until no batch is ahead
        (one batch later at most), and the loop's own poll comes after this returns. A batch
        ahead when the reader stops goes back to the queue, untrained."""
        try:
            while not self._stop:
                if self._ahead is None:
                    if self._pending.lines < self.batch_size:
                        return
                    self._ahead = self._parse_ahead(self.batch_size)
                (_, current), self._ahead = self._ahead, None
                if self._pending.lines >= self.batch_size and not self._keep_alive_due():
                    self._ahead = self._parse_ahead(self.batch_size)
                yield from self._finish(current.result())
                if self._ahead is None:
                    self._keep_alive(consumer)
        finally:
            ahead, self._ahead = self._ahead, None
            if ahead is not None:               # stopped: its messages go back, untrained
                take, future = ahead
                future.cancel() or wait([future])
                with self._lock:
                    self._pending.put_back(take)

    def _parse_ahead(self, limit: int) -> tuple:
        """(the segments cut, a future of their ``Parsed``) for the worker to parse now."""
        take = self._cut(limit)
        if self._worker is None:
            self._worker = ThreadPoolExecutor(1, thread_name_prefix="streamtrain-kafka-parse")
        return take, self._worker.submit(self._parsed, take)

    def _parsed(self, take):
        parsed = Parsed(self.parser, take)
        if parsed.batch.size:
            self.prepare(parsed.batch)
        return parsed

    def _keep_alive_due(self) -> bool:
        return time.monotonic() - self._polled >= self._keep_alive_s

    def _keep_alive(self, consumer) -> None:
        """Poll, fetching nothing, when the backlog of one fetch has kept the loop from polling
        for a while: a slow model training a large fetch would otherwise outlive
        ``max_poll_interval_ms``, drop out of the group and fail its commits. A rebalance this
        poll brings is handled as at the loop's own poll (``rebalance.py``)."""
        if not self._keep_alive_due():
            return
        owned, paused = consumer.assignment(), consumer.paused()
        consumer.pause(*owned)
        try:
            got = self._poll(consumer, 0)
        finally:                         # (partitions the oversize search paused stay paused)
            consumer.resume(*((owned - paused) & consumer.assignment()))
        self._polled = time.monotonic()
        self.stats["keep_alive_polls"] += 1
        if got:                          # paused partitions return nothing; kept if one did
            self._take(got, self._polled)
        self._check_oversize(consumer)

    def _poll_timeout_ms(self) -> int:
        if not self._pending:
            return int(IDLE_POLL_S * 1000)
        left = self._pending.first_arrived + self.max_wait - time.monotonic()
        return max(0, int(np.ceil(left * 1000)))

    def _take(self, got: dict, now: float) -> None:
        with self._lock:
            for tp, items in got.items():
                if tp not in self._assigned:
                    continue
                for seg in _segments(items):
                    seg.arrived = now
                    self._pending.push(seg)
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
                    if self.oversize is not None:
                        self.oversize.took(tp, len(seg.buf))
            self._last_message = now

    def _check_oversize(self, consumer) -> None:
        """Step the search for a record too large to fetch; skip it once found."""
        if self.oversize is None or not (self.oversize.active or self.oversize.events):
            return
        with self._lock:
            owned = set(self._assigned)
        found = self.oversize.step(owned, self._fetched.get)
        if found is not None:
            skip_too_large(self, consumer, *found)

    def _emit(self, limit: int):
        """A batch of what is queued, parsed in this thread (the deadline's and the end's)."""
        take = self._cut(limit)
        if take:
            yield from self._finish(Parsed(self.parser, take))

    def _cut(self, limit: int) -> list:
        with self._lock:
            return self._pending.cut(limit)

    def _finish(self, parsed: Parsed):
        """A parsed batch's offsets, bad lines and bookkeeping; yielded unless it is empty."""
        batch = parsed.batch
        batch.offsets = self._with_owned(parsed.offsets)
        rows = parsed.rows(want_sources=self._trace is not None)
        if self.dead is not None and parsed.chunk.reason.any():
            for line, reason, source in parsed.bad_lines():
                self.dead.send(line, reason, source)
                self.stats["dead_lettered"] += 1
        if batch.size == 0:                 # only bad or blank lines: nothing to apply
            self.stats["empty_batches"] += 1
            self._commit_now(batch.offsets)
            return
        self.stats["batches"] += 1
        self._inflight.append((batch.offsets, rows, batch.timestamps))
        yield batch

    def _with_owned(self, offsets: dict) -> dict:
        """Owned partitions with nothing in this batch keep their applied position, so the
        offsets a checkpoint records (the job's union of batch offsets) cover every partition."""
        with self._lock:
            for tp in self._assigned:
                key = (tp.topic, tp.partition)
                if key not in offsets and key in self._applied:
                    offsets[key] = self._applied[key]
        return offsets

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

    def _update_health(self) -> None:
        with self._lock:
            assigned = list(self._assigned)
        for tp in assigned:
            try:
                self.health.highwater((tp.topic, tp.partition), self.consumer.highwater(tp))
            except Exception:               # revoked meanwhile
                pass


def _segments(items: list):
    """What poll() returned for one partition as Segments: the fast path's as they are,
    runs of ConsumerRecords (the normal path, or after the fast path fell back) converted."""
    run = []
    for item in items:
        if isinstance(item, Segment):
            if run:
                yield Segment.from_records(run)
                run = []
            yield item
        else:
            run.append(item)
    if run:
        yield Segment.from_records(run)
