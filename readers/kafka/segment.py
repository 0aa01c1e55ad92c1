"""``Segment``: consecutive messages of one partition, their values joined as one line buffer.

What the Kafka reader queues, cuts into batches and parses: per partition, the message values
joined with ``\n``, their offsets and their timestamps. The fast path (``fastpath.py``) builds
them from whole record batches; ``Segment.from_records`` builds them from kafka-python's
``ConsumerRecord``s (the normal path).
"""
from __future__ import annotations

import numpy as np


class Segment:
    """Consecutive messages of one partition: values joined as ``\\n``-terminated text.

    ``ends[i]`` is the index in ``buf`` of the ``\\n`` that closes message ``i``; a message may
    itself hold several lines. ``offsets`` are the messages' Kafka offsets, ``ts`` their
    timestamps in seconds. ``buf`` is bytes, or a memoryview of bytes (the fast path's decode,
    not copied again).
    """

    __slots__ = ("topic", "partition", "buf", "ends", "offsets", "ts", "next_offset", "arrived",
                 "epoch", "_lines")

    def __init__(self, topic, partition, buf, ends, offsets, ts, next_offset=None):
        self.topic, self.partition = topic, partition
        self.buf = buf
        self.ends = ends
        self.offsets = offsets
        self.ts = ts
        # the offset to commit once every message here is applied (a compacted or control
        # batch can make it larger than offsets[-1] + 1)
        self.next_offset = int(offsets[-1]) + 1 if next_offset is None else next_offset
        self.arrived = 0.0                # monotonic time the reader got it (batch deadlines)
        self.epoch = 0                    # its partition's epoch when fetched (offsets.py)
        self._lines = None

    # kafka-python's fetcher reads ``record.offset`` of what it hands out
    @property
    def offset(self) -> int:
        return int(self.offsets[0])

    def __len__(self) -> int:
        return len(self.offsets)

    @property
    def lines(self) -> np.ndarray:
        """Cumulative line count after each message (a blank line counts)."""
        if self._lines is None:
            nl = np.count_nonzero(np.frombuffer(self.buf, np.uint8) == 10)
            if nl == len(self.ends):
                self._lines = np.arange(1, nl + 1, dtype=np.int64)
            else:
                pos = np.flatnonzero(np.frombuffer(self.buf, np.uint8) == 10)
                self._lines = np.searchsorted(pos, self.ends, side="right").astype(np.int64)
        return self._lines

    @property
    def n_lines(self) -> int:
        return int(self.lines[-1]) if len(self.ends) else 0

    def split(self, k: int) -> tuple["Segment", "Segment"]:
        """The first ``k`` messages and the rest."""
        cut = int(self.ends[k - 1]) + 1
        head = Segment(self.topic, self.partition, self.buf[:cut], self.ends[:k],
                       self.offsets[:k], self.ts[:k])
        tail = Segment(self.topic, self.partition, self.buf[cut:], self.ends[k:] - cut,
                       self.offsets[k:], self.ts[k:], self.next_offset)
        head.arrived = tail.arrived = self.arrived
        head.epoch = tail.epoch = self.epoch
        if self._lines is not None:
            head._lines = self._lines[:k]
            tail._lines = self._lines[k:] - self._lines[k - 1]
        return head, tail

    @classmethod
    def from_values(cls, topic, partition, values, offsets, ts_ms, next_offset=None) -> "Segment":
        """Build from message values (bytes or None: a null value becomes an empty line)."""
        values = [b"" if v is None else v for v in values]
        buf = b"\n".join(values) + b"\n"
        lengths = np.fromiter((len(v) + 1 for v in values), dtype=np.int64, count=len(values))
        ends = np.cumsum(lengths) - 1
        return cls(topic, partition, buf, ends, np.asarray(offsets, dtype=np.int64),
                   np.asarray(ts_ms, dtype=np.float64) / 1000.0, next_offset)

    @classmethod
    def from_records(cls, records) -> "Segment":
        """From kafka-python ``ConsumerRecord``s of one partition (the slow path)."""
        r0 = records[0]
        return cls.from_values(r0.topic, r0.partition, [r.value for r in records],
                               [r.offset for r in records], [r.timestamp for r in records])


def segments_of(items: list):
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
