"""Bad input over Kafka: counted per reason, skipped, dead-lettered with the reason; never fatal."""
from __future__ import annotations

import collections
import gzip
import random
import time

from streamtrain.readers import Malformed
from streamtrain.readers.kafka.source import KafkaSource
from streamtrain.produce import produce
from tests.kafka_helpers import read_to_end


def _corrupt(line: bytes, kind: str, rng) -> bytes:
    fields = line.split(b"\t")
    if kind == "decode":
        fields[15] = b"\xff\xfe" + fields[15]
    elif kind == "field_count":
        del fields[rng.randrange(1, len(fields))]
    elif kind == "number":
        fields[rng.randrange(1, 14)] = b"12x"
    elif kind == "label":
        fields[0] = b"2"
    return b"\t".join(fields)


def _mixed_stream(criteo_path, seed=0):
    """The Criteo file with 1% malformed lines of each kind spliced in (at random places)."""
    rng = random.Random(seed)
    with gzip.open(criteo_path, "rb") as f:
        good = [line for line in f.read().split(b"\n") if line]
    n_bad = len(good) // 100
    stream = [(line, None) for line in good]
    for kind in ("decode", "field_count", "number", "label"):
        for _ in range(n_bad):
            stream.insert(rng.randrange(len(stream) + 1),
                          (_corrupt(good[rng.randrange(len(good))], kind, rng), kind))
    return stream, len(good), n_bad


def _dead_letters(bootstrap, topic, expect, timeout=20.0):
    from kafka import KafkaConsumer
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      enable_auto_commit=False, group_id=None)
    got = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < expect and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=300).values():
                got.extend(recs)
    finally:
        c.close()
    return got


def test_one_percent_malformed_of_each_kind(criteo_path, kafka_bootstrap, kafka_topic,
                                            kafka_names, kafka_test_consumer):
    stream, n_good, n_bad = _mixed_stream(criteo_path)
    topic, dead = kafka_topic(4), kafka_names("dead")
    produce([line for line, _ in stream], kafka_bootstrap, topic, lines_per_message=1)
    m = Malformed()
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic,
                       "group": kafka_names("g"), "format": "criteo", "stop_at_end": True,
                       "dead_letter": dead, "consumer": kafka_test_consumer},
                      batch_size=256, malformed=m)
    try:
        read_to_end(src, n_good)                               # all good records train
        committed = sum(src.committed_offsets().values())
    finally:
        src.close()
    assert m.snapshot() == {"decode": n_bad, "field_count": n_bad, "number": n_bad, "label": n_bad,
                            "field_length": 0, "graph": 0, "too_large": 0}
    assert committed == len(stream)                            # bad lines never block commits

    letters = _dead_letters(kafka_bootstrap, dead, 4 * n_bad)
    assert len(letters) == 4 * n_bad
    by_reason = collections.Counter(dict(r.headers)["reason"].decode() for r in letters)
    assert by_reason == {"decode": n_bad, "field_count": n_bad, "number": n_bad, "label": n_bad}
    sent = {line: kind for line, kind in stream if kind}
    for r in letters:                                          # each bad line, as it was, with its reason
        h = dict(r.headers)
        assert sent[r.value] == h["reason"].decode()
        assert h["source_topic"].decode() == topic and int(h["source_offset"]) >= 0


def test_bad_lines_inside_multi_line_messages(kafka_bootstrap, kafka_topic, kafka_names,
                                              kafka_test_consumer):
    topic = kafka_topic(1)
    good = b"1 3:0.5 7:1"
    msgs = [b"\n".join([good, b"oops", good]), b"\n".join([good, b"1 a:b", b"\xff 1:1"]), b"", good]
    produce(msgs, kafka_bootstrap, topic)
    m = Malformed()
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic,
                       "group": kafka_names("g"), "format": "libsvm", "stop_at_end": True,
                       "consumer": kafka_test_consumer}, batch_size=100, malformed=m)
    try:
        batches = list(src.batches())
    finally:
        src.close()
    assert sum(b.size for b in batches) == 4
    assert m.snapshot() == {"decode": 1, "field_count": 0, "number": 1, "label": 1, "field_length": 0, "graph": 0, "too_large": 0}
