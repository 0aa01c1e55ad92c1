"""A chunk of input lines as one byte buffer, split into field spans without a per-line loop.

Parsers never loop over lines: a chunk is ``b"\\n".join(lines) + b"\\n"`` viewed as a uint8
array; separators are found with one vectorised comparison, and every field becomes a
(start, end) span into the buffer. Each line carries a reason code (0 = good so far); the
first problem found for a line wins. Python loops run only over lines that are already bad.
"""
from __future__ import annotations

import numpy as np

from . import malformed as mf
from .ids import byte_words

OK = 0
CODES = {mf.DECODE: 1, mf.FIELD_COUNT: 2, mf.NUMBER: 3, mf.LABEL: 4, mf.FIELD_LENGTH: 5}
NAMES = {v: k for k, v in CODES.items()}
NL, CR = 10, 13


class Chunk:
    """Lines joined in one buffer; ``reason[i]`` is line i's first problem code (0 = none)."""

    def __init__(self, buf: bytes, reason: np.ndarray | None = None, check_utf8: bool = True):
        if not buf.endswith(b"\n"):
            buf += b"\n"
        self.buf = buf
        self.padded = buf + bytes(16)
        self.arr = np.frombuffer(self.padded, dtype=np.uint8)[: len(buf)]
        self.words = byte_words(self.padded)
        self.line_end = np.flatnonzero(self.arr == NL)           # position of each line's '\n'
        n = len(self.line_end)
        self.line_start = np.empty(n, dtype=np.int64)
        self.line_start[:1] = 0
        self.line_start[1:] = self.line_end[:-1] + 1
        # tolerate '\r\n': the visible end of a line excludes a trailing '\r'
        ends = self.line_end
        cr = (ends > self.line_start) & (self.arr[np.maximum(ends - 1, 0)] == CR)
        self.text_end = ends - cr
        self.blank = self.text_end == self.line_start
        self.reason = np.zeros(n, dtype=np.uint8) if reason is None else reason
        self.written = self                 # the chunk whose lines a report quotes (``rewritten``)
        if check_utf8:
            self._check_utf8()

    def rewritten(self, buf: bytes) -> "Chunk":
        """The same lines, rewritten in ``buf`` (as many, in order: a CSV's quotes or a libsvm
        comment taken out): the two share ``reason``, so a line marked on one is marked on the
        other, and ``report`` quotes bad lines as this chunk holds them."""
        out = Chunk(buf, reason=self.reason, check_utf8=False)
        out.written = self.written
        return out

    @property
    def n(self) -> int:
        return len(self.line_end)

    @classmethod
    def from_lines(cls, lines) -> "Chunk":
        """Join raw lines (bytes or str, with or without '\\n'); lines that hide a '\\n' are bad."""
        try:
            buf = b"\n".join(lines) if not lines or isinstance(lines[0], bytes) else \
                "\n".join(lines).encode("utf-8")
        except (TypeError, UnicodeEncodeError):
            return cls._from_irregular_lines(lines)
        chunk = cls(buf + b"\n")
        if chunk.n == len(lines) or (not lines and chunk.n == 1):
            return chunk
        return cls._from_irregular_lines(lines)

    @classmethod
    def _from_irregular_lines(cls, lines) -> "Chunk":
        # the slow path: only reached when some line is a str with surrogates, mixed types,
        # or contains a newline; each such line is fixed up or marked on its own
        reason = np.zeros(len(lines), dtype=np.uint8)
        fixed = []
        for i, line in enumerate(lines):
            if isinstance(line, str):
                try:
                    line = line.encode("utf-8")
                except UnicodeEncodeError:
                    line, reason[i] = b"", CODES[mf.DECODE]
            line = bytes(line)
            if line.endswith(b"\n"):
                line = line[:-1]
            if b"\n" in line:
                line, reason[i] = b"", CODES[mf.FIELD_COUNT]
            fixed.append(line)
        return cls(b"\n".join(fixed) + b"\n", reason)

    def _check_utf8(self) -> None:
        try:
            self.buf.decode("utf-8")
            return
        except UnicodeDecodeError:
            pass
        high = np.flatnonzero(self.arr >= 0x80)
        for i in np.unique(np.searchsorted(self.line_end, high)):
            try:
                self.buf[self.line_start[i]: self.line_end[i]].decode("utf-8")
            except UnicodeDecodeError:
                self.mark(np.array([i]), mf.DECODE)

    def mark(self, lines: np.ndarray, reason: str) -> None:
        """Give ``reason`` to the given lines unless they already have one."""
        lines = np.asarray(lines, dtype=np.int64)
        if lines.size:
            cur = self.reason[lines]
            self.reason[lines] = np.where(cur == OK, CODES[reason], cur)

    def line(self, i: int) -> bytes:
        return self.buf[self.line_start[i]: self.text_end[i]]

    def good(self) -> np.ndarray:
        """Indices of the lines that are neither bad nor blank."""
        return np.flatnonzero((self.reason == OK) & ~self.blank)

    def report(self, malformed) -> None:
        """Count every bad line (blank lines are not examples and are not counted)."""
        bad = np.flatnonzero(self.reason)
        if not bad.size or malformed is None:
            return
        if malformed.on_bad is None:
            codes, counts = np.unique(self.reason[bad], return_counts=True)
            for c, k in zip(codes, counts):
                malformed.add(NAMES[int(c)], int(k))
        else:
            for i in bad:
                malformed.report(self.written.line(i), NAMES[int(self.reason[i])])


