"""Kafka messages as ``Segment``s: one fetched record batch of one partition, values joined.

kafka-python builds a ``ConsumerRecord`` (a dozen Python objects) per message, which caps a
consumer near 100k messages/s. The Kafka reader does not need them: it needs, per partition,
the message values joined into one line buffer, their offsets and their timestamps. So the
consumer's fetcher is given ``SegmentRecords``, which decodes a whole v2 record batch at once
(a Python loop follows only the record lengths; every field inside the records is decoded for
all records with numpy; batches under ``VECTOR_MIN_RECORDS`` records use one plain loop) and
hands ``poll()`` one ``Segment`` per record batch instead of one record per message.
``install(consumer)`` switches a consumer over — and makes kafka-python read its sockets
``RECV_BYTES`` per call instead of 4 KiB; when kafka-python's internals do not look as
expected it returns False and the reader converts ordinary records with
``Segment.from_records`` instead (slower, same result).
"""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("streamtrain.kafka")


class Segment:
    """Consecutive messages of one partition: values joined as ``\\n``-terminated text.

    ``ends[i]`` is the index in ``buf`` of the ``\\n`` that closes message ``i``; a message may
    itself hold several lines. ``offsets`` are the messages' Kafka offsets, ``ts`` their
    timestamps in seconds.
    """

    __slots__ = ("topic", "partition", "buf", "ends", "offsets", "ts", "next_offset", "arrived",
                 "_lines")

    def __init__(self, topic, partition, buf: bytes, ends, offsets, ts, next_offset=None):
        self.topic, self.partition = topic, partition
        self.buf = buf
        self.ends = ends
        self.offsets = offsets
        self.ts = ts
        # the offset to commit once every message here is applied (a compacted or control
        # batch can make it larger than offsets[-1] + 1)
        self.next_offset = int(offsets[-1]) + 1 if next_offset is None else next_offset
        self.arrived = 0.0                # monotonic time the reader got it (batch deadlines)
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


VECTOR_MIN_RECORDS = 128           # below this the per-record loop is cheaper (numpy call overhead)
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


def segment_of_batch(tp, batch, fetch_offset: int):
    """One ``Segment`` of a ``DefaultRecordBatch`` (records before ``fetch_offset`` dropped)."""
    batch._maybe_uncompress()
    count = batch.records_count
    if count < VECTOR_MIN_RECORDS:
        return _segment_of_batch_loop(tp, batch, fetch_offset)
    buf = batch._buffer
    offd, tsd, vstart, vlen = decode_v2_columns(buf, batch._pos, count)
    offsets = offd + batch.base_offset
    if batch.timestamp_type == 1:                  # LOG_APPEND_TIME: the broker's time for all
        ts = np.full(len(offsets), float(batch.max_timestamp))
    else:
        ts = tsd.astype(np.float64) + batch.first_timestamp
    if len(offsets) and offsets[0] < fetch_offset:
        keep = offsets >= fetch_offset
        offsets, ts, vstart, vlen = offsets[keep], ts[keep], vstart[keep], vlen[keep]
    if not len(offsets):
        return None
    vlen = np.maximum(vlen, 0)                     # a null value becomes an empty line
    mv = memoryview(buf)
    parts = [mv[s:e] for s, e in zip(vstart.tolist(), (vstart + vlen).tolist())]
    parts.append(b"")                              # the last line's '\n'
    joined = b"\n".join(parts)
    ends = np.cumsum(vlen + 1) - 1
    return Segment(tp.topic, tp.partition, joined, ends, offsets, ts / 1000.0, batch.next_offset)


def _segment_of_batch_loop(tp, batch, fetch_offset: int):
    """``segment_of_batch`` for small batches: one Python loop over the records."""
    offs, tsd, vals = decode_v2(batch._buffer, batch._pos, batch.records_count)
    offsets = np.asarray(offs, dtype=np.int64) + batch.base_offset
    if batch.timestamp_type == 1:
        ts = np.full(len(offsets), float(batch.max_timestamp))
    else:
        ts = np.asarray(tsd, dtype=np.float64) + batch.first_timestamp
    if len(offsets) and offsets[0] < fetch_offset:
        keep = offsets >= fetch_offset
        offsets, ts = offsets[keep], ts[keep]
        vals = [v for v, k in zip(vals, keep) if k]
    if not len(offsets):
        return None
    return Segment.from_values(tp.topic, tp.partition, vals, offsets, ts, batch.next_offset)


