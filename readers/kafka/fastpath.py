"""The kafka-python fast path, all of it: ``poll()`` hands out ``Segment``s, not records.

kafka-python builds a ``ConsumerRecord`` (a dozen Python objects) per message, which caps a
consumer near 100k messages/s. The Kafka reader needs, per partition, only the message values
joined into one line buffer, their offsets and their timestamps. ``install(consumer)`` gives
the consumer's fetcher a subclass of its ``PartitionRecords`` that decodes each v2 record
batch at once (``decode.py``) and yields one ``Segment`` per batch; it also makes
kafka-python read its sockets ``RECV_BYTES`` per call instead of 4 KiB.

This replaces library internals, so it is guarded twice:

* ``missing()`` lists every attribute the fast path uses on kafka-python's objects (the
  consumer, its fetcher, ``PartitionRecords``, a record batch built by the library itself,
  the errors module) and decodes that sample batch both ways. ``install`` enables the fast
  path only when nothing is missing and both decodes agree (checked once per process; what
  is missing is logged at DEBUG). The larger socket reads are a patch of the whole process:
  applied at start-up (``patch_socket_reads``, from ``streamtrain.startup.for_job``), not here.
* At run time, if decoding a batch fails (an attribute of a ``PartitionRecords`` instance
  is missing, a field is not where it was), that batch and every later one go through the
  library's own decoder (``poll()`` then returns ``ConsumerRecord``s again, which the reader
  turns into ``Segment``s with ``Segment.from_records``), and a WARNING says so once.

kafka-python 2.1.2–2.1.6 lack ``DefaultRecordBatch.next_offset`` (their ``poll()`` raised
``AttributeError`` through the old fast path): the check turns the fast path off there.
"""
from __future__ import annotations

import logging

import numpy as np

from . import codecs, fetchdecode
from .decode import decode_v2, decode_v2_joined
from .segment import Segment
from .zerocopy import RECV_BYTES, patch_socket_reads  # noqa: F401  (their home before)

log = logging.getLogger("streamtrain.kafka")

VECTOR_MIN_RECORDS = 8             # below this the per-record loop is cheaper (the compiled call's
                                   # overhead, ~30 us, is ~4-8 records of the Python loop; a producer
                                   # that lingers 5 ms writes batches of tens of records)

# every attribute used below, by the object it is read from
FETCHER_ATTRS = ("PartitionRecords",)
PARTITION_RECORDS_ATTRS = ("_unpack_records", "_maybe_skip_record", "drain")
PARTITION_RECORDS_STATE = ("fetch_offset", "next_fetch_offset", "records_read", "bytes_read",
                           "leader_epoch", "check_crcs")     # set by its __init__: checked per fetch
BATCH_ATTRS = ("magic", "is_control_batch", "validate_crc", "leader_epoch", "base_offset",
               "next_offset", "records_count", "_maybe_uncompress", "_buffer", "_pos",
               "timestamp_type", "max_timestamp", "first_timestamp", "size_in_bytes",
               "_decompressed", "compression_type", "last_offset_delta")
RECORDS_ATTRS = ("next_batch", "_buffer")
ERRORS_ATTRS = ("CorruptRecordError",)

def segment_of_batch(tp, batch, fetch_offset: int):
    """One ``Segment`` of a ``DefaultRecordBatch`` (records before ``fetch_offset`` dropped)."""
    codecs.uncompress(batch)
    count = batch.records_count
    if count < VECTOR_MIN_RECORDS:
        return _segment_of_batch_loop(tp, batch, fetch_offset)
    if batch._pos == 0 and isinstance(batch._buffer, bytearray) and batch.compression_type:
        return _segment_in_place(tp, batch, fetch_offset)
    offd, tsd, joined, ends = decode_v2_joined(batch._buffer, batch._pos, count,
                                               max(0, fetch_offset - batch.base_offset))
    if not len(offd):
        return None
    offsets = offd + batch.base_offset
    if batch.timestamp_type == 1:                  # LOG_APPEND_TIME: the broker's time for all
        ts = np.full(len(offsets), float(batch.max_timestamp))
    else:
        ts = tsd.astype(np.float64) + batch.first_timestamp
    return Segment(tp.topic, tp.partition, joined, ends, offsets, ts / 1000.0, batch.next_offset)


