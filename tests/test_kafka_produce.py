"""``streamtrain produce`` and the record-batch decoder behind the Kafka reader's fast path."""
from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from tests.kafka_broker import end_offsets
from streamtrain.readers.kafka.decode import decode_v2
from streamtrain.readers.kafka.segment import Segment


def test_produce_cli_lines_per_message_limit_and_rate(criteo_path, kafka_bootstrap, kafka_names):
    topic = kafka_names("p")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "streamtrain", "produce", str(criteo_path),
                          "--bootstrap", kafka_bootstrap, "--topic", topic, "--partitions", "2",
                          "--lines-per-message", "10", "--limit", "3000", "--rate", "6000"],
                         capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert out.returncode == 0, out.stderr[-2000:]
    assert "produced 3000 lines in 300 messages" in out.stderr
    assert sum(end_offsets(kafka_bootstrap, topic).values()) == 300
    assert took >= 0.45                               # 3000 lines at 6000/s: at least 0.5 s


def test_produce_cli_loops_over_the_file(criteo_path, kafka_bootstrap, kafka_names):
    topic = kafka_names("p")
    out = subprocess.run([sys.executable, "-m", "streamtrain", "produce", str(criteo_path),
                          "--bootstrap", kafka_bootstrap, "--topic", topic, "--partitions", "1",
                          "--loop", "--limit", "10000", "--lines-per-message", "100"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert end_offsets(kafka_bootstrap, topic) == {0: 100}


def _batch_bytes(records, base_offset=0, t0=1_700_000_000_000):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 24)
    for i, (key, value, headers, dt) in enumerate(records):
        b.append(i, timestamp=t0 + dt, key=key, value=value, headers=headers)
    return bytes(b.build())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decoder_agrees_with_kafka_python(seed):
    from kafka.record.default_records import DefaultRecordBatch
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(300):
        n = int(rng.choice([0, 5, 63, 64, 200, 9000, 20000]))
        value = None if i % 37 == 5 else bytes(rng.integers(32, 127, n, dtype=np.uint8))
        key = None if i % 3 else f"k{i}".encode() * int(rng.integers(1, 50))
        headers = [("h", b"x" * int(rng.integers(0, 100)))] if i % 4 == 0 else []
        recs.append((key, value, headers, int(rng.integers(0, 10 ** int(rng.integers(0, 7))))))
    raw = _batch_bytes(recs)
    ours = DefaultRecordBatch(raw)
    offs, tsd, vals = decode_v2(ours._buffer, ours._pos, ours.records_count)
    theirs = list(DefaultRecordBatch(raw))
    assert offs == [r.offset for r in theirs]
    assert [ours.first_timestamp + d for d in tsd] == [r.timestamp for r in theirs]
    assert [None if v is None else bytes(v) for v in vals] == [r.value for r in theirs]


def test_segment_lines_and_split():
    seg = Segment.from_values("t", 0, [b"a", b"b\nc", None, b"d\ne\nf"], [10, 11, 12, 13],
                              [1000, 2000, 3000, 4000])
    seg.epoch = 3                       # its partition's epoch (offsets.py): kept by both parts
    assert seg.buf == b"a\nb\nc\n\nd\ne\nf\n"
    assert seg.lines.tolist() == [1, 3, 4, 7] and seg.n_lines == 7
    head, tail = seg.split(2)
    assert head.epoch == tail.epoch == 3
    assert head.buf == b"a\nb\nc\n" and head.next_offset == 12 and head.ts.tolist() == [1.0, 2.0]
    assert tail.buf == b"\nd\ne\nf\n" and tail.lines.tolist() == [1, 4] and tail.next_offset == 14
    assert tail.ends.tolist() == [0, 6]
