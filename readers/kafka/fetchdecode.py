"""A partition's records of one fetch response, every v2 record batch in it decoded at once.

A fetch response holds, per partition, a run of record batches: at one line per message a
producer that lingers a few milliseconds writes batches of tens of records, so a 16 MiB fetch
is thousands of them. Decoding them one by one (``fastpath.segment_of_batch``) costs a dozen
Python calls and objects per batch, most of the consumer thread's time at one line per message.
Here two compiled passes read the whole run:

* ``batch_table(buf)``: the headers of the leading batches this decode reads (uncompressed
  magic 2; a compressed or legacy batch, or the partial batch a fetch may end with, stops it),
  one row each (``COLUMNS``), and where it stopped: the caller hands the rest to the library;
* ``decode_batches(buf, table, min_offset)``: the records of those batches whose offset is at
  least ``min_offset`` (control batches skipped), their values joined as ``value\\n`` lines
  into one buffer, with absolute offsets and timestamps (``LOG_APPEND_TIME`` batches: the
  broker's time for all).

The caller checks each batch's CRC-32C (``crc_spans``) between the two, so a corrupt batch is
refused before any of its records are handed out. Both raise ``ValueError`` when the bytes do
not add up; the fast path then falls back to the library's own decoder.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit

from ..chunk import _HIGH, _ONES, load_word, store_word
from .decode import record_at

HEADER = 61                    # a v2 batch's header, up to its first record
COLUMNS = ("start", "end", "base_offset", "last_offset_delta", "first_ts", "max_ts",
           "attributes", "count", "leader_epoch", "crc")
START, END, BASE, LAST_DELTA, FIRST_TS, MAX_TS, ATTRS, COUNT, EPOCH, CRC = range(len(COLUMNS))
COMPRESSION, LOG_APPEND_TIME, CONTROL = 0x07, 0x08, 0x20      # attribute bits


@njit(nogil=True)
def _be(a, pos, size):
    """The big-endian signed integer of ``size`` bytes at ``pos``."""
    v = np.int64(0)
    for i in range(size):
        v = (v << np.int64(8)) | np.int64(a[pos + i])
    if size < 8 and v >= (np.int64(1) << np.int64(8 * size - 1)):
        v -= np.int64(1) << np.int64(8 * size)
    return v


@njit(nogil=True)
def _batch_table(a):
    n = len(a)
    rows = np.empty((max(1, n // HEADER), len(COLUMNS)), np.int64)
    k, pos = 0, 0
    while pos + 12 <= n:
        end = pos + 12 + _be(a, pos + 8, 4)
        if end > n or end < pos + HEADER or a[pos + 16] != 2:
            break                                   # partial, too short or not v2: the library's
        attrs = _be(a, pos + 21, 2)
        if attrs & COMPRESSION:
            break
        count = _be(a, pos + 57, 4)
        if count < 0 or count > end - pos - HEADER:
            raise ValueError("a record batch's record count does not fit its length")
        r = rows[k]
        r[START], r[END], r[BASE] = pos, end, _be(a, pos, 8)
        r[LAST_DELTA], r[FIRST_TS], r[MAX_TS] = _be(a, pos + 23, 4), _be(a, pos + 27, 8), _be(a, pos + 35, 8)
        r[ATTRS], r[COUNT], r[EPOCH] = attrs, count, _be(a, pos + 12, 4)
        r[CRC] = _be(a, pos + 17, 4) & np.int64(0xFFFFFFFF)
        k += 1
        pos = end
    return rows[:k], pos


@njit(nogil=True)
def _records(a, table, min_offset):
    """Pass one: every data record's (offset, timestamp, value start, value length), kept or
    not."""
    total = 0
    for b in range(len(table)):
        if not table[b, ATTRS] & CONTROL:
            total += table[b, COUNT]
    fields = np.empty((total, 4), np.int64)
    i, kept, size = 0, 0, 0
    for b in range(len(table)):
        if table[b, ATTRS] & CONTROL:
            continue
        pos, stop = table[b, START] + HEADER, table[b, END]
        append_time = table[b, ATTRS] & LOG_APPEND_TIME
        for _ in range(table[b, COUNT]):
            t, o, p, v, end = record_at(a, pos, stop)
            f = fields[i]
            f[0] = table[b, BASE] + o
            f[1] = table[b, MAX_TS] if append_time else table[b, FIRST_TS] + t
            f[2], f[3] = p, v                         # a null value: an empty line
            if f[0] >= min_offset:
                kept += 1
                size += f[3] + 1
            i += 1
            pos = end
        if pos != stop:
            raise ValueError("record batch body has bytes left over")
    return fields, kept, size


_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_NEWLINES = np.uint64(0x0A0A0A0A0A0A0A0A)


@njit(nogil=True, inline="always")
def _copy_counting(out, w, a, s, m):
    """``out[w:w + m] = a[s:s + m]``, eight bytes a step, and the ``\\n`` count of those bytes:
    one pass where a copy and a count were two (the bytes come from the IO thread's socket read,
    not yet in this core's cache). A byte of ``x ^ 0x0A..`` is zero exactly where ``x`` holds a
    ``\\n``; ``((y & 0x7F..) + 0x7F..) | y`` sets the top bit of every byte that is not (no carry
    crosses a byte), and a multiply sums the top bits left. ``out`` may be ``a`` with ``w <= s``:
    each word is read before the store that could reach it."""
    n = np.uint64(0)
    k = 0
    while k + 8 <= m:
        x = load_word(a, s + k)
        store_word(out, w + k, x)
        y = x ^ _NEWLINES
        n += (((~(((y & _LOW7) + _LOW7) | y) & _HIGH) >> np.uint64(7)) * _ONES) >> np.uint64(56)
        k += 8
    count = np.int64(n)
    for i in range(k, m):
        c = a[s + i]
        out[w + i] = c
        count += c == 10
    return count


@njit(nogil=True)
def _join(a, fields, min_offset, out, at):
    """Pass two: the kept records' values copied into ``out`` from ``at`` on as ``value\\n``
    lines; their offsets, timestamps, ``\\n`` positions (from ``at``) and cumulative line
    counts. ``out`` may be ``a`` itself (in place: each value moves left, never past the next
    one, since a record's header and the batch's are longer than the ``\\n`` it gains)."""
    kept = 0
    for i in range(len(fields)):
        kept += fields[i, 0] >= min_offset
    ends = np.empty(kept, np.int64)
    offs = np.empty(kept, np.int64)
    ts = np.empty(kept, np.int64)
    lines = np.empty(kept, np.int64)
    j, w, n = 0, at, 0
    for i in range(len(fields)):
        if fields[i, 0] < min_offset:
            continue
        m = fields[i, 3]
        n += _copy_counting(out, w, a, fields[i, 2], m) + 1
        w += m
        out[w] = 10                                    # '\n'
        ends[j], offs[j], ts[j], lines[j] = w - at, fields[i, 0], fields[i, 1], n
        w += 1
        j += 1
    return offs, ts, ends, lines


def batch_table(buf):
    """(one row of ``COLUMNS`` per leading v2 uncompressed batch of ``buf``, where they end)."""
    table, stop = _batch_table(np.frombuffer(buf, dtype=np.uint8))
    return table, int(stop)


def crc_spans(table):
    """Per batch: (first byte its CRC covers, end, the CRC it holds)."""
    return zip((table[:, START] + 21).tolist(), table[:, END].tolist(), table[:, CRC].tolist())


def decode_batches(buf, table, min_offset: int, in_place: bool = False):
    """The records of ``table``'s batches at offsets ≥ ``min_offset``: (offsets, timestamps in
    ms, their values joined as ``value\\n`` lines (a memoryview), each record's closing ``\\n``
    position, the cumulative line count after each record (``Segment.lines``)).

    ``in_place`` (``buf`` writable): the lines are written over the batches' own bytes (no
    fresh buffer to fault in; ``buf`` no longer holds those batches afterwards)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    fields, kept, size = _records(a, table, int(min_offset))
    if in_place and a.flags.writeable and len(table):
        at = int(table[0, START])
        offs, ts, ends, lines = _join(a, fields, int(min_offset), a, at)
        return offs, ts, memoryview(a[at:at + size]), ends, lines
    out = np.empty(size, np.uint8)          # numpy's allocation: numba's faults its pages in slower
    offs, ts, ends, lines = _join(a, fields, int(min_offset), out, 0)
    return offs, ts, memoryview(out), ends, lines
