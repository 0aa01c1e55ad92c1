"""Segments → one parsed ``Batch``, and where each of its lines came from.

The segments' buffers are parsed as one chunk. A chunk whose every line the format's compiled
pass takes (``Parser.parse_compiled``: nothing to mark, one row a line) is parsed there,
without the GIL, straight from the segments joined once with zero padding after them; any
other goes through a ``Chunk`` (its line ends, UTF-8 check, the reasons of its bad lines) and
the vectorised ``parse_chunk``, which marks and counts the bad lines. ``Parsed`` keeps, for the
good rows and for the bad lines, the message each came from (topic, partition, offset,
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

PAD = bytes(16)         # after the joined lines: the compiled pass reads words past a token's end


class Parsed:
    """A parsed batch and the sources of its lines (its offsets, stamped with their epochs, are
    set by the reader: ``ConsumerLoop.hand_over``). ``chunk`` is None when the compiled pass
    took every line (no line is bad or blank: row ``i`` is line ``i``)."""

    def __init__(self, parser, segs: list[Segment]):
        self._topics = sorted({s.topic for s in segs})
        counts = [len(s) for s in segs]                 # (one numpy call each, not one per segment)
        self._msg_topic = np.repeat([self._topics.index(s.topic) for s in segs], counts)
        self._msg_part = np.repeat([s.partition for s in segs], counts)
        self._msg_off = np.concatenate([s.offsets for s in segs])
        self._msg_ts = np.concatenate([s.ts for s in segs])
        self.chunk = None
        lines = sum(s.n_lines for s in segs)
        buf = b"".join([*(s.buf for s in segs), PAD])   # one copy, padded: parsed in place
        end = len(buf) - len(PAD)
        fast = parser.parse_compiled(buf, 0, end, lines) if end else None
        if fast is not None and fast.size == lines:
            self.batch = fast
            self._ends = None
            # (``Segment.lines`` is cumulative within its segment: the differences, per message)
            self._line_counts = np.concatenate([np.diff(s.lines, prepend=0) for s in segs])
            return
        self._ends = joined([(s.buf, s.ends) for s in segs])[1]     # message ends in the chunk
        self.chunk = chunk = Chunk(buf[:end])
        self.batch = parser.parse_chunk(chunk)

    @property
    def has_bad(self) -> bool:
        """Some line is bad (to count and dead-letter)."""
        return self.chunk is not None and bool(self.chunk.reason.any())

    def _messages(self, lines: np.ndarray) -> np.ndarray:
        return np.searchsorted(self._ends, self.chunk.line_end[lines])

    def rows(self, want_sources: bool):
        """Set the batch's event timestamps; (topics, partitions, offsets) of its rows when
        ``want_sources`` (None otherwise, or when the parser kept lines differently)."""
        chunk = self.chunk
        if chunk is None:                       # row i is line i: each message's lines in turn
            m = np.repeat(np.arange(len(self._msg_ts)), self._line_counts)
        else:
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
        if self.chunk is None:
            return
        chunk = self.chunk
        bad = np.flatnonzero(chunk.reason)
        m = self._messages(bad)
        for i, j in zip(bad.tolist(), m.tolist(), strict=True):
            yield (chunk.line(i), NAMES[int(chunk.reason[i])],
                   (self._topics[self._msg_topic[j]], int(self._msg_part[j]), int(self._msg_off[j])))