def _segment_in_place(tp, batch, fetch_offset: int):
    """``segment_of_batch`` of a decompressed batch (its records alone, in a bytearray of its
    own): ``fetchdecode``'s two passes, the lines joined over the records' own bytes."""
    fd = fetchdecode
    row = np.zeros((1, len(fd.COLUMNS)), np.int64)
    row[0, [fd.START, fd.END, fd.BASE, fd.LAST_DELTA, fd.FIRST_TS, fd.MAX_TS, fd.ATTRS, fd.COUNT]] = (
        -fd.HEADER, len(batch._buffer), batch.base_offset, batch.last_offset_delta, batch.first_timestamp,
        batch.max_timestamp, fd.LOG_APPEND_TIME if batch.timestamp_type == 1 else 0, batch.records_count)
    a = np.frombuffer(batch._buffer, dtype=np.uint8)
    fields, kept, size = fd._records(a, row, int(fetch_offset))
    offs, ts, ends, lines = fd._join(a, fields, int(fetch_offset), a, 0)
    if not len(offs):
        return None
    seg = Segment(tp.topic, tp.partition, memoryview(a[:size]), ends, offs, ts / 1000.0, batch.next_offset)
    seg._lines = lines
    return seg


def _next_offset(table) -> int:
    return int(table[-1, fetchdecode.BASE] + table[-1, fetchdecode.LAST_DELTA] + 1)


def segment_of_run(tp, buf, table, fetch_offset: int, in_place: bool = False):
    """One ``Segment`` of the batches ``fetchdecode.batch_table`` found in ``buf`` (records
    before ``fetch_offset`` and control batches dropped; None if nothing is left);
    ``in_place``: written over those batches when ``buf`` is writable."""
    offs, ts, joined, ends, lines = fetchdecode.decode_batches(buf, table, fetch_offset, in_place)
    if not len(offs):
        return None
    seg = Segment(tp.topic, tp.partition, joined, ends, offs, ts / 1000.0, _next_offset(table))
    seg._lines = lines                  # (counted in the decode: no scan of the buffer again)
    return seg


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
        vals = [v for v, k in zip(vals, keep, strict=True) if k]
    if not len(offsets):
        return None
    return Segment.from_values(tp.topic, tp.partition, vals, offsets, ts, batch.next_offset)




def _sample():
    """Two two-record v2 batches (offsets 0-1 and 2-3) built by kafka-python itself, in the
    MemoryRecords of a fetch."""
    from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

    raw = b""
    for offset in (0, 2):
        b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16, offset=offset)
        b.append(timestamp=1_700_000_000_000 + offset, key=None, value=b"1\ta%d" % offset, headers=[])
        b.append(timestamp=1_700_000_000_007, key=b"k", value=b"0\tb", headers=[("h", b"v")])
        b.close()
        raw += b.buffer()
    return MemoryRecords(raw)


def _agrees(seg, records) -> bool:
    """``seg`` holds what the library decodes from ``records`` (values, offsets, timestamps)."""
    return (seg is not None and bytes(seg.buf) == b"".join(r.value + b"\n" for r in records)
            and seg.offsets.tolist() == [r.offset for r in records]
            and (seg.ts * 1000).round().tolist() == [r.timestamp for r in records])


