"""A Kafka record too large to fetch (issue 24, item 4), against the real broker.

A 25 MB or 40 MB record used to wedge its partition: kafka-python refused every fetch of it
("Invalid frame length", ~110 ERROR lines a second) and Tansu packs the records before it into
the same fetch, so those were never trained either. Now the reader finds it, skips it, counts
it (malformed ``too_large``), dead-letters it by reference and commits past it; the records
before and after it are trained once each, and the log says so once.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kafka
import pytest
from kafka import KafkaProducer

from tests.fixtures_kafka import read_trace
from tests.kafka_broker import TEST_CONSUMER, committed_offsets, create_topic
from tests.test_kafka_deadletter import _dead_letters, _good

pytestmark = pytest.mark.timeout(300)
ROOT = Path(__file__).resolve().parents[1]
# kafka-python 3 refuses a frame over the reader's receive_message_max_bytes (about 20 MB);
# 2.2 gives its broker connections its own limit of 100 MB, so it reads these records whole
LIMITED = tuple(int(x) for x in kafka.__version__.split(".")[:2]) >= (2, 3)


def big_producer(bootstrap: str, largest: int) -> KafkaProducer:
    settings = {"bootstrap_servers": bootstrap, "max_request_size": largest + (1 << 20), "acks": 1, "linger_ms": 0}
    for key, value in (("buffer_memory", 2 * largest + (8 << 20)), ("enable_idempotence", False)):
        if key in KafkaProducer.DEFAULT_CONFIG:
            settings[key] = value
    return KafkaProducer(**settings)


def fill(bootstrap: str, topic: str, size: int) -> dict:
    """Partition 0: 300 good lines, a record of ``size`` bytes, 300 good lines; partition 1:
    200 good lines, then one as large (the last record: committed past all the same).
    Returns {partition: offset of its large record}."""
    p = big_producer(bootstrap, size)
    try:
        big = {}
        for partition, before, after in ((0, 300, 300), (1, 200, 0)):
            for i in range(before):
                p.send(topic, _good(i), partition=partition)
            p.flush()
            big[partition] = p.send(topic, b"x" * size, partition=partition).get(120).offset
            for i in range(after):
                p.send(topic, _good(i), partition=partition)
            p.flush()
        return big
    finally:
        p.close()


@pytest.mark.parametrize("mb", [25, 40])
def test_a_record_too_large_to_fetch_is_skipped_counted_dead_lettered_and_committed_past(
        mb, kafka_bootstrap, kafka_names, tmp_path):
    topic, group, dead = kafka_names("huge"), kafka_names("g"), kafka_names("dead")
    create_topic(kafka_bootstrap, topic, 2)
    big = fill(kafka_bootstrap, topic, mb << 20)
    assert big == {0: 300, 1: 200}
    trace = tmp_path / "trace.txt"
    reader = {"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic, "group": group, "format": "criteo",
              "max_wait_ms": 100, "stop_at_end": True, "dead_letter": dead, "trace_file": str(trace),
              "consumer": TEST_CONSUMER}
    lr = json.loads((ROOT / "examples" / "lr.json").read_text())
    cfg = tmp_path / "job.json"
    cfg.write_text(json.dumps({**lr, "batch_size": 128, "reader": reader, "metrics": {"enabled": False}}))
    out = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(cfg), "--summary", str(tmp_path / "s.json")],
                         capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["examples"] == 800
    reason = "too_large" if LIMITED else "field_length"      # (kafka-python 2.2 reads them: bad lines)
    assert summary["malformed_by_reason"][reason] == 2 and summary["malformed"] == 2

    applied = read_trace(trace)                         # every good record trained, once
    assert sorted(applied) == sorted([(0, o) for o in range(601) if o != 300] + [(1, o) for o in range(200)])
    assert committed_offsets(kafka_bootstrap, topic, group) == {0: 601, 1: 201}

    letters = sorted(_dead_letters(kafka_bootstrap, dead, 2), key=lambda r: dict(r.headers)["source_partition"])
    assert len(letters) == 2
    for partition, letter in enumerate(letters):
        headers = dict(letter.headers)
        assert headers["reason"] == reason.encode() and headers["source_topic"] == topic.encode()
        assert (int(headers["source_partition"]), int(headers["source_offset"])) == (partition, big[partition])
        if LIMITED:                                                     # by reference
            assert letter.value == b"" and (mb << 20) < int(headers["size"]) < (mb << 20) + 4096
        else:                                                           # cut to what the producer takes
            assert int(headers["truncated"]) == mb << 20

    skipped = [line for line in out.stderr.splitlines() if "skipped the record at" in line]
    assert len(skipped) == (2 if LIMITED else 0), skipped                 # once per record
    if LIMITED:
        assert f"{topic}[0] offset 300: fetched alone it is" in skipped[0] + skipped[1]
    assert "Invalid frame length" not in out.stderr      # not ~110 lines a second: none
    # a request that shared the dropped connection (a metadata refresh) may log its failure: a few
    # lines in all, where the wedged reader logged ~110 a second
    errors = [line for line in out.stderr.splitlines() if " ERROR " in line]
    assert len(errors) <= 8 and not any(" ERROR streamtrain" in line for line in errors), errors


def test_the_frame_size_is_read_from_the_library_error():
    from kafka.errors import InvalidReceiveError

    from streamtrain.readers.kafka.oversize import refused_frame
    assert refused_frame(InvalidReceiveError("Invalid frame length: 26247637")) == 26247637
    assert refused_frame(ConnectionError("reset by peer")) is None
