"""Kafka v2 record-batch bodies decoded from bytes: a per-record loop and a vectorised one.

Pure functions of a buffer (no kafka-python inside): ``decode_v2`` walks the records one by
one; ``decode_v2_columns`` follows only the record lengths in Python and decodes every field
of all records at once with numpy. Both raise ``ValueError``/``IndexError`` when the bytes do
not add up.

``decode_v2_joined`` is the compiled one the fast path uses: one pass over the body that also
joins the values into the segment's line buffer.

Both Python loops inline the one- and two-byte case of the record-length varint (the same six lines,
on purpose: a function call per record is most of the cost of these loops); longer varints go
through ``_varint``.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit


def _varint(buf, pos):
    """A zigzag varint at ``pos``: (value, next position)."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    raw, shift = b & 0x7F, 7
    while True:
        pos += 1
        b = buf[pos]
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), pos + 1
        shift += 7


def decode_v2(buf, pos: int, count: int):
    """The records of an (uncompressed) v2 batch body: (offset deltas, ts deltas, values).

    Headers are skipped. One- and two-byte varints are inlined (this loop is the consumer's hot
    path); longer varints go through ``_varint``. Raises ``ValueError``/``IndexError`` when the
    bytes do not add up.
    """
    offs, tsd, vals = [0] * count, [0] * count, [None] * count
    varint = _varint
    for i in range(count):
        b = buf[pos]
        if b < 0x80:
            length, pos = b >> 1, pos + 1
        elif buf[pos + 1] < 0x80:
            length, pos = ((b & 0x7F) | (buf[pos + 1] << 7)) >> 1, pos + 2
        else:
            length, pos = varint(buf, pos)
        end = pos + length
        b = buf[pos + 1]                           # pos: attributes (int8); then ts delta
        if b < 0x80:
            ts, pos = (b >> 1) ^ -(b & 1), pos + 2
        else:
            ts, pos = varint(buf, pos + 1)
        b = buf[pos]
        if b < 0x80:
            off, pos = b >> 1, pos + 1
        else:
            off, pos = varint(buf, pos)
        b = buf[pos]
        if b == 1:                                 # null key
            pos += 1
        else:
            klen, pos = varint(buf, pos)
            if klen > 0:
                pos += klen
        b = buf[pos]
        if b < 0x80:
            vlen, pos = (b >> 1) ^ -(b & 1), pos + 1
        elif buf[pos + 1] < 0x80:
            vlen, pos = ((b & 0x7F) | (buf[pos + 1] << 7)) >> 1, pos + 2
        else:
            vlen, pos = varint(buf, pos)
        if vlen >= 0:
            vals[i] = buf[pos: pos + vlen]
        offs[i] = off
        tsd[i] = ts
        pos = end
    if pos != len(buf):
        raise ValueError(f"record batch body has {len(buf) - pos} bytes left over")
    return offs, tsd, vals


_U7, _X7F, _ONE = np.uint64(7), np.uint64(0x7F), np.uint64(1)


def _varints(a, pos, last: int):
    """The zigzag varints starting at each of ``pos`` in the uint8 array ``a``:
    (values as int64, positions after them). One pass per byte position, over the varints
    still going (most are 1 or 2 bytes); indexes past ``last`` are clipped (the caller checks
    that every field ends inside its record)."""
    b = a[pos].astype(np.uint64)
    raw = b & _X7F
    nxt = pos + 1
    going = np.flatnonzero(b >= 0x80)
    shift = _U7
    for _ in range(9):
        if not len(going):
            break
        at = nxt[going]
        b = a[np.minimum(at, last)].astype(np.uint64)
        raw[going] |= (b & _X7F) << shift
        nxt[going] = at + 1
        going = going[b >= 0x80]
        shift += _U7
    else:
        if len(going):
            raise ValueError("a varint is longer than 10 bytes")
    return (raw >> _ONE).astype(np.int64) ^ -(raw & _ONE).astype(np.int64), nxt