def missing(consumer) -> list[str]:
    """What the fast path needs and this kafka-python does not have (empty: all there)."""
    from kafka import TopicPartition
    from kafka import errors as Errors

    gaps = []
    fetcher = getattr(consumer, "_fetcher", None)
    gaps += [f"fetcher.{a}" for a in FETCHER_ATTRS if not hasattr(fetcher, a)]
    base = getattr(fetcher, "PartitionRecords", None)
    gaps += [f"PartitionRecords.{a}" for a in PARTITION_RECORDS_ATTRS if not hasattr(base, a)]
    gaps += [f"kafka.errors.{a}" for a in ERRORS_ATTRS if not hasattr(Errors, a)]
    if getattr(consumer, "config", {}).get("isolation_level") not in (None, "read_uncommitted"):
        gaps.append("isolation_level read_uncommitted (aborted transactions are not filtered)")
    try:
        records = _sample()
        gaps += [f"MemoryRecords.{a}" for a in RECORDS_ATTRS if not hasattr(records, a)]
        batch = records.next_batch()
        gaps += [f"DefaultRecordBatch.{a}" for a in BATCH_ATTRS if not hasattr(batch, a)]
        if not gaps:
            tp = TopicPartition("sample", 0)
            if not _agrees(segment_of_batch(tp, batch, 0), list(_sample().next_batch())):
                gaps.append("a decode that agrees with the library's on a sample batch")
            theirs = [r for b in _sample() for r in b]
            table, stop = fetchdecode.batch_table(records._buffer)
            if (stop != len(records._buffer) or len(table) != 2
                    or not _agrees(segment_of_run(tp, records._buffer, table, 0), theirs)):
                gaps.append("a decode of whole fetches that agrees with the library's on a sample")
    except Exception as err:                # any surprise in the library's objects: not here
        gaps.append(f"a sample batch ({err!r})")
    return gaps


class _Replay:
    """``records`` with ``first`` (already taken from it) put back in front."""

    def __init__(self, first, records):
        self._first, self._records = first, records

    def next_batch(self, *args, **kw):
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return self._records.next_batch(*args, **kw)


def _crc_good(buf, table) -> int:
    """How many of ``table``'s batches, from the first, hold the CRC-32C of their bytes."""
    from kafka.record.util import calc_crc32c

    view = memoryview(buf)
    for i, (start, end, crc) in enumerate(fetchdecode.crc_spans(table)):
        if calc_crc32c(view[start:end]) != crc:
            return i
    return len(table)


def _segment_records_class(base, fall_back):
    """A subclass of kafka-python's ``PartitionRecords`` yielding ``Segment``s; on a decode
    failure it calls ``fall_back(err)`` and hands the rest to ``base``'s own decoder."""
    from kafka import errors as Errors
    from kafka.record.memory_records import MemoryRecords

    class SegmentRecords(base):
        def take(self, n=None):
            """The library's ``take``; once an error came out of the records (a batch's CRC, a
            codec not installed), drained: nothing more can come from them, and kafka-python's
            fetch loop, finding an undrained part that gives nothing, would spin on it at 100 %
            CPU when the error it deferred is dropped (the partition revoked meanwhile). A new
            fetch from the partition's position meets the same batch again."""
            try:
                return super().take(n)
            except Exception:
                self.drain()
                raise

        def _maybe_skip_record(self, record):
            if isinstance(record, Segment):     # segment_of_batch already dropped them
                return False
            return super()._maybe_skip_record(record)

        def _unpack_records(self, tp, records, key_deserializer, value_deserializer):
            """The leading run of plain v2 batches as one Segment (``_run``), then what is left
            batch by batch (``_per_batch``); any surprise: the library's decoder from the start."""
            try:
                for a in PARTITION_RECORDS_STATE:
                    getattr(self, a)            # AttributeError here: fall back before any effect
                buf = records._buffer
                table, stop = fetchdecode.batch_table(buf)
                good = _crc_good(buf, table) if self.check_crcs else len(table)
                seg = self._run(tp, buf, table[:good]) if good else None
            except Exception as err:
                fall_back(err)
                yield from base._unpack_records(self, tp, records, key_deserializer, value_deserializer)
                return
            if seg is not None:
                yield seg
            if good < len(table):
                raise Errors.CorruptRecordError(f"record batch for partition {tp} at offset "
                                                f"{int(table[good, fetchdecode.BASE])} failed crc check")
            if stop < len(buf):                 # a compressed or legacy batch, or a partial one
                yield from self._per_batch(tp, MemoryRecords(memoryview(buf)[stop:]),
                                           key_deserializer, value_deserializer)
            else:
                self.drain()

        def _run(self, tp, buf, table):
            return _run_segment(self, tp, buf, table)

        def _per_batch(self, tp, records, key_deserializer, value_deserializer):
            return _per_batch(self, tp, records, key_deserializer, value_deserializer, base, fall_back)

        def _segment(self, tp, batch):
            return _batch_segment(self, tp, batch)

    return SegmentRecords


