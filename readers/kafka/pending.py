"""Fetched messages waiting to be cut into a batch: a queue of ``Segment``s, oldest first.

A batch is cut at a message boundary with at most ``limit`` lines (at least one message, so a
message longer than a batch still goes out whole); a segment is split when the limit falls
inside it. On a rebalance the segments of revoked partitions are abandoned, and the reader
remembers the first abandoned offset of each partition to read it again from there.
"""
from __future__ import annotations

from collections import deque

import numpy as np

from .segment import Segment


class Pending:
    """The queue and its line count (the caller holds its lock around every call)."""

    def __init__(self):
        self.segments: deque[Segment] = deque()
        self.lines = 0

    def __bool__(self) -> bool:
        return bool(self.segments)

    @property
    def first_arrived(self) -> float:
        return self.segments[0].arrived

    def push(self, seg: Segment) -> None:
        self.segments.append(seg)
        self.lines += seg.n_lines

    def cut(self, limit: int) -> list[Segment]:
        """Take queued segments holding at most ``limit`` lines (at least one message)."""
        take, lines = [], 0
        while self.segments and lines < limit:
            seg = self.segments[0]
            n = seg.n_lines
            if lines + n > limit:
                k = int(np.searchsorted(seg.lines, limit - lines, side="right"))
                if k == 0 and take:
                    break
                k = max(k, 1)
                if k < len(seg):
                    head, tail = seg.split(k)
                    self.segments[0] = tail
                    self.lines -= head.n_lines
                    take.append(head)
                    break
            self.segments.popleft()
            self.lines -= n
            take.append(seg)
            lines += n
        return take

    def put_back(self, segs: list[Segment]) -> None:
        """Segments ``cut`` took, queued again in front, in their order (a batch that was cut
        but not trained)."""
        for seg in reversed(segs):
            self.segments.appendleft(seg)
            self.lines += seg.n_lines

    def abandon(self, pred) -> tuple[int, dict]:
        """Drop the segments ``pred`` selects: (messages dropped, {(topic, partition): first
        dropped offset})."""
        kept, dropped, first = deque(), 0, {}
        for seg in self.segments:
            if pred(seg):
                dropped += len(seg)
                self.lines -= seg.n_lines
                key = (seg.topic, seg.partition)
                first[key] = min(first.get(key, seg.offset), seg.offset)
            else:
                kept.append(seg)
        self.segments = kept
        return dropped, first
