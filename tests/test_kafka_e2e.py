"""The kafka reader end to end against a real broker: whole file trained, offsets committed,
deadline batching, several lines per message, csv without a header."""
from __future__ import annotations

import gzip
import resource
import time

from tests.kafka_broker import committed_offsets, end_offsets
from streamtrain.readers import Malformed
from streamtrain.readers.kafka.source import KafkaSource
from streamtrain.produce import produce, produce_file
from tests.fixtures_kafka import read_trace
from tests.kafka_helpers import read_to_end


def _lines(path):
    with gzip.open(path, "rb") as f:
        return [line for line in f.read().split(b"\n") if line]


def test_criteo_file_trains_to_the_end(criteo_path, kafka_bootstrap, kafka_topic, kafka_names,
                                       kafka_job_config, trainers, tmp_path):
    topic, group = kafka_topic(4), kafka_names("g")
    sent = produce_file(criteo_path, kafka_bootstrap, topic)
    assert sent["lines"] == sent["messages"] == 7625
    ends = end_offsets(kafka_bootstrap, topic)
    assert sum(ends.values()) == 7625 and len(ends) == 4

    cfg = kafka_job_config(topic, group, stop_at_end=True, trace_file=str(tmp_path / "trace"))
    summary = trainers("t1", cfg).wait()

    assert summary["examples"] == 7625
    assert summary["malformed"] == 0
    assert committed_offsets(kafka_bootstrap, topic, group) == ends
    trace = read_trace(tmp_path / "trace")
    assert sorted(trace) == sorted((p, o) for p, n in ends.items() for o in range(n))
    assert 0.6 < summary["auc"] < 0.9


def test_a_slow_stream_still_trains_and_a_quiet_one_does_not_spin(kafka_bootstrap, kafka_topic,
                                                                   kafka_names, kafka_test_consumer,
                                                                   criteo_path):
    topic = kafka_topic(2)
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic,
                       "group": kafka_names("g"), "format": "criteo", "max_wait_ms": 150,
                       "consumer": kafka_test_consumer}, batch_size=1000)
    lines = _lines(criteo_path)[:30]
    try:
        gen = src.batches()
        sent = time.time()
        produce(lines[:10], kafka_bootstrap, topic)
        first = next(gen)                       # 10 records < batch_size: closed by the deadline
        assert first.size == 10
        # the messages' own timestamps (the producer's clock, whole milliseconds): between the
        # produce and the batch, however long the group join took under load
        ts = first.timestamps
        assert ts is not None and sent - 0.001 <= ts.min() and ts.max() <= time.time(), (sent, ts)
        src.commit(first.offsets)
        assert sum(src.committed_offsets().values()) == 10

        # quiet: nothing arrives for a while; the reader blocks in poll instead of spinning
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        wall0 = time.monotonic()
        produce_later = time.monotonic() + 1.5
        import threading
        threading.Timer(1.5, lambda: produce(lines[10:30], kafka_bootstrap, topic)).start()
        second = next(gen)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        waited = time.monotonic() - wall0
        cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        assert second.size == 20 and time.monotonic() >= produce_later
        assert cpu < 0.5 * waited, f"{cpu:.2f} s CPU in {waited:.2f} s of waiting"
        src.commit(second.offsets)
        assert sum(src.committed_offsets().values()) == 30
    finally:
        src.close()


def test_several_lines_per_message(criteo_path, kafka_bootstrap, kafka_topic, kafka_names,
                                   kafka_test_consumer):
    topic = kafka_topic(4)
    sent = produce_file(criteo_path, kafka_bootstrap, topic, lines_per_message=50)
    assert sent["messages"] == 153
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic,
                       "group": kafka_names("g"), "format": "criteo", "lines_per_message": 50,
                       "stop_at_end": True, "consumer": kafka_test_consumer}, batch_size=256)
    def check(batch):
        assert len(batch.timestamps) == batch.size
    try:
        sizes = read_to_end(src, 7625, each=check)
    finally:
        src.close()
    assert max(sizes) <= 256                  # cut at message boundaries, never above batch_size
    assert sum(src.committed_offsets().values()) == 153


def test_csv_over_kafka_takes_columns_from_the_config(kafka_bootstrap, kafka_topic, kafka_names,
                                                      kafka_test_consumer):
    topic = kafka_topic(1)
    rows = [f"{i % 2},{i % 7},u{i % 13},g{i % 3}|g{i % 5}".encode() for i in range(500)]
    produce(rows, kafka_bootstrap, topic)
    m = Malformed()
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic,
                       "group": kafka_names("g"), "format": "csv", "stop_at_end": True,
                       "columns": ["click", "age", "user", "genres"], "label": "click",
                       "numeric": ["age"], "multivalue": {"genres": "|"},
                       "consumer": kafka_test_consumer}, batch_size=128, malformed=m)
    def check(batch):
        assert batch.dense_names == ("age",) and set(batch.sparse) == {"user", "genres"}
        assert (batch.sparse["genres"].offsets[1:] - batch.sparse["genres"].offsets[:-1] == 2).all()
    try:
        read_to_end(src, 500, each=check)
    finally:
        src.close()
    assert m.total == 0


def test_full_batches_are_parsed_ahead_and_a_stop_puts_the_next_back(kafka_bootstrap, kafka_topic,
                                                                     kafka_names, kafka_test_consumer,
                                                                     criteo_path):
    """While a batch trains, the next ones are parsed (and prepared) in the reader's parse
    worker; when the reader stops, those go untrained, and nothing past the batches trained is
    committed."""
    import threading
    import time

    topic = kafka_topic(1)
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic,
                       "group": kafka_names("g"), "format": "criteo", "max_wait_ms": 5000,
                       "consumer": kafka_test_consumer}, batch_size=100)
    prepared = []
    src.prepare.fn = lambda batch: prepared.append((batch.size, threading.current_thread().name))
    produce(_lines(criteo_path)[:1000], kafka_bootstrap, topic)
    try:
        gen = src.batches()
        first = next(gen)                       # 1000 queued: the next ones are parsed meanwhile
        assert first.size == 100
        src.commit(first.offsets)
        second = next(gen)
        assert second.size == 100
        src.commit(second.offsets)
        deadline = time.monotonic() + 30        # the parse worker prepares two ahead while 2 "trains"
        while len(prepared) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(prepared) == 4               # batches 1, 2 and the two ahead: no more
        assert all(n == 100 and name.startswith("streamtrain-kafka-parse") for n, name in prepared)
        src.request_stop()
        for _ in gen:                           # the stop ends the loop at its next check
            pass
        assert sum(src.committed_offsets().values()) == 200
    finally:
        src.close()
