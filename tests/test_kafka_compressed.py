"""Compressed record batches through the Kafka fast path: lz4 and zstd decompressed straight from
the fetch (``readers/kafka/codecs.py``), snappy by the library's own codec (python-snappy, in the
compression extra), each decoded by the compiled pass, every line once."""
from __future__ import annotations

import pytest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from streamtrain.produce import produce
from streamtrain.readers.kafka import codecs
from streamtrain.readers.kafka.source import KafkaSource
from tests.kafka_broker import committed_offsets, end_offsets
from tests.kafka_helpers import read_to_end

CODECS = {"lz4": (3, "lz4"), "zstd": (4, "zstandard"), "snappy": (2, "snappy")}

# Both tests end by asserting every offset committed: on a loaded host a 2 s session or a 5 s
# poll interval can drop the consumer from its group before the closing commit (seen in CI).
IN_GROUP = {"session_timeout_ms": 10000, "max_poll_interval_ms": 60000}


def _batch(compression_type, n=500):
    b = MemoryRecordsBuilder(magic=2, compression_type=compression_type, batch_size=1 << 22, offset=0)
    for i in range(n):
        b.append(timestamp=1000 + i, key=None, value=b"line %d\tx" % i, headers=[])
    b.close()
    return b.buffer()


@pytest.mark.parametrize("codec", ["lz4", "zstd", "gzip"])
def test_uncompress_leaves_what_the_librarys_does(codec):
    ct = {"lz4": 3, "zstd": 4, "gzip": 1}[codec]
    if codec in CODECS:
        pytest.importorskip(CODECS[codec][1])
    buf = _batch(ct)
    ours, lib = MemoryRecords(buf).next_batch(), MemoryRecords(buf).next_batch()
    codecs.uncompress(ours)
    lib._maybe_uncompress()
    assert bytes(ours._buffer[ours._pos:]) == bytes(lib._buffer[lib._pos:])
    assert [r.value for r in ours] == [b"line %d\tx" % i for i in range(500)]


def test_a_frame_with_bytes_after_it_goes_to_the_library(monkeypatch):
    pytest.importorskip("lz4")
    batch = MemoryRecords(_batch(3)).next_batch()
    batch._buffer = bytearray(batch._buffer) + b"\0\0\0\0"
    calls = []
    monkeypatch.setattr(DefaultRecordBatch, "_maybe_uncompress", lambda self: calls.append(1))
    codecs.uncompress(batch)
    assert calls == [1]


@pytest.mark.parametrize("codec", ["lz4", "zstd", "snappy"])
def test_compressed_topics_train_every_line_once_on_the_fast_path(codec, kafka_bootstrap, kafka_topic, kafka_names,
                                                                  kafka_test_consumer, monkeypatch):
    pytest.importorskip(CODECS[codec][1])
    topic, group = kafka_topic(2), kafka_names("g")
    lines = [b"\t".join([str(i % 2).encode(), *[b"%d" % (i % 7)] * 13, *[b"%08x" % (i % 97)] * 26])
             for i in range(3000)]
    produce(lines[:1500], kafka_bootstrap, topic, producer_settings={"compression_type": codec, "linger_ms": 50})
    produce(lines[1500:], kafka_bootstrap, topic, lines_per_message=3,
            producer_settings={"compression_type": codec, "linger_ms": 50})
    library = []
    real = DefaultRecordBatch._maybe_uncompress
    monkeypatch.setattr(DefaultRecordBatch, "_maybe_uncompress",            # (counts compressed batches)
                        lambda self: (library.append(self.compression_type), real(self)))
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic, "group": group,
                       "format": "criteo", "stop_at_end": True, "max_wait_ms": 50,
                       "consumer": {**kafka_test_consumer, **IN_GROUP}}, 256)
    positives = []
    try:
        read_to_end(src, 3000, each=lambda batch: positives.append(int(batch.labels.sum())))
        assert src.fast and src.fastpath.fell_back is None
    finally:
        src.close()
    assert sum(positives) == 1500
    assert src.stats["messages"] == 1500 + 500
    if codec == "snappy":                       # kafka-python's codec; the decode after it is the fast path's
        assert set(library) - {0} == {CODECS[codec][0]}     # (0: uncompressed, the fast path's own sample)
    else:                                       # every compressed batch decompressed by codecs.uncompress
        assert not any(library)
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic)


def test_produce_cli_compression_writes_lz4_batches(criteo_path, kafka_bootstrap, kafka_names, kafka_test_consumer,
                                                    monkeypatch):
    pytest.importorskip("lz4")
    import subprocess
    import sys
    topic, group = kafka_names("p"), kafka_names("g")
    out = subprocess.run([sys.executable, "-m", "streamtrain", "produce", str(criteo_path),
                          "--bootstrap", kafka_bootstrap, "--topic", topic, "--partitions", "1",
                          "--limit", "2000", "--lines-per-message", "10", "--compression", "lz4"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = []
    monkeypatch.setitem(codecs.DECOMPRESS, codecs.LZ4, lambda view: seen.append(len(view)) or codecs._lz4(view))
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic, "group": group,
                       "format": "criteo", "stop_at_end": True, "max_wait_ms": 50,
                       "consumer": {**kafka_test_consumer, **IN_GROUP}}, 256)
    try:
        read_to_end(src, 2000)
    finally:
        src.close()
    assert len(seen) >= 1
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic) == {0: 200}


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_a_decompressed_batch_decodes_as_the_librarys_records(codec):
    """lz4's bytearray is joined in place (``fastpath._segment_in_place``), zstd's bytes copied:
    both give the library's values (a value with a newline in it counts two lines), offsets and
    timestamps, from the fetch offset on."""
    import numpy as np

    from streamtrain.readers.kafka import fastpath
    from streamtrain.readers.kafka.segment import Segment
    pytest.importorskip(CODECS[codec][1])
    b = MemoryRecordsBuilder(magic=2, compression_type=CODECS[codec][0], batch_size=1 << 22, offset=100)
    for i in range(400):
        b.append(timestamp=1000 + i, key=None, headers=[],
                 value=b"%d\tline %d" % (i % 2, i) * 5 + (b"\nx" if i % 3 == 0 else b""))
    b.close()

    class TP:
        topic, partition = "t", 0
    seg = fastpath.segment_of_batch(TP, MemoryRecords(b.buffer()).next_batch(), 105)
    lib = [r for r in MemoryRecords(b.buffer()).next_batch() if r.offset >= 105]
    ref = Segment.from_values("t", 0, [r.value for r in lib], [r.offset for r in lib], [r.timestamp for r in lib], 500)
    assert bytes(seg.buf) == bytes(ref.buf) and seg.next_offset == 500
    assert np.array_equal(seg.ends, ref.ends) and np.array_equal(seg.offsets, np.arange(105, 500))
    assert np.array_equal(seg.ts, ref.ts) and seg.lines.tolist() == ref.lines.tolist()
