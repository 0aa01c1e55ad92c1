"""The kafka-python fast path is on only where every attribute it uses exists, and a decode
that fails at run time falls back to the library's own path without losing a record."""
from __future__ import annotations

import logging

import pytest
from kafka import KafkaConsumer
from kafka.record.default_records import DefaultRecordBatch

from streamtrain.produce import produce
from streamtrain.readers.kafka import fastpath
from streamtrain.readers.kafka.source import KafkaSource
from tests.kafka_broker import committed_offsets, end_offsets
from tests.kafka_helpers import read_to_end


@pytest.fixture
def consumer(kafka_bootstrap):
    c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    yield c
    c.close(autocommit=False)


def test_this_kafka_python_has_everything_the_fast_path_uses(consumer):
    assert fastpath.missing(consumer) == []
    base = consumer._fetcher.PartitionRecords
    fp = fastpath.FastPath()
    assert fp.install(consumer) and fp.active
    assert issubclass(consumer._fetcher.PartitionRecords, base)


def test_one_missing_attribute_turns_the_fast_path_off(consumer, monkeypatch, caplog):
    """kafka-python 2.1.2–2.1.6 have no DefaultRecordBatch.next_offset."""
    monkeypatch.delattr(DefaultRecordBatch, "next_offset")
    caplog.set_level(logging.DEBUG, logger="streamtrain.kafka")
    base = consumer._fetcher.PartitionRecords
    assert fastpath.missing(consumer) == ["DefaultRecordBatch.next_offset"]
    fp = fastpath.FastPath()
    assert fp.install(consumer) is False and not fp.active
    assert consumer._fetcher.PartitionRecords is base               # nothing replaced
    assert "kafka fast path disabled" in caplog.text and "next_offset" in caplog.text


def test_a_decode_that_disagrees_with_the_library_turns_it_off(consumer, monkeypatch):
    real = fastpath.segment_of_batch

    def shifted(tp, batch, fetch_offset):
        seg = real(tp, batch, fetch_offset)
        seg.offsets = seg.offsets + 1
        return seg
    monkeypatch.setattr(fastpath, "segment_of_batch", shifted)
    assert fastpath.missing(consumer) == ["a decode that agrees with the library's on a sample batch"]


def test_a_failing_first_decode_falls_back_and_loses_nothing(kafka_bootstrap, kafka_topic, kafka_names,
                                                             kafka_test_consumer, monkeypatch, caplog):
    topic, group = kafka_topic(2), kafka_names("g")
    lines = [b"\t".join([str(i % 2).encode(), *[b"%d" % (i % 7)] * 13, *[b"%08x" % (i % 97)] * 26])
             for i in range(600)]
    produce(lines, kafka_bootstrap, topic)
    calls, real = [], fastpath.segment_of_run

    def broken(tp, buf, table, fetch_offset, **kw):     # the install-time sample still decodes
        if tp.topic != topic:
            return real(tp, buf, table, fetch_offset, **kw)
        calls.append(fetch_offset)
        raise ValueError("a record runs past its batch")
    monkeypatch.setattr(fastpath, "segment_of_run", broken)
    caplog.set_level(logging.WARNING, logger="streamtrain.kafka")
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic, "group": group,
                       "format": "criteo", "stop_at_end": True, "max_wait_ms": 50,
                       "consumer": kafka_test_consumer}, 64)
    try:
        rows = sum(read_to_end(src))
        assert src.fastpath.fell_back is not None and not src.fast
    finally:
        src.close()
    assert len(calls) == 1                                     # tried once, then the library's path
    assert rows == 600 and src.stats["messages"] == 600
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic)
    assert caplog.text.count("kafka fast path: decoding a record batch failed") == 1



def test_the_patched_frame_reads_return_what_the_librarys_do():
    """``KafkaBytes.read`` copies once after ``patch_socket_reads`` and returns the same bytes and
    positions as the library's own (reads inside, at and past the end)."""
    pytest.importorskip("kafka.net")                # kafka-python 3 only
    from kafka.protocol.frame import KafkaBytes

    def reads(read):
        buf = KafkaBytes(10)
        buf.write(b"0123456789")
        buf.seek(0)
        out = [read(buf, 3), read(buf, 4), read(buf), read(buf, 5), buf.tell()]
        buf.seek(8)
        return out + [read(buf, 10), buf.tell()]

    theirs = reads(getattr(KafkaBytes.read, "original", KafkaBytes.read))
    fastpath.patch_socket_reads()
    assert getattr(KafkaBytes.read, "_streamtrain", False)
    assert reads(KafkaBytes.read) == theirs == [b"012", b"3456", b"789", b"", 10, b"89", 10]


