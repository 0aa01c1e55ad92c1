"""Kafka v2 record-batch bodies decoded from bytes: a per-record loop and a vectorised one.

Pure functions of a buffer (no kafka-python inside): ``decode_v2`` walks the records one by
one; ``decode_v2_columns`` follows only the record lengths in Python and decodes every field
of all records at once with numpy. Both raise ``ValueError``/``IndexError`` when the bytes do
not add up.

Both loops inline the one- and two-byte case of the record-length varint (the same six lines,
on purpose: a function call per record is most of the cost of these loops); longer varints go
through ``_varint``.
"""
from __future__ import annotations

import numpy as np


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


