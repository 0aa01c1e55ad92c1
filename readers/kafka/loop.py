"""``ConsumerLoop``: the Kafka reader's consumer thread — poll, decode, cut, hand over.

The only thread that uses the kafka-python consumer (beside kafka-python's own IO thread). Each
turn: (1) the work the training thread handed back runs (``Handoff.call``: commits after
updates, seeks); due offsets are sent every ``COMMIT_EVERY`` batches and before every poll, and
when the group is about to rebalance the training thread settles first; (2) a full batch queued
(``batch_size`` lines), or one whose deadline passed (``max_wait_ms`` after its first line), is
cut at a message boundary and handed over while there is room (``Handoff.ahead`` batches wait
at most: a slow model holds the fetching back); a parse worker parses (``batching.py``) and
prepares it (the job's ``prepare``) while this thread polls on; (3) otherwise ``poll`` fetches
more, its timeout ending at the open batch's deadline or after ``IDLE_POLL_S`` (a quiet stream
blocks in ``poll``, it never spins); fetched messages queue up as ``Segment``s (``pending.py``;
one per record batch and partition on the fast path, ``fastpath.py``); (4) while no batch can be
handed over, a poll that fetches nothing (every partition paused) is made once a quarter of
``max_poll_interval_ms`` passed since the last one (``keep_alive``: a slow model keeps its group
membership); (5) at the end of the stream (``stop_at_end`` / ``idle_timeout_s``) what is queued
is handed over, then ``END``; the thread then runs handed-back work (the commits of what the
trainer still trains), polling to keep alive as in (4), until the reader closes. Rebalance
callbacks run inside ``poll`` (``rebalance.py``; on kafka-python 3's IO thread)."""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from kafka import TopicPartition
from kafka.errors import CorruptRecordError, KafkaError, UnsupportedCodecError

from streamtrain.backoff import STOPPED, Backoff
from streamtrain.errors import ReaderError

from . import codecs
from .batching import Parsed
from .clients import consumer_settings, patient, producer_settings, quiet_library_logs
from .connect import connect, coordinator_known
from .deadletter import DeadLetter
from .fastpath import FastPath
from .handoff import END
from .logend import check_log_ends
from .oversize import OversizeSearch, refused_frame, skip_too_large
from .pending import Pending
from .rejoin import apply_lost_join
from .segment import segments_of

log = logging.getLogger("streamtrain.kafka")

POLL_BACKOFF = Backoff(initial_s=0.1, max_s=5.0)     # a broker that does not answer a poll
IDLE_POLL_S = 0.5          # longest poll while nothing is pending (stop / end checks between)
HEALTH_EVERY_S = 0.5
KEEP_ALIVE_SHARE = 0.25    # poll again after this share of max_poll_interval_ms, backlog or not
ROOM_WAIT_S = 0.05         # longest sleep while the handed-over batches wait for the trainer


class Ready:
    """A batch handed over: its segments (queued again if dropped untrained) and the future of
    its parse: (``Parsed`` with ``batch.offsets`` set, the rows' sources or None)."""

    def __init__(self, segs: list, future):
        self.segs, self.future = segs, future


