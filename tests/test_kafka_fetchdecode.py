"""A partition's whole fetch decoded at once (``fetchdecode.py`` through the fast path's
``PartitionRecords``) gives what kafka-python's own decoder gives: values, offsets, timestamps
and the next fetch offset, across many batches, a fetch offset inside a batch, control and
log-append-time batches, a compressed batch and a partial batch at the end (left to the
per-batch path); a batch with a wrong CRC is refused after the batches before it. No broker."""
from __future__ import annotations

import struct

import numpy as np
import pytest

pytest.importorskip("kafka")

from kafka import TopicPartition                                           # noqa: E402
from kafka.consumer.fetcher import Fetcher                                 # noqa: E402
from kafka.errors import CorruptRecordError                                # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder         # noqa: E402
from kafka.record.memory_records import MemoryRecords                      # noqa: E402
from kafka.record.util import calc_crc32c                                  # noqa: E402

from streamtrain.readers.kafka import fastpath, fetchdecode                # noqa: E402
from streamtrain.readers.kafka.segment import Segment                      # noqa: E402

TP = TopicPartition("t", 1)


def _batch(base_offset, values, compression=0, attrs=0, ts0=1_700_000_000_000, keys=False):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 24)
    for i, v in enumerate(values):
        b.append(i, timestamp=ts0 + 3 * i, key=b"k%d" % i if keys else None, value=v,
                 headers=[("h", b"x")] if keys else [])
    raw = bytearray(b.build())
    struct.pack_into(">q", raw, 0, base_offset)
    if attrs:                                       # log-append time / control: CRC again
        struct.pack_into(">h", raw, 21, struct.unpack_from(">h", raw, 21)[0] | attrs)
        struct.pack_into(">I", raw, 17, calc_crc32c(memoryview(raw)[21:]))
    return bytes(raw)


def _fetch(rng, n_batches=40):
    raw, offset = b"", 100
    for k in range(n_batches):
        vals = [None if rng.random() < 0.02 else bytes(rng.integers(32, 127, int(rng.integers(0, 300)), np.uint8))
                for _ in range(int(rng.integers(1, 40)))]
        vals = [v.replace(b"~", b"\n") if v and k % 3 == 0 else v for v in vals]     # several lines a message
        attrs = fetchdecode.LOG_APPEND_TIME if k % 7 == 3 else 0
        raw += _batch(offset, vals, attrs=attrs, keys=k % 2 == 1)
        offset += len(vals)
        if k % 9 == 4:                              # a control batch (one record) between them
            raw += _batch(offset, [b"\x00\x00\x00\x01"], attrs=fetchdecode.CONTROL)
            offset += 1
    return raw


def _take(records_class, raw, fetch_offset, check_crcs=True, writable=False):
    """``writable``: the records as a view into a bytearray, as in a fetch response's frame
    (zerocopy.py): the fast path then writes the lines over the batches."""
    buf = memoryview(bytearray(raw)) if writable else raw
    pr = records_class(fetch_offset, TP, MemoryRecords(buf), check_crcs=check_crcs)
    out = pr.take()
    return out, pr


def _library(raw, fetch_offset):
    recs, pr = _take(Fetcher.PartitionRecords, raw, fetch_offset)
    return ([b"" if r.value is None else r.value for r in recs], [r.offset for r in recs],
            [r.timestamp for r in recs], pr.next_fetch_offset)


def _ours(raw, fetch_offset, check_crcs=True, writable=False):
    fell = []
    cls = fastpath._segment_records_class(Fetcher.PartitionRecords, fell.append)
    segs, pr = _take(cls, raw, fetch_offset, check_crcs, writable)
    assert not fell and all(isinstance(s, Segment) for s in segs)
    values = [bytes(s.buf)[start:end] for s in segs
              for start, end in zip([0] + (s.ends[:-1] + 1).tolist(), s.ends.tolist())]
    offsets = [o for s in segs for o in s.offsets.tolist()]
    ts = [t for s in segs for t in (s.ts * 1000).round().astype(np.int64).tolist()]
    for s in segs:                                   # line counts from the decode = counted again
        fresh = Segment(s.topic, s.partition, s.buf, s.ends, s.offsets, s.ts)
        assert s.lines.tolist() == fresh.lines.tolist() and s.n_lines == fresh.n_lines
    return (values, offsets, ts, pr.next_fetch_offset), segs