class Spans:
    """Fields of every line: ``start``/``end`` byte positions; ``count`` fields per line."""

    def __init__(self, start, end, count):
        self.start, self.end, self.count = start, end, count
        self._line = None

    @property
    def line(self) -> np.ndarray:
        """The line each field belongs to (computed on first use)."""
        if self._line is None:
            self._line = np.repeat(np.arange(len(self.count)), self.count)
        return self._line

    @property
    def length(self) -> np.ndarray:
        return self.end - self.start


def split(chunk: Chunk, delimiters: bytes, drop_empty: bool = False, max_length: int = 0) -> Spans:
    """Split every line of the chunk at any byte of ``delimiters``.

    A field longer than ``max_length`` bytes (0 = no limit) marks its line ``field_length`` and
    reads as empty, so nothing downstream spends time on it.
    """
    arr = chunk.arr
    is_sep = arr == NL
    for d in delimiters:
        np.bitwise_or(is_sep, arr == d, out=is_sep)
    seps = np.flatnonzero(is_sep)
    last = np.flatnonzero(arr[seps] == NL)          # index of each line's last field
    start = np.empty_like(seps)
    start[:1] = 0
    start[1:] = seps[:-1] + 1
    end = seps
    end[last] = chunk.text_end                       # a trailing '\r' is not part of the field
    count = np.diff(last, prepend=-1)
    if max_length:
        too_long = np.flatnonzero(end - start > max_length)
        if too_long.size:
            chunk.mark(np.searchsorted(chunk.line_end, start[too_long]), mf.FIELD_LENGTH)
            end[too_long] = start[too_long]
    if drop_empty:
        keep = end > start
        if not keep.all():
            count = np.diff(np.concatenate([[0], np.cumsum(keep)[last]]))
            start, end = start[keep], end[keep]
    return Spans(start, end, count)


def fixed_fields(chunk: Chunk, spans: Spans, k: int):
    """Check every line has exactly ``k`` fields; return (rows, start[R, k], end[R, k]).

    Lines with another count are marked ``field_count``; ``rows`` are the chunk lines kept.
    """
    bad = (spans.count != k) & ~chunk.blank
    if bad.any():
        chunk.mark(np.flatnonzero(bad), mf.FIELD_COUNT)
    rows = chunk.good()
    if len(rows) == chunk.n and len(spans.start) == k * chunk.n:
        return rows, spans.start.reshape(-1, k), spans.end.reshape(-1, k)
    keep = np.zeros(chunk.n, dtype=bool)
    keep[rows] = True
    sel = keep[spans.line]
    return rows, spans.start[sel].reshape(-1, k), spans.end[sel].reshape(-1, k)
