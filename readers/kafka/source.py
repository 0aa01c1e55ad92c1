"""``KafkaSource``: the Kafka reader as the job sees it (``Source``'s contract).

Recovery contract (bytewax's, per partition): what this reader resumes from is only the
offset committed for the partition, and it commits a partition's offset ``n`` only after every
message below ``n`` was applied to the store (or was a bad line, counted and dead-lettered).

Threads. The consumer thread (``loop.py``) makes every call on kafka-python's consumer — which
is not thread-safe — polls, decodes and cuts batches ahead, which a parse worker parses and
prepares; the training thread iterates ``batches()``, which takes them from the ``Handoff``
(``handoff.py``). What the
training thread asks of the consumer (a commit after a batch's update, a seek, the flush
before ``committed_offsets()``) is handed back to the consumer thread through the same
``Handoff`` and run there between polls, in order; so an offset is still committed only after
its update. The parts, each owning its state:

* ``PartitionOffsets`` (``offsets.py``): owned, applied, due, committed — pure bookkeeping;
* ``Committer`` (``commits.py``): sends what is due, every ``COMMIT_EVERY`` batches and before
  each poll;
* ``Rebalance`` (``rebalance.py``): the listener; before partitions are revoked it has the
  training thread *settle* — finish the batch it trains, run the job's idle hook with
  ``due_only=False`` (a write-back store flushes) and hand the commits back — then abandons
  the revoked partitions' queued, untrained messages;
* ``ConsumerLoop`` (``loop.py``): the thread's poll loop.

The job's idle hook (``batches(idle=fn)``) runs in the training thread: ``fn(True)`` while no
batch is ready, ``fn(False)`` at the end of the stream and for a settle.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque

from kafka import KafkaConsumer

from streamtrain.errors import ReaderError

from ..compose import Prepare
from ..formats import make_parser
from ..malformed import Malformed
from ..source import Source
from .commits import Committer
from .config import normalized
from .handoff import END, SETTLE, Handoff
from .lag import StreamHealth
from .loop import ConsumerLoop
from .offsets import PartitionOffsets
from .rebalance import Rebalance
from .trace import TraceFile

log = logging.getLogger("streamtrain.kafka")

IDLE_WAIT_S = 0.1          # the training thread's wait for a batch before it calls the idle hook
AHEAD = 2                  # parsed batches waiting for the trainer at most
SETTLE_SHARE = 0.8         # a settle waits at most this share of max_poll_interval_ms


class KafkaSource(Source):
    """A ``Source`` over Kafka topics: ``batches()``, ``commit()``, ``seek()``, ``close()``,
    ``request_stop()``, ``lag()`` / ``freshness()`` / ``stats`` for the metrics module."""

    waits_for_data = True

    def __init__(self, cfg: dict, batch_size: int, malformed: Malformed | None = None):
        super().__init__(malformed=malformed, prepare=Prepare())    # the job's per-batch work
        self.cfg = normalized(cfg)
        self.batch_size = int(batch_size)
        self.parser = make_parser(self.cfg["format"], self.cfg["format_options"], self.malformed)
        if self.parser.needs_header:
            raise ReaderError("csv over Kafka has no header line: give option 'columns'")
        self.health = StreamHealth()
        self._stats = {k: 0 for k in ("messages", "lines", "batches", "empty_batches", "commits",
                                      "commit_failures", "abandoned_messages", "dead_lettered",
                                      "keep_alive_polls", "too_large")}
        self._count_lock = threading.Lock()
        self.stop_requested = False
        self.trace = TraceFile(self.cfg["trace_file"]) if self.cfg["trace_file"] else None
        self.handoff = Handoff(AHEAD)
        self.offsets = PartitionOffsets()       # used on the consumer thread only
        self.committer = Committer(self.offsets, self.health, self.count)
        self.loop = ConsumerLoop(self)
        self.rebalance = Rebalance(self.offsets, self.loop.abandon, self._settle_in_listener, self.loop.seek_consumer,
                                   self.health.forget)
        self._commit_token = None               # the last commit handed to the consumer thread
        self._inflight: deque = deque()         # (offsets, rows, timestamps) handed out, not committed
        self._idle = None                       # the job's idle hook (``batches(idle=...)``)
        self._gen = None
        self.waited_s = 0.0                     # the training thread's wait for batches (a bottleneck's sign)
        self.first_waited_s = None              # of which before the first batch (the group join)
        self.parse_waited_s = 0.0               # ... for a handed-over batch's parse (the parse worker)
        self.commit_waited_s = 0.0              # ... for the consumer thread to take the previous commit

    # ---- what the metrics and health checks read (any thread) -------------------------------------
    @property
    def stats(self) -> dict:
        """Counters: messages, lines, batches, commits, failures, skips, revocations…"""
        with self._count_lock:
            out = dict(self._stats)
        return {**out, "commits_skipped": self.offsets.skipped, "revocations": self.rebalance.revocations}

    def count(self, name: str, n: int = 1) -> None:
        with self._count_lock:
            self._stats[name] = self._stats.get(name, 0) + n

    @property
    def consumer(self):
        return self.loop.consumer

    @consumer.setter
    def consumer(self, consumer) -> None:
        self.loop.consumer = self.committer.consumer = consumer

    @staticmethod
    def consumer_class():
        """kafka-python's ``KafkaConsumer`` (looked up here, so a test can record what it is given)."""
        return KafkaConsumer

    @property
    def dead(self):
        """The dead-letter producer, once the consumer is made (None without ``dead_letter``)."""
        return self.committer.dead

    @property
    def fastpath(self):
        return self.loop.fastpath

    @property
    def fast(self) -> bool:
        """True while poll() hands out Segments (the fast path is on)."""
        return self.loop.fastpath.active

    @property
    def waiting(self) -> str | None:
        """What the reader waits for at start-up (/healthz), or None."""
        return self.loop.waiting

    def ready(self) -> bool:
        """Connected: the consumer is made and its last poll knew the group's coordinator (a
        broker that went away makes it unknown: ``/readyz`` answers 503 until it is back)."""
        return self.loop.consumer is not None and self.loop.connected

    def lag(self) -> dict:
        """{(topic, partition): messages not yet applied} for the partitions this trainer owns."""
        return self.health.lag()

    def freshness(self) -> dict:
        return self.health.freshness()

    def describe(self) -> str:
        c = self.cfg
        sec = (c.get("security") or {}).get("security_protocol", "PLAINTEXT")
        return (f"kafka {','.join(c['topic'])} group={c['group']} bootstrap={','.join(c['bootstrap'])} "
                f"format={c['format']} max_wait_ms={c['max_wait_ms']} security={sec}")

    # ---- the training thread ------------------------------------------------------------------
    def batches(self, idle=None):
        self._idle = idle
        self._gen = self._batches(idle)
        return self._gen

    def _start(self) -> None:
        if self.handoff.consumer_thread is None:
            thread = threading.Thread(target=self.loop.run, name="streamtrain-kafka-consumer", daemon=True)
            self.handoff.consumer_thread = thread
            thread.start()

    def _batches(self, idle):
        self._start()
        handoff = self.handoff
        handoff.trainer_active = True
        try:
            while not self.stop_requested:
                t0 = time.perf_counter()
                got = handoff.take(IDLE_WAIT_S)
                self.waited_s += time.perf_counter() - t0
                if got is SETTLE:               # partitions are being revoked: commit what was trained
                    if idle is not None:
                        idle(False)
                    handoff.settled()
                elif got is None:
                    if idle is not None:
                        idle(True)
                elif got is END:
                    if idle is not None:
                        idle(False)
                    return
                else:
                    if self.first_waited_s is None:
                        self.first_waited_s = self.waited_s
                    batch = self._hand_out(got)
                    if batch is not None:
                        yield batch
        finally:
            handoff.trainer_active = False
            handoff.wake()

    def _hand_out(self, ready):
        """A handed-over batch's bad lines and bookkeeping: the batch (empty when it had no good
        line: the job commits it in turn)."""
        t0 = time.perf_counter()
        parsed, rows = ready.future.result()   # parsed meanwhile in the parse worker
        self.parse_waited_s += time.perf_counter() - t0
        batch, dead = parsed.batch, self.committer.dead
        if dead is not None and parsed.has_bad:
            for line, reason, where in parsed.bad_lines():
                dead.send(line, reason, where)
                self.count("dead_lettered")
        # only bad or blank lines: nothing to train, but handed to the job all the same, so that
        # its offsets are committed after every batch before them is durable (the store says when)
        self.count("batches" if batch.size else "empty_batches")
        self._inflight.append((batch.offsets, rows, batch.timestamps))
        return batch

    def commit(self, offsets: dict) -> None:
        """Everything up to ``offsets`` ({(topic, partition): next offset}) was applied: the
        trace and freshness are written here, the commit is handed to the consumer thread."""
        self.commit_many([offsets])

    def commit_many(self, batches: list) -> None:
        """``commit`` of several batches' offsets, oldest first (those one flush of a store that
        writes back made durable), handed to the consumer thread as one piece of work: it runs
        work between polls, and an idle poll lasts ``IDLE_POLL_S``, so a hand-over per batch
        would commit two batches a second on a caught-up stream."""
        if not batches:
            return
        # at most one commit handed over and not yet run: the previous one is run before these
        # batches are traced, so the batches traced and not committed are at most COMMIT_EVERY,
        # or one flush's (what a kill makes the next owner train again), as without a thread
        t0 = time.perf_counter()
        self.handoff.result(self._commit_token)
        self.commit_waited_s += time.perf_counter() - t0
        self._commit_token = None
        for offsets in batches:
            entry = None
            while self._inflight:
                e = self._inflight.popleft()
                if e[0] is offsets:
                    entry = e
                    break                   # older entries were never committed (cut batches)
            if entry is not None:
                if self.trace is not None and entry[1] is not None:
                    self.trace.write(entry[1])
                self.health.applied(entry[2])
        self._commit_token = self.handoff.submit(lambda: self.committer.applied(*batches))

    def committed_offsets(self) -> dict:
        """{(topic, partition): offset} this trainer committed (what is due is sent first)."""
        def flushed():
            self.committer.flush()
            return dict(self.offsets.committed)
        return self.handoff.call(flushed, wait=True)

    def seek(self, offsets: dict) -> bool:
        """Resume from ``offsets`` ({(topic, partition): offset}, e.g. a checkpoint's).

        Queued and handed-out, uncommitted batches are dropped (they will be read again); owned
        partitions missing from ``offsets`` go back to what this trainer last committed.
        Partitions not owned now are sought when they are assigned."""
        self._inflight.clear()
        self.handoff.call(lambda: self.loop.seek(offsets), wait=True)
        return True

    def _settle_in_listener(self) -> None:
        """The rebalance listener's settle: where the listener runs on the consumer thread
        (kafka-python 2, inside ``poll``) or with no consumer thread (a test), as ``settle``;
        kafka-python 3 runs it on its IO thread, which must not block on the network: there the
        consumer thread settled before its poll (``ConsumerLoop._before_poll``)."""
        thread = self.handoff.consumer_thread
        if thread is None or not thread.is_alive() or thread is threading.current_thread():
            self.settle()

    def settle(self) -> None:
        """Before a revocation (on the consumer thread): the training thread commits everything
        trained (bounded wait), then every due commit is sent."""
        limit = SETTLE_SHARE * self.loop.keep_alive_s * 4 or 5.0
        if not self.handoff.settle(limit, self.loop.stopped):
            if self.handoff.trainer_active:
                log.warning("kafka reader: the trainer did not settle within %.1f s before a revocation; "
                            "its uncommitted batches will be trained again by the next owner", limit)
        self.committer.flush()

    def request_stop(self) -> None:
        """End ``batches()`` at the next safe point (handed-over, untrained batches are abandoned);
        thread-safe."""
        self.stop_requested = True
        self.handoff.wake()

    def close(self) -> None:
        gen, self._gen = self._gen, None
        try:
            if gen is not None:
                gen.close()
        finally:
            try:
                thread = self.handoff.consumer_thread
                self.loop.closing = True
                if thread is not None and thread.is_alive():
                    self.handoff.wake()
                    thread.join()
                else:
                    self.loop.shutdown()
            finally:
                if self.trace is not None:
                    self.trace.close()
                    self.trace = None