class ConsumerLoop:
    """The consumer thread's state and turn. ``source`` is the ``KafkaSource`` whose parts it
    uses: ``cfg``, ``batch_size``, ``parser``, ``prepare``, ``handoff``, ``offsets``,
    ``committer``, ``rebalance``, ``health``, ``count`` and ``trace`` (read, never its private
    fields)."""

    def __init__(self, source):
        self.src = source
        self.cfg, self.batch_size = source.cfg, source.batch_size
        self.max_wait = float(self.cfg["max_wait_ms"]) / 1000.0
        self.consumer = None
        self.fastpath = FastPath()
        self.oversize = None                # finds records too large to fetch (oversize.py)
        self.pending = Pending()
        self.fetched: dict = {}             # TopicPartition -> next offset this reader will see
        self.end: dict = {}                 # TopicPartition -> end offset when first assigned
        self.started = self.polled = time.monotonic()
        self.last_message = None
        self.next_health = 0.0
        self.keep_alive_s = 0.0             # set from max_poll_interval_ms when the consumer opens
        self.connected = False              # the last poll knew the group coordinator
        self.waiting = None                 # what the reader waits for at start-up (/healthz)
        self.ended = False
        self.closing = False
        self.worker = None                  # parses (and prepares) the batches handed over

    def stopped(self) -> bool:
        return self.closing or self.src.stop_requested

    # ---- the thread --------------------------------------------------------------------------
    def run(self) -> None:
        handoff = self.src.handoff
        try:
            consumer = self.consumer or self.open()
            if consumer is None:            # asked to stop before a broker answered
                handoff.put(END)
                return
            while not self.closing:
                handoff.run_work()
                self.src.committer.flush_if_late()
                if self.stopped() or self.ended:
                    self._stay_in_group(consumer)
                    handoff.wait(IDLE_POLL_S, unless=lambda: self.closing)     # (close: set, then wake)
                else:
                    self.turn(consumer)
        except BaseException as err:        # the training thread raises it from ``batches()``
            handoff.fail(err)
        finally:
            if self.closing:
                self.shutdown()

    def _stay_in_group(self, consumer) -> None:
        """After the end of the stream or a stop, the trainer still trains and commits what was
        handed over: keep-alive polls keep the group membership those commits need."""
        try:
            self.keep_alive(consumer)
        except Exception as err:            # the commits will say if it mattered
            log.warning("kafka reader: keep-alive poll after the end failed (%s)", err)

    def shutdown(self) -> None:
        """Close: the work handed back, every due commit, the failed ones once more, then the
        consumer (on this thread, or on the caller's when the thread never ran)."""
        try:
            if self.consumer is not None:
                try:
                    self.src.handoff.run_work()
                    self.src.committer.flush()
                    self.src.committer.retry()
                finally:
                    self.consumer.close(autocommit=False)
                    self.consumer = None
        finally:
            worker, self.worker = self.worker, None
            if worker is not None:
                worker.shutdown(wait=True, cancel_futures=True)
            dead, self.src.committer.dead = self.src.committer.dead, None
            if dead is not None:
                dead.close()

    def open(self):
        quiet_library_logs()
        settings = consumer_settings(self.cfg)
        fast = self.cfg["fast_decode"]
        per_poll = max(1, int(np.ceil(self.batch_size / max(1, self.cfg["lines_per_message"]))))
        settings.setdefault("max_poll_records", 1000 if fast else max(500, 2 * per_poll))
        make = self.src.consumer_class()
        for key, value in patient(make).items():     # kafka-python 2.2: 15 s, not 2 s, to bootstrap
            settings.setdefault(key, value)
        if "receive_message_max_bytes" in make.DEFAULT_CONFIG:
            # kafka-python 2.3-3.0 refuse a network frame over 1 MB by default: let a fetch through
            settings.setdefault("receive_message_max_bytes", settings["fetch_max_bytes"] + (1 << 20))
        if "metrics_enabled" in make.DEFAULT_CONFIG:    # its sensors, recorded on every read and
            settings.setdefault("metrics_enabled", False)   # fetch: streamtrain reads none of them
        self.keep_alive_s = KEEP_ALIVE_SHARE * settings["max_poll_interval_ms"] / 1000
        consumer = connect(lambda: make(**settings), self.cfg["bootstrap"], self.stopped, self._wait)
        if consumer is None:
            return None
        if fast:
            self.fastpath.install(consumer)
        self.oversize = OversizeSearch.install(consumer)
        consumer.subscribe(topics=self.cfg["topic"], listener=self.src.rebalance)
        self.consumer = self.src.committer.consumer = consumer
        if self.cfg["dead_letter"]:
            self.src.committer.dead = DeadLetter(self.cfg["dead_letter"], producer_settings(self.cfg))
        log.info("kafka reader: %s (fast decode: %s)", self.src.describe(), self.fastpath.active)
        return consumer

    def _wait(self, what: str | None) -> None:
        self.waiting = what

    # ---- one turn ----------------------------------------------------------------------------
    def turn(self, consumer) -> None:
        now = time.monotonic()
        pending = self.pending
        if pending.lines >= self.batch_size or (pending and now >= pending.first_arrived + self.max_wait):
            if self.src.handoff.room():
                self.hand_over(self.batch_size)
            elif not self.keep_alive(consumer):
                self.src.handoff.wait(ROOM_WAIT_S)
            return
        got = self.poll(consumer, self._poll_timeout_ms(now))
        now = self.polled = time.monotonic()
        self.connected = coordinator_known(consumer)
        if got:
            self.take(got, now)
        self._check_oversize(consumer)
        if now >= self.next_health:
            self.update_health()
            self.next_health = now + HEALTH_EVERY_S
        if self.at_end(now):
            self._drain_to_end(consumer)

    def _drain_to_end(self, consumer) -> None:
        handoff = self.src.handoff
        while self.pending and not self.stopped():
            if handoff.room():
                self.hand_over(self.batch_size)
            else:
                handoff.run_work()
                if not self.keep_alive(consumer):
                    handoff.wait(ROOM_WAIT_S)
        self.update_health()
        log.info("kafka reader: end of stream (%s)", "stop_at_end" if self.cfg["stop_at_end"] else "idle_timeout_s")
        self.ended = True
        handoff.put(END)

    def poll(self, consumer, timeout_ms: int) -> dict:
        """``consumer.poll``, waiting out an unreachable broker (kafka-python 3 raises a retriable
        error from ``poll`` when the broker goes away mid-rejoin) and a frame refused as too large
        (``oversize.py``; kafka-python 3 raises it, not retriable there, when an offset reset was in
        flight on the connection it dropped): retried with backoff (logged, counted in ``poll_errors``)
        until the broker answers or the reader is asked to stop (then ``{}``); others propagate."""
        self._before_poll(consumer)

        def failed(err, attempt, pause):
            self.connected = False
            self.src.count("poll_errors")
            (log.warning if attempt == 1 or attempt % 20 == 0 else log.debug)(
                "kafka reader: poll failed (%s, attempt %d); retrying in %.1f s", err, attempt, pause)

        try:
            got = POLL_BACKOFF.retry(lambda: consumer.poll(timeout_ms=timeout_ms, update_offsets=True),
                                     transient=lambda e: isinstance(e, KafkaError) and (e.retriable or refused_frame(e)),
                                     on_retry=failed, stopped=self.stopped)
        except UnsupportedCodecError as err:    # a batch compressed by a codec not installed here
            raise codecs.missing(err) from None
        except CorruptRecordError as err:       # a damaged batch in the log: no retry reads it
            raise ReaderError(f"kafka reader: {err.args[0] if err.args else err}: the topic's log holds a damaged "
                              "record batch; what was trained before it is committed. To go on past it, move the "
                              "group's offset beyond the batch (kafka-consumer-groups --reset-offsets), or read it "
                              "unchecked with reader.consumer.check_crcs=false") from None
        if apply_lost_join(consumer):       # (rejoin.py)
            self.src.count("lost_joins")
        return {} if got is STOPPED else got

    def _before_poll(self, consumer) -> None:
        """Nothing applied is left uncommitted when ``poll`` may revoke partitions: every due
        offset is sent, and when the group is about to rebalance the training thread settles
        first (here, where a blocking commit is allowed: kafka-python 3 runs the rebalance
        listener on its IO thread, which must not block on the network)."""
        try:
            rejoin = consumer._coordinator.need_rejoin()
        except Exception:                   # no group coordinator (a test's consumer), or another API
            rejoin = False
        if rejoin:
            self.src.settle()
        else:
            self.src.committer.flush()

    def _poll_timeout_ms(self, now: float) -> int:
        if not self.pending:
            return int(IDLE_POLL_S * 1000)
        left = self.pending.first_arrived + self.max_wait - now
        return max(0, int(np.ceil(left * 1000)))

    def keep_alive(self, consumer) -> bool:
        """Poll, fetching nothing, when the backlog has kept this thread from polling for a while
        (a slow model would otherwise outlive ``max_poll_interval_ms``, drop out of the group and
        fail its commits). A rebalance this poll brings is handled as at any poll. True if made."""
        if time.monotonic() - self.polled < self.keep_alive_s:
            return False
        owned, paused = consumer.assignment(), consumer.paused()
        consumer.pause(*owned)
        try:
            got = self.poll(consumer, 0)
        finally:                         # (partitions the oversize search paused stay paused)
            consumer.resume(*((owned - paused) & consumer.assignment()))
        self.polled = time.monotonic()
        self.src.count("keep_alive_polls")
        if got:                          # paused partitions return nothing; kept if one did
            self.take(got, self.polled)
        self._check_oversize(consumer)
        return True

    def take(self, got: dict, now: float) -> None:
        offsets = self.src.offsets
        for tp, items in got.items():
            if tp not in offsets.owned:
                continue
            key = (tp.topic, tp.partition)
            for seg in segments_of(items):
                seg.arrived = now
                self.pending.push(seg)
                before = offsets.position.get(key)
                took = offsets.took(key, seg.offset)
                if took == "start":
                    self.src.health.start(key, seg.offset)
                elif took == "reset":        # topic recreated or truncated: followed
                    log.warning("kafka reader: %s[%d] restarts at offset %d, below the applied offset "
                                "%d (topic recreated?); following it", tp.topic, tp.partition, seg.offset, before)
                    self.src.count("offset_resets")
                seg.epoch = offsets.epoch(key)
                self.fetched[tp] = seg.next_offset
                self.src.count("messages", len(seg))
                self.src.count("lines", seg.n_lines)
                if self.oversize is not None:
                    self.oversize.took(tp, len(seg.buf))
        self.last_message = now

    def hand_over(self, limit: int) -> None:
        """Cut a batch of what is queued and hand it to the training thread; its parse (and the
        job's prepare) runs in the parse worker meanwhile, while this thread polls on."""
        segs = self.pending.cut(limit)
        if not segs:
            return
        offsets = self.src.offsets.cut(((seg.topic, seg.partition), seg.epoch, seg.next_offset)
                                       for seg in segs)
        if self.worker is None:
            self.worker = ThreadPoolExecutor(1, thread_name_prefix="streamtrain-kafka-parse")
        self.src.handoff.put(Ready(segs, self.worker.submit(self._parse, segs, offsets)))

    def _parse(self, segs: list, offsets: dict):
        parsed = Parsed(self.src.parser, segs)
        parsed.batch.offsets = offsets
        rows = parsed.rows(want_sources=self.src.trace is not None)
        if parsed.batch.size:
            self.src.prepare(parsed.batch)
        return parsed, rows

    def _check_oversize(self, consumer) -> None:
        """Step the search for a record too large to fetch; skip it once found."""
        if self.oversize is None or not (self.oversize.active or self.oversize.events):
            return
        owned = {TopicPartition(*k) for k in self.src.offsets.owned}
        found = self.oversize.step(owned, self.fetched.get)
        if found is not None:
            skip_too_large(self, consumer, *found)

    # ---- what rebalances and seeks do to the queue ----------------------------------------------
    def abandon(self, pred) -> tuple[int, dict]:
        """Drop the queued messages (handed over but not taken, or not cut yet) of the partitions
        ``pred(topic, partition)`` selects: (how many, {key: first dropped offset})."""
        for entry in reversed(self.src.handoff.drop_ready()):
            entry.future.cancel()           # (a parse under way finishes; its result is unused)
            self.pending.put_back(entry.segs)
        dropped, first = self.pending.abandon(lambda seg: pred(seg.topic, seg.partition))
        for tp in [tp for tp in self.fetched if pred(tp.topic, tp.partition)]:
            del self.fetched[tp]
        self.src.count("abandoned_messages", dropped)
        return dropped, first

    def seek_consumer(self, tp, offset: int) -> None:
        self.consumer.seek(tp, offset)
        self.fetched[tp] = offset

    def seek(self, offsets: dict) -> None:
        """Resume from ``offsets`` (see ``KafkaSource.seek``); runs on this thread."""
        if self.consumer is None:
            self.src.offsets.seek_later.update({(str(k[0]), int(k[1])): int(v) for k, v in offsets.items()})
            return
        self.src.committer.flush()
        for entry in self.src.handoff.drop_ready(end_too=True):     # the stream goes on from there
            entry.future.cancel()
        self.ended = False
        self.pending.abandon(lambda seg: True)
        for key, target in self.src.offsets.seek(offsets).items():
            tp = TopicPartition(*key)
            if target is None:
                target = self.consumer.committed(tp)
            if target is None:
                (self.consumer.seek_to_beginning if self.cfg["auto_offset_reset"] == "earliest"
                 else self.consumer.seek_to_end)(tp)
                self.fetched.pop(tp, None)
            else:
                self.seek_consumer(tp, target)
            self.src.offsets.sought(key, target)
        log.info("kafka reader sought to %s", offsets)

    # ---- end of stream -------------------------------------------------------------------------
    def at_end(self, now: float) -> bool:
        idle = self.cfg["idle_timeout_s"]
        owned = [TopicPartition(*k) for k in self.src.offsets.owned]
        if idle and (owned or self.last_message is not None) and now - (self.last_message or self.started) >= idle:
            return True
        if not self.cfg["stop_at_end"] or not owned:
            return False
        for tp in owned:
            if tp not in self.end:
                # the high watermark of the first fetch response: ListOffsets(latest) is not
                # trustworthy on every broker (Tansu 0.6 answers with a batch's base offset)
                hw = self.consumer.highwater(tp)
                if hw is None:
                    return False
                self.end[tp] = hw
            pos = self.fetched.get(tp)
            if pos is None:
                pos = self.consumer.position(tp)
                if pos is None:
                    return False
                self.fetched[tp] = pos
                self.src.health.start((tp.topic, tp.partition), pos)
            if pos < self.end[tp]:
                return False
        return True

    def update_health(self) -> None:
        check_log_ends(self)
