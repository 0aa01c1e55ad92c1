"""A batch of a partition's old log, held by the trainer across a recreated topic, against a real
broker (Tansu keeps its log in memory: a restart recreates the topic from offset 0).

The trainer here is the test: it holds every batch of the old log, unapplied, until the reader
hands it a batch of the new log (the reader followed the log down: its epoch went up), then
applies them all in order. The old batches' offsets (up to 400) are stale: the commit must end
at the new log's end, never above what was applied from the new log (it would have been pushed
to the old, higher offsets, past new records never trained)."""
from __future__ import annotations

import time

import pytest

from streamtrain.readers.kafka.source import KafkaSource
from tests.test_faults_kafka import criteo_lines, produce

pytestmark = pytest.mark.timeout(240)
broker_mod = pytest.importorskip("tests.kafka_broker")


def produce_to_partition_0(bootstrap, topic, lines) -> None:
    """The new log's records all to partition 0: whether the test or the reader's metadata
    request (Tansu: 4 partitions) creates the topic again, only partition 0 has a new log."""
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=bootstrap, **broker_mod.patient(KafkaProducer))
    try:
        for line in lines:
            producer.send(topic, line, partition=0)
        producer.flush(30)
    finally:
        producer.close()


def test_a_batch_of_the_old_log_applied_after_a_recreated_topic_is_not_committed():
    broker = broker_mod.TansuBroker().start()
    topic, group = "epoch", "g-epoch"
    src = None
    try:
        broker_mod.create_topic(broker.bootstrap, topic, partitions=1)
        produce(broker.bootstrap, topic, criteo_lines(400, seed=1))
        src = KafkaSource({"type": "kafka", "bootstrap": broker.bootstrap, "topic": topic, "group": group,
                           "format": "criteo", "max_wait_ms": 100,
                           "consumer": dict(broker_mod.TEST_CONSUMER)}, batch_size=50)
        batches = src.batches()
        first = next(batches)
        src.commit(first.offsets)
        held, old_end = [], 0
        while old_end < 400:                         # the whole old log cut, none applied
            held.append(next(batches))
            old_end = max(old_end, *(int(o) for o in held[-1].offsets.values()))
        broker.stop()
        broker.start()
        broker_mod.create_topic(broker.bootstrap, topic, partitions=1)
        produce_to_partition_0(broker.bootstrap, topic, criteo_lines(30, seed=2))
        ends = {p: n for p, n in broker_mod.end_offsets(broker.bootstrap, topic).items() if n}
        assert ends == {0: 30}
        new = next(batches)                          # bounded by the test's timeout
        while all(int(o) >= 50 for o in new.offsets.values()):      # old batches delivered again
            held.append(new)
            new = next(batches)
        assert src.offsets.epoch((topic, 0)) >= 1               # the reader followed the log down
        for b in held:                               # the trainer's queue: old batches first
            src.commit(b.offsets)
            assert all(o <= 30 for o in src.committed_offsets().values()), \
                (src.committed_offsets(), b.offsets, new.offsets, src.offsets.epochs, ends, src.stats)
        src.commit(new.offsets)
        deadline = time.monotonic() + 90
        while src.committed_offsets() != {(topic, p): n for p, n in ends.items()}:
            assert time.monotonic() < deadline, f"committed {src.committed_offsets()}, log end {ends}"
            b = next(batches)
            src.commit(b.offsets)
            assert all(o <= 30 for o in src.committed_offsets().values())
        assert broker_mod.committed_offsets(broker.bootstrap, topic, group)[0] == 30
        assert src.offsets.stale >= 1
    finally:
        if src is not None:
            src.close()
        broker.stop()