def decode_v2_columns(buf, pos: int, count: int):
    """The records of an (uncompressed) v2 batch body, vectorised:
    (offset deltas, ts deltas, value starts, value lengths (-1: null)) as int64 arrays.

    Only the record lengths are followed in a Python loop (each record's start depends on the
    previous one); every field inside the records is decoded for all records at once. Raises
    ``ValueError``/``IndexError`` when the bytes do not add up.
    """
    starts = [0] * count
    ends = [0] * count
    varint = _varint
    for i in range(count):
        b = buf[pos]
        if b < 0x80:
            length, pos = b >> 1, pos + 1
        elif buf[pos + 1] < 0x80:
            length, pos = ((b & 0x7F) | (buf[pos + 1] << 7)) >> 1, pos + 2
        else:
            length, pos = varint(buf, pos)
        starts[i] = pos
        pos += length
        ends[i] = pos
    if pos != len(buf):
        raise ValueError(f"record batch body has {len(buf) - pos} bytes left over")
    a = np.frombuffer(buf, dtype=np.uint8)
    last = len(a) - 1
    rec_start = np.asarray(starts, dtype=np.int64)
    rec_end = np.asarray(ends, dtype=np.int64)
    tsd, p = _varints(a, rec_start + 1, last)      # + 1: the attributes byte
    offd, p = _varints(a, p, last)
    klen, p = _varints(a, p, last)
    p = p + np.maximum(klen, 0)
    vlen, p = _varints(a, p, last)
    if (klen < -1).any() or (vlen < -1).any() or (p + np.maximum(vlen, 0) > rec_end).any() \
            or (rec_end <= rec_start).any():
        raise ValueError("a record's fields run past its end")
    return offd, tsd, p, vlen




# ---- compiled: the whole body in one pass, values joined into one line buffer ----------------
@njit(nogil=True)
def _zigzag(a, pos, end):
    """The zigzag varint at ``pos`` (it must end before ``end``): (value, next position)."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    while True:
        if pos >= end:
            raise ValueError("a varint runs past its record")
        b = np.uint64(a[pos])
        pos += 1
        raw |= (b & np.uint64(0x7F)) << shift
        if b < 0x80:
            break
        shift += np.uint64(7)
        if shift > 63:
            raise ValueError("a varint is longer than 10 bytes")
    return np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1)), pos


@njit(nogil=True, inline="always")
def _zigzag_short(a, pos, end):
    """``_zigzag`` with its one- and two-byte cases inline (a record's fields and length nearly
    always are; the loop's call costs a quarter of a record's decode)."""
    if pos + 1 < end:
        b = np.int64(a[pos])
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
        c = np.int64(a[pos + 1])
        if c < 0x80:
            raw = (b & 0x7F) | (c << 7)
            return (raw >> 1) ^ -(raw & 1), pos + 2
    return _zigzag(a, pos, end)


@njit(nogil=True, inline="always")
def record_at(a, pos, stop):
    """The v2 record at ``pos`` (it must end by ``stop``): (timestamp delta, offset delta, value
    start, value length (0 for a null value), the record's end)."""
    length, pos = _zigzag_short(a, pos, stop)
    end = pos + length
    if length <= 0 or end > stop:
        raise ValueError("a record runs past its batch")
    t, p = _zigzag_short(a, pos + 1, end)     # + 1: the attributes byte
    o, p = _zigzag_short(a, p, end)
    k, p = _zigzag_short(a, p, end)
    if k < -1:
        raise ValueError("a record's key length is negative")
    p += max(k, 0)
    v, p = _zigzag_short(a, p, end)
    if v < -1 or p + max(v, 0) > end:
        raise ValueError("a record's value runs past its end")
    return t, o, p, max(v, 0), end


@njit(nogil=True)
def _decode_join(a, pos, count, min_delta):
    n = len(a)
    offd = np.empty(count, np.int64)
    tsd = np.empty(count, np.int64)
    vstart = np.empty(count, np.int64)
    vlen = np.empty(count, np.int64)
    kept, total = 0, 0
    for i in range(count):
        t, o, p, v, end = record_at(a, pos, n)
        offd[i], tsd[i], vstart[i], vlen[i] = o, t, p, v     # a null value: an empty line
        if o >= min_delta:
            kept += 1
            total += v + 1
        pos = end
    if pos != n:
        raise ValueError("record batch body has bytes left over")
    out = np.empty(total, np.uint8)
    ends = np.empty(kept, np.int64)
    offs = np.empty(kept, np.int64)
    ts = np.empty(kept, np.int64)
    j, w = 0, 0
    for i in range(count):
        if offd[i] < min_delta:
            continue
        s, m = vstart[i], vlen[i]
        out[w:w + m] = a[s:s + m]
        w += m
        out[w] = 10                                # '\n'
        ends[j], offs[j], ts[j] = w, offd[i], tsd[i]
        w += 1
        j += 1
    return offs, ts, out, ends


def decode_v2_joined(buf, pos: int, count: int, min_delta: int = 0):
    """The records of an (uncompressed) v2 batch body whose offset delta is at least
    ``min_delta``, compiled, in one pass: (offset deltas, ts deltas, their values joined as
    ``value\\n`` lines (a memoryview of bytes, not a copy; a null value is an empty line), each
    line's ``\\n`` position). Raises ``ValueError`` when the bytes do not add up (as
    ``decode_v2_columns``, whose results it matches: ``tests/test_kafka_decode.py``)."""
    a = np.frombuffer(buf, dtype=np.uint8)
    offs, ts, out, ends = _decode_join(a, int(pos), int(count), int(min_delta))
    return offs, ts, memoryview(out), ends