def _run_segment(pr, tp, buf, table):
    """The batches of ``table`` as one Segment (None: nothing at or past the fetch offset)."""
    # in place: the records are a view into the fetch response's frame (zerocopy.py),
    # read by nothing else once their CRCs are checked and pass one has read them
    seg = segment_of_run(tp, buf, table, pr.fetch_offset, in_place=True)
    last = table[-1]
    pr.leader_epoch = int(last[fetchdecode.EPOCH])
    pr.next_fetch_offset = _next_offset(table)
    pr.bytes_read += int(last[fetchdecode.END] - table[0, fetchdecode.START])
    pr.records_read += len(seg) if seg is not None else 0
    return seg


def _per_batch(pr, tp, records, key_deserializer, value_deserializer, base, fall_back):
    """``PartitionRecords._unpack_records`` batch by batch (``_batch_segment``): what follows a
    compressed or legacy batch."""
    from kafka import errors as Errors

    batch = records.next_batch()
    last = None
    while batch is not None:
        if pr.check_crcs and not batch.validate_crc():
            raise Errors.CorruptRecordError(
                f"record batch for partition {tp} at offset {batch.base_offset} failed crc check")
        try:
            seg = _batch_segment(pr, tp, batch)
        except Errors.UnsupportedCodecError as err:     # not the fast path's: the library's decoder fails alike
            raise Errors.UnsupportedCodecError(f"{err.args[0] if err.args else err} (topic {tp.topic!r} partition "
                                               f"{tp.partition}, record batch at offset {batch.base_offset})") from None
        except Exception as err:
            fall_back(err)
            yield from base._unpack_records(pr, tp, _Replay(batch, records),
                                            key_deserializer, value_deserializer)
            return
        last = batch
        if seg is not None:
            pr.records_read += len(seg)
            pr.bytes_read += batch.size_in_bytes
            yield seg
        batch = records.next_batch()
    if last is not None and last.magic == 2:
        pr.next_fetch_offset = last.next_offset
    pr.drain()


def _batch_segment(pr, tp, batch):
    """The batch as a Segment (None: nothing to hand out); moves ``next_fetch_offset``."""
    for a in PARTITION_RECORDS_STATE:
        getattr(pr, a)              # AttributeError here: fall back before any effect
    if batch.magic < 2:             # legacy format: the library's own record decoder
        recs = [r for r in batch if r.offset >= pr.fetch_offset]
        if not recs:
            return None
        seg = Segment.from_values(tp.topic, tp.partition, [r.value for r in recs],
                                  [r.offset for r in recs], [r.timestamp for r in recs])
        pr.next_fetch_offset = seg.next_offset
        return seg
    if batch.is_control_batch:
        pr.next_fetch_offset = batch.next_offset
        return None
    seg = segment_of_batch(tp, batch, pr.fetch_offset)
    pr.leader_epoch = batch.leader_epoch
    pr.next_fetch_offset = batch.next_offset
    return seg


class FastPath:
    """The fast path of one consumer: ``active`` until ``install`` declines or a decode fails."""

    def __init__(self):
        self.active = False
        self.fell_back = None           # the error that turned it off at run time
        self._fetcher = self._base = None

    def install(self, consumer) -> bool:
        """Make ``consumer.poll()`` return ``Segment``s; False (and nothing changed) when this
        kafka-python lacks anything the fast path uses."""
        gaps = missing(consumer)
        if gaps:
            log.debug("kafka fast path disabled: this kafka-python has no %s", ", ".join(gaps))
            return False
        self._fetcher = consumer._fetcher
        self._base = self._fetcher.PartitionRecords
        self._fetcher.PartitionRecords = _segment_records_class(self._base, self._fall_back)
        self.active = True
        return True

    def _fall_back(self, err) -> None:
        if self._fetcher is not None:
            self._fetcher.PartitionRecords = self._base
        if self.active:
            log.warning("kafka fast path: decoding a record batch failed (%r); decoding records "
                        "one by one from now on", err)
        self.active, self.fell_back = False, err