@pytest.mark.parametrize("writable", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_whole_fetch_decodes_as_the_library_does(seed, writable):
    raw = _fetch(np.random.default_rng(seed))
    table, stop = fetchdecode.batch_table(raw)
    assert stop == len(raw) and len(table) > 40
    for fetch_offset in (100, 117, 333):
        ours, segs = _ours(raw, fetch_offset, writable=writable)
        assert ours == _library(raw, fetch_offset)
        assert len(segs) == 1 and segs[0].next_offset == ours[3]      # one Segment per fetch


def test_a_compressed_batch_and_a_partial_one_go_to_the_per_batch_path():
    plain = _batch(0, [b"a", b"bb"]) + _batch(2, [b"c"] * 9)
    gz = _batch(11, [b"zipped %d" % i for i in range(20)], compression=1)
    tail = _batch(31, [b"after"] * 3)
    raw = plain + gz + tail + _batch(34, [b"cut"] * 5)[:30]           # a fetch ends inside a batch
    table, stop = fetchdecode.batch_table(raw)
    assert len(table) == 2 and stop == len(plain)
    for writable in (False, True):
        ours, segs = _ours(raw, 0, writable=writable)
        assert ours == _library(raw, 0) and ours[3] == 34 and len(ours[1]) == 34
        assert len(segs) == 3                        # the run, the compressed batch, the one after


def test_a_batch_with_a_wrong_crc_is_refused_after_the_ones_before_it():
    raw = bytearray(_batch(0, [b"x"] * 5) + _batch(5, [b"y"] * 5) + _batch(10, [b"z"] * 5))
    second = len(_batch(0, [b"x"] * 5))
    raw[second + 70] ^= 1                            # a byte of the second batch's records
    fell = []
    cls = fastpath._segment_records_class(Fetcher.PartitionRecords, fell.append)
    pr = cls(0, TP, MemoryRecords(bytes(raw)), check_crcs=True)
    first = pr.take()
    assert [s.offsets.tolist() for s in first] == [[0, 1, 2, 3, 4]]
    with pytest.raises(CorruptRecordError, match="offset 5"):
        pr.take()
    theirs = Fetcher.PartitionRecords(0, TP, MemoryRecords(bytes(raw)), check_crcs=True)
    assert [r.offset for r in theirs.take()] == [0, 1, 2, 3, 4]     # the library does the same
    with pytest.raises(CorruptRecordError):
        theirs.take()
    ours, _ = _ours(bytes(raw), 0, check_crcs=False)     # check_crcs off: read as it is
    assert ours[1] == list(range(15)) and not fell


def test_bytes_that_do_not_add_up_fall_back_to_the_library():
    raw = bytearray(_batch(0, [b"abc"] * 4))
    raw[fetchdecode.HEADER] = 0x7E                   # record 0's length: past its batch
    struct.pack_into(">I", raw, 17, calc_crc32c(memoryview(raw)[21:]))
    with pytest.raises(ValueError):
        fetchdecode.decode_batches(bytes(raw), fetchdecode.batch_table(bytes(raw))[0], 0)
    fell = []
    cls = fastpath._segment_records_class(Fetcher.PartitionRecords, fell.append)
    with pytest.raises(CorruptRecordError):          # the library's own decoder has its say
        cls(0, TP, MemoryRecords(bytes(raw)), check_crcs=True).take()
    assert len(fell) == 1


@pytest.mark.parametrize("in_place", [False, True])
def test_every_value_length_and_newline_position_around_the_eight_byte_steps(in_place):
    """The join copies and counts eight bytes a step, then byte by byte: values of 0 to 19 bytes
    (and 200, two-byte varints), a ``\\n`` at each position or none, many newlines; in place
    too (each value moves left over its own record's header)."""
    vals = [b""] + [bytes(b"x" * m) for m in range(1, 20)]
    vals += [bytes(b"y" * k + b"\n" + b"z" * (m - k - 1)) for m in range(1, 20) for k in range(m)]
    vals += [b"\n" * 9, b"a\n" * 100, b"b" * 199 + b"\n", bytes(range(1, 256)) * 2]
    raw = _batch(7, vals)
    table, _ = fetchdecode.batch_table(raw)
    buf = bytearray(raw) if in_place else raw
    offs, ts, joined, ends, lines = fetchdecode.decode_batches(buf, table, 0, in_place=in_place)
    assert bytes(joined) == b"".join(v + b"\n" for v in vals)
    assert offs.tolist() == list(range(7, 7 + len(vals)))
    assert lines.tolist() == np.cumsum([v.count(b"\n") + 1 for v in vals]).tolist()
    assert ends.tolist() == (np.cumsum([len(v) + 1 for v in vals]) - 1).tolist()