def test_fetch_responses_decode_as_views_of_the_frame():
    """``zerocopy.patch`` (applied with the socket reads): a fetch response's records are a view
    into the frame, every field as the library decodes it; undone, the library's own decode."""
    pytest.importorskip("kafka.net")
    from kafka.net.connection import KafkaConnection
    from kafka.protocol.consumer import FetchResponse
    from streamtrain.readers.kafka import zerocopy

    def state():
        field = zerocopy._records_field(FetchResponse._struct)
        return (KafkaConnection.__dict__["data_received"], FetchResponse.__dict__.get("decode"),
                field.__dict__.get("emit_decode_from"))

    before = state()
    undo = zerocopy._apply(KafkaConnection, FetchResponse)
    assert zerocopy._check(FetchResponse) is None
    undo()
    assert state() == before
    if not zerocopy.patched(FetchResponse):                # not patched in this process yet
        assert "decoded differently" in zerocopy._check(FetchResponse)
    assert zerocopy.patch() and zerocopy._check(FetchResponse) is None


def test_large_fetches_are_read_straight_into_their_frame(kafka_bootstrap, kafka_topic, monkeypatch):
    """With the socket reads patched, a fetch response larger than ``DIRECT_BYTES`` is read with
    ``recv_into`` straight into its frame (all but its last byte, which completes it through the
    connection's buffer); the records come back exactly as produced."""
    pytest.importorskip("kafka.net")
    from kafka import TopicPartition
    from kafka.protocol.frame import KafkaBytes
    from streamtrain.readers.kafka import zerocopy

    assert zerocopy.patch_socket_reads()
    topic = kafka_topic(1)
    values = [b"%06d:" % i + bytes([97 + i % 26]) * (200 + i % 300) for i in range(20000)]   # ~7 MB
    produce(values, kafka_bootstrap, topic)
    into, real = {"frame": 0, "scratch": 0}, zerocopy._read_into

    def counted(transport, view, tlog, errors):
        got, err = real(transport, view, tlog, errors)
        into["frame" if isinstance(view.obj, KafkaBytes) else "scratch"] += len(got)
        return got, err
    monkeypatch.setattr(zerocopy, "_read_into", counted)
    c = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_bytes=16 << 20, max_partition_fetch_bytes=16 << 20)
    try:
        c.assign([TopicPartition(topic, 0)])
        got = []
        for _ in range(200):
            for records in c.poll(timeout_ms=500).values():
                got += [r.value for r in records]
            if len(got) >= len(values):
                break
    finally:
        c.close(autocommit=False)
    assert got == values
    assert into["frame"] > into["scratch"] > 0


def _batches_with_a_bad_crc_after(n: int = 5) -> bytearray:
    """Two v2 record batches of ``n`` records each; the second's CRC is wrong."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    out = bytearray()
    for base in (0, n):
        b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, offset=base)
        for i in range(base, base + n):
            b.append(timestamp=1000 + i, key=None, value=b"1\t%d" % i, headers=[])
        b.close()
        out += b.buffer()
    out[len(out) // 2 + 17] ^= 0xFF                 # the second batch's CRC (after offset, length, epoch, magic)
    return out


def test_a_part_whose_records_raised_is_drained_so_the_fetch_loop_moves_on(consumer):
    """kafka-python defers an error met after records were taken; dropped later (the partition
    revoked meanwhile), it left the dead part undrained and its fetch loop spun on it forever."""
    from kafka import TopicPartition
    from kafka.errors import CorruptRecordError
    from kafka.record.memory_records import MemoryRecords

    cls = fastpath._segment_records_class(consumer._fetcher.PartitionRecords, fall_back=pytest.fail)
    part = cls(fetch_offset=0, tp=TopicPartition("t", 0), records=MemoryRecords(_batches_with_a_bad_crc_after()),
               check_crcs=True)
    got = part.take(100)                            # the good batch; the CRC error waits for the next take
    assert [len(seg) for seg in got] == [5] and list(got[0].offsets) == [0, 1, 2, 3, 4]
    with pytest.raises(CorruptRecordError):
        part.take(100)
    assert not part                                 # drained: the fetch loop takes nothing more from it