def _segment_records_class(base):
    """A subclass of kafka-python's ``Fetcher.PartitionRecords`` yielding ``Segment``s."""
    from kafka import errors as Errors

    class SegmentRecords(base):
        def _maybe_skip_record(self, record):     # segment_of_batch already dropped them
            return False

        def _unpack_records(self, tp, records, key_deserializer, value_deserializer):
            batch = records.next_batch()
            last = None
            while batch is not None:
                last = batch
                if self.check_crcs and not batch.validate_crc():
                    raise Errors.CorruptRecordError(
                        f"record batch for partition {tp} at offset {batch.base_offset} failed crc check")
                if batch.magic < 2:                 # legacy format: the library's own decoder
                    recs = [r for r in batch if r.offset >= self.fetch_offset]
                    if recs:
                        seg = Segment.from_values(tp.topic, tp.partition, [r.value for r in recs],
                                                  [r.offset for r in recs],
                                                  [r.timestamp for r in recs])
                        self.next_fetch_offset = seg.next_offset
                        self.records_read += len(recs)
                        yield seg
                elif batch.is_control_batch:
                    self.next_fetch_offset = batch.next_offset
                else:
                    self.leader_epoch = batch.leader_epoch
                    try:
                        seg = segment_of_batch(tp, batch, self.fetch_offset)
                    except (ValueError, IndexError) as err:
                        raise Errors.CorruptRecordError(
                            f"invalid record batch for {tp} at offset {batch.base_offset}: {err!r}")
                    self.next_fetch_offset = batch.next_offset
                    if seg is not None:
                        self.records_read += len(seg)
                        self.bytes_read += batch.size_in_bytes
                        yield seg
                batch = records.next_batch()
            if last is not None and last.magic == 2:
                self.next_fetch_offset = last.next_offset
            self.drain()

    return SegmentRecords


RECV_BYTES = 1 << 18


def _patch_socket_reads() -> bool:
    """kafka-python 3 reads sockets 4 KiB per ``recv`` call on its IO thread: a 16 MiB fetch
    response is ~4000 calls, each a bytes object and a GIL hand-off. Read ``RECV_BYTES`` per
    call instead, otherwise exactly as the library does (until the socket would block; an
    empty read is a disconnect). Applies to every kafka-python connection in the process
    (the bytes delivered are the same). False when the transport does not look as expected."""
    try:
        from kafka import errors as Errors
        from kafka.net.transport import KafkaTCPTransport
    except ImportError:
        return False
    original = getattr(KafkaTCPTransport, "_sock_recv", None)
    if original is None:
        return False
    if getattr(original, "_streamtrain", False):
        return True
    tlog = logging.getLogger("kafka.net.transport")

    def _sock_recv(self):
        recvd = []
        err = None
        while True:
            try:
                data = self._sock.recv(RECV_BYTES)
                if not data:
                    tlog.error('%s: socket disconnected', self)
                    err = Errors.KafkaConnectionError('socket disconnected')
                    break
                recvd.append(data)
            except (BlockingIOError, InterruptedError):
                break
            except BaseException as e:
                tlog.exception('%s: Error receiving network data closing socket', self)
                err = Errors.KafkaConnectionError(e)
                break
        return (recvd[0] if len(recvd) == 1 else b''.join(recvd)), err

    _sock_recv._streamtrain = True
    KafkaTCPTransport._sock_recv = _sock_recv
    return True


def install(consumer) -> bool:
    """Make ``consumer.poll()`` return ``Segment``s; False when this kafka-python is unknown."""
    fetcher = getattr(consumer, "_fetcher", None)
    base = getattr(fetcher, "PartitionRecords", None)
    if base is None or not hasattr(base, "_unpack_records") or consumer.config.get(
            "isolation_level") not in (None, "read_uncommitted"):
        log.info("kafka fast path unavailable; decoding records one by one")
        return False
    fetcher.PartitionRecords = _segment_records_class(base)
    if not _patch_socket_reads():
        log.info("kafka socket reads left at the library's 4 KiB per call")
    return True
