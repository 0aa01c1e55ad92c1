"""Records too large to fetch: found, skipped, counted and dead-lettered by reference.

kafka-python refuses a network frame larger than ``receive_message_max_bytes`` (the reader
sets it to ``fetch_max_bytes`` + 1 MiB): "Invalid frame length", the connection is dropped, the
same offsets are fetched again and refused again, for ever (~110 ERROR lines a second). A
broker returns the first record batch of a fetch whatever its size (Kafka's KIP-74), and Tansu
also fills a fetch up to its limit with the batches after the first, so a record batch too
large for a frame wedged its partition, and the records fetched with it too.

``OversizeSearch`` watches one consumer's fetches through two instance-level hooks on its
fetcher (the requests it makes, per broker; the errors they fail with) and, when a fetch fails
on a frame that is too large, finds the record that made it so:

1. the partitions of the failed fetch are suspects, examined one at a time: every other owned
   partition is paused;
2. each time a fetch of the suspect alone fails again, the fetch sizes are cut 64 times, down to
   1 byte (one batch per fetch); the records before the large one keep coming and are trained;
3. a fetch of the suspect alone at 1 byte that still fails held one batch: the one at its fetch
   offset. That offset is handed to the reader (``found``), which skips it;
4. a suspect that delivers a fetch limit's worth of bytes, or reaches its end, without failing
   is cleared; when no suspect is left, or the record is found, fetch sizes and partitions are
   restored.

Guarded like the fast path: ``install`` returns None when this kafka-python's fetcher lacks a
hook it uses (a large record then wedges its partition, as before).
"""
from __future__ import annotations

import logging
import re
import time
from collections import deque

from ..malformed import TOO_LARGE
from .segment import Segment

log = logging.getLogger("streamtrain.kafka")

SHRINK = 64                     # fetch sizes are divided by this at each failure of the suspect
FRAME = re.compile(r"Invalid frame length: (-?\d+)")
HOOKS = ("_create_fetch_requests", "_handle_fetch_error", "config")


def refused_frame(exc) -> int | None:
    """The size of a frame kafka-python refused as too large, from the error of a fetch."""
    m = FRAME.search(str(exc))
    return int(m.group(1)) if m else None


