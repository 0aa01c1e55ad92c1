"""Segments → one parsed ``Batch``, and where each of its lines came from.

The segments' buffers are parsed as one chunk in one vectorised call. ``Parsed`` keeps, for
the good rows and for the bad lines, the message each came from (topic, partition, offset,
timestamp): rows get their event timestamps (freshness) and, when tracing, their source;
bad lines go to the dead-letter topic with their source.
"""
from __future__ import annotations

import logging

import numpy as np

from .segment import Segment
from ..line_ends import joined
from ..lines import NAMES, Chunk

log = logging.getLogger("streamtrain.kafka")


class Parsed:
    """A parsed batch and the sources of its lines (its offsets, stamped with their epochs, are
    set by the reader: ``ConsumerLoop.hand_over``)."""

    def __init__(self, parser, segs: list[Segment]):
        buf, self._ends = joined([(s.buf, s.ends) for s in segs])     # message ends in ``buf``
        if not isinstance(buf, bytes):          # one segment, decoded into a memoryview
            buf = bytes(buf)
        self.chunk = chunk = Chunk(buf)
        self.batch = parser.parse_chunk(chunk)
        self._topics = sorted({s.topic for s in segs})
        counts = [len(s) for s in segs]                 # (one numpy call each, not one per segment)
        self._msg_topic = np.repeat([self._topics.index(s.topic) for s in segs], counts)
        self._msg_part = np.repeat([s.partition for s in segs], counts)
        self._msg_off = np.concatenate([s.offsets for s in segs])
        self._msg_ts = np.concatenate([s.ts for s in segs])

    def _messages(self, lines: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._ends, self.chunk.line_end[lines])

    def rows(self, want_sources: bool):
        """Set the batch's event timestamps; (topics, partitions, offsets) of its rows when
        ``want_sources`` (None otherwise, or when the parser kept lines differently)."""
        chunk = self.chunk
        kept = np.flatnonzero((chunk.reason == 0) & ~chunk.blank)
        if len(kept) != self.batch.size:
            log.warning("kafka reader: %d good lines but %d rows parsed; no timestamps for this "
                        "batch", len(kept), self.batch.size)
            return None
        m = self._messages(kept)
        self.batch.timestamps = self._msg_ts[m]
        if not want_sources:
            return None
        return np.array(self._topics)[self._msg_topic[m]], self._msg_part[m], self._msg_off[m]

    def bad_lines(self):
        """(line bytes, reason name, (topic, partition, offset)) of every bad line."""
        chunk = self.chunk
        bad = np.flatnonzero(chunk.reason)
        m = self._messages(bad)
        for i, j in zip(bad.tolist(), m.tolist()):
            yield (chunk.line(i), NAMES[int(chunk.reason[i])],
                   (self._topics[self._msg_topic[j]], int(self._msg_part[j]), int(self._msg_off[j])))
