"""A bad line over 1 MB with ``dead_letter`` set (issue 15, defect 1): dead-lettered whole (the
dead-letter producer accepts what the consumer fetches), or cut with a ``truncated`` header
when it still does not fit; either way committed, and the reader goes on."""
from __future__ import annotations

from kafka import KafkaConsumer

from streamtrain.produce import produce
from streamtrain.readers.kafka.source import KafkaSource
from tests.kafka_broker import committed_offsets, end_offsets
from tests.kafka_helpers import read_to_end

BIG = 1_500_000


def _good(i: int) -> bytes:
    return b"\t".join([str(i % 2).encode(), *[b"%d" % (i % 7)] * 13, *[b"%08x" % (i % 97)] * 26])


def _dead_letters(bootstrap, topic, expect: int):
    big = {"max_partition_fetch_bytes": 8 << 20}
    if "receive_message_max_bytes" in KafkaConsumer.DEFAULT_CONFIG:       # kafka-python >= 2.3
        big["receive_message_max_bytes"] = 64 << 20
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      enable_auto_commit=False, group_id=None, **big)
    got = []
    try:
        for _ in range(50):
            for recs in c.poll(timeout_ms=200).values():
                got.extend(recs)
            if len(got) >= expect:
                break
    finally:
        c.close()
    return got


def _run(bootstrap, topic, group, dead, consumer, **reader):
    src = KafkaSource({"type": "kafka", "bootstrap": bootstrap, "topic": topic, "group": group,
                       "format": "criteo", "stop_at_end": True, "max_wait_ms": 50,
                       "dead_letter": dead, "consumer": consumer, **reader}, 16)
    try:
        rows = sum(read_to_end(src))
        dl = src.dead
    finally:
        src.close()
    return rows, dl


def test_a_bad_line_over_1mb_is_dead_lettered_whole_and_committed(kafka_bootstrap, kafka_topic,
                                                                  kafka_names, kafka_test_consumer):
    topic, group, dead = kafka_topic(1), kafka_names("g"), kafka_names("dead")
    bad = b"x" * BIG                                   # one over-long field: a bad line
    produce([_good(0), bad, *[_good(i) for i in range(1, 40)]], kafka_bootstrap, topic)
    rows, dl = _run(kafka_bootstrap, topic, group, dead, kafka_test_consumer)
    assert rows == 40
    assert (dl.sent, dl.truncated, dl.failed) == (1, 0, 0)
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic) == {0: 41}
    [msg] = _dead_letters(kafka_bootstrap, dead, 1)
    headers = dict(msg.headers)
    assert msg.value == bad
    assert headers["reason"] in (b"field_length", b"field_count") and headers["source_offset"] == b"1"
    assert "truncated" not in headers


def test_a_bad_line_too_large_for_the_producer_is_cut_with_a_header(kafka_bootstrap, kafka_topic,
                                                                    kafka_names, kafka_test_consumer):
    topic, group, dead = kafka_topic(1), kafka_names("g"), kafka_names("dead")
    bad = b"y" * BIG
    produce([bad, _good(1)], kafka_bootstrap, topic)
    rows, dl = _run(kafka_bootstrap, topic, group, dead, kafka_test_consumer,
                    producer={"max_request_size": 300_000})
    assert rows == 1
    assert (dl.sent, dl.truncated, dl.failed) == (1, 1, 0)
    assert committed_offsets(kafka_bootstrap, topic, group) == {0: 2}
    [msg] = _dead_letters(kafka_bootstrap, dead, 1)
    headers = dict(msg.headers)
    assert headers["truncated"] == str(BIG).encode() and headers["reason"] in (b"field_length", b"field_count")
    assert 0 < len(msg.value) <= 300_000 and bad.startswith(msg.value)