class OversizeSearch:
    def __init__(self, consumer):
        self.consumer = consumer
        self.fetcher = consumer._fetcher
        cfg = self.fetcher.config
        self.normal = (cfg["max_partition_fetch_bytes"], cfg["fetch_max_bytes"])
        self.requests: dict = {}        # broker -> ({tp: fetch offset}, partition max bytes) of its fetch
        self.events: deque = deque()    # (frame bytes, {tp: fetch offset}, partition max bytes)
        self.suspects: list = []
        self.current = None             # the suspect being fetched alone
        self.limit = self.normal[0]
        self.window = 0                 # bytes the current suspect must deliver to be cleared
        self.delivered = 0
        self.refused = 0                # fetches refused as too large (each: one reconnect)

    @classmethod
    def install(cls, consumer) -> "OversizeSearch | None":
        fetcher = getattr(consumer, "_fetcher", None)
        if fetcher is None or not all(hasattr(fetcher, a) for a in HOOKS):
            log.debug("kafka reader: this kafka-python's fetcher has no %s: records too large to fetch "
                      "are not skipped", ", ".join(HOOKS))
            return None
        search = cls(consumer)
        create, failed = fetcher._create_fetch_requests, fetcher._handle_fetch_error

        def create_fetch_requests():              # kafka-python 3: on its I/O thread
            limit = fetcher.config["max_partition_fetch_bytes"]
            requests = create()
            if fetcher.config["max_partition_fetch_bytes"] != limit:
                limit = None                      # changed meanwhile: which one it used is unknown
            for node, (_, offsets) in requests.items():
                search.requests[node] = (dict(offsets), limit)
            return requests

        def handle_fetch_error(node_id, exception):
            size = refused_frame(exception)
            if size is not None and node_id in search.requests:
                search.events.append((size, *search.requests[node_id]))
            return failed(node_id, exception)

        fetcher._create_fetch_requests = create_fetch_requests
        fetcher._handle_fetch_error = handle_fetch_error
        return search

    @property
    def active(self) -> bool:
        return self.current is not None

    def took(self, tp, nbytes: int) -> None:
        """The reader got ``nbytes`` of records of ``tp``."""
        if tp == self.current:
            self.delivered += nbytes

    def step(self, owned: set, position) -> tuple | None:
        """After a poll: (tp, offset, frame bytes) of a record found too large to fetch, else
        None. ``owned``: the partitions assigned now; ``position(tp)``: the next offset the
        reader will see of ``tp`` (None when unknown)."""
        found = None
        while self.events and found is None:
            size, offsets, limit = self.events.popleft()
            self.refused += 1
            # (a fetch the reader has read past since: the record was skipped, or sought past)
            offsets = {tp: off for tp, off in offsets.items()
                       if tp in owned and (position(tp) is None or position(tp) <= off)}
            if not offsets:
                continue
            if self.current is None:
                self._start(size, offsets)
            elif set(offsets) == {self.current} and limit is not None and limit == self.limit:
                if limit <= 1:                     # one batch, and still too large: found
                    found = (self.current, offsets[self.current], size)
                    self._end()
                else:
                    self._set_limit(max(1, limit // SHRINK))
        if found is None and self.current is not None:
            self._advance(owned, position)
        if self.current is not None:
            self._isolate(owned)
        return found

    def _start(self, size: int, offsets: dict) -> None:
        log.info("kafka reader: a fetch of %s was refused as too large (%d bytes); looking for the record "
                 "that makes it so", sorted((tp.topic, tp.partition, off) for tp, off in offsets.items()), size)
        self.suspects = sorted(offsets)
        self.window = self.normal[0]
        self._next()

    def _next(self) -> None:
        self.current = self.suspects.pop(0) if self.suspects else None
        self.delivered = 0
        if self.current is None:
            self._end()
        else:
            self._set_limit(self.normal[0])

    def _advance(self, owned: set, position) -> None:
        """Clear the suspect once it delivered a fetch limit's worth, reached its end or left."""
        tp = self.current
        if tp not in owned or self.delivered >= self.window:
            self._next()
            return
        pos, high = position(tp), self.consumer.highwater(tp)
        if pos is not None and high is not None and pos >= high and self.delivered:
            self._next()

    def _isolate(self, owned: set) -> None:
        """Only the current suspect is fetched (it was paused as another's neighbour before)."""
        paused = self.consumer.paused()
        others = owned - {self.current} - paused
        if others:
            self.consumer.pause(*others)
        if self.current in paused:
            self.consumer.resume(self.current)

    def _set_limit(self, limit: int) -> None:
        self.limit = limit                        # (the partition limit last: it is what requests record)
        self.fetcher.config["fetch_max_bytes"] = min(self.normal[1], max(limit, 1))
        self.fetcher.config["max_partition_fetch_bytes"] = limit

    def _end(self) -> None:
        self.current, self.suspects, self.delivered = None, [], 0
        self._set_limit(self.normal[0])
        self.fetcher.config["fetch_max_bytes"] = self.normal[1]
        paused = self.consumer.paused()
        if paused:
            self.consumer.resume(*paused)


def skip_too_large(loop, consumer, tp, offset: int, size: int) -> None:
    """The reader's side of a record found too large (``loop``: its ``ConsumerLoop``): seek past
    it, queue a blank line in its place (so the commit that covers it comes after the records
    before it, as for a bad line), count it, dead-letter it by reference, and say so once."""
    consumer.seek(tp, offset + 1)
    now = time.time()
    loop.take({tp: [Segment.from_values(tp.topic, tp.partition, [b""], [offset], [now * 1000], offset + 1)]},
              time.monotonic())
    source, dead = loop.src, loop.src.committer.dead
    source.malformed.add(TOO_LARGE)
    source.count("too_large")
    where = (tp.topic, tp.partition, offset)
    if dead is not None:
        dead.send_reference(TOO_LARGE, where, size)
    log.warning("kafka reader: skipped the record at %s[%d] offset %d: fetched alone it is %d bytes, more than "
                "the consumer takes (receive_message_max_bytes %s); counted as malformed '%s'%s", tp.topic,
                tp.partition, offset, size, consumer.config.get("receive_message_max_bytes"), TOO_LARGE,
                f", dead-lettered by reference to {dead.topic}" if dead is not None else "")
