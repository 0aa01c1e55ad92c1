"""A model slower than one fetch's backlog: the reader keeps its group membership.

One poll can hand over far more lines than a slow model trains within
``max_poll_interval_ms`` (the fast path counts a whole record batch as one record). The reader
then polls between batches without fetching (``ConsumerLoop.keep_alive``); before, the consumer
left the group, every later commit failed and the batches were trained again after a rejoin."""
from __future__ import annotations

import time

from streamtrain.produce import produce
from streamtrain.readers.kafka.source import KafkaSource
from tests.kafka_broker import committed_offsets, end_offsets
from tests.kafka_helpers import read_to_end


def test_a_slow_model_keeps_its_group_membership_and_commits(kafka_bootstrap, kafka_topic, kafka_names,
                                                             kafka_test_consumer, criteo_path):
    import gzip
    with gzip.open(criteo_path, "rb") as f:
        lines = [x for x in f.read().split(b"\n") if x][:6000]
    topic, group = kafka_topic(1), kafka_names("g")
    produce(lines, kafka_bootstrap, topic)
    consumer = {**kafka_test_consumer, "max_poll_interval_ms": 1500}
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic, "group": group,
                       "format": "criteo", "max_wait_ms": 100, "stop_at_end": True,
                       "consumer": consumer}, batch_size=100)
    started = time.monotonic()
    try:
        read_to_end(src, 6000, each=lambda batch: time.sleep(0.06))   # a slow model: 60 batches take 3.6 s > 1.5 s
    finally:
        src.close()
    assert time.monotonic() - started > 3
    assert src.stats["keep_alive_polls"] >= 2
    assert src.stats["commit_failures"] == 0 and src.stats["abandoned_messages"] == 0
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic)


def test_the_end_of_the_stream_reached_while_the_model_trains_keeps_the_group(
        kafka_bootstrap, kafka_topic, kafka_names, kafka_test_consumer, criteo_path):
    """``stop_at_end``: the reader hands over its last batch and ``END``, then only commits what
    the trainer hands back. A model still training that batch after ``max_poll_interval_ms``
    (a slow model, or kernels compiled on a cold cache under load) used to lose the group: the
    consumer thread stopped polling at the end, the heartbeat thread left the group, and the
    last commits failed (seen at kafka-python 2.2.21, test_kafka_deadletter's 1 MB line: committed
    None, not 41). Now it keeps polling (fetching nothing) until the reader closes."""
    import gzip
    from tests.fixtures_prometheus import wait_for
    with gzip.open(criteo_path, "rb") as f:
        lines = [x for x in f.read().split(b"\n") if x][:10]
    topic, group = kafka_topic(1), kafka_names("g")
    produce(lines, kafka_bootstrap, topic)
    interval_s = 1.5
    src = KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic, "group": group,
                       "format": "criteo", "max_wait_ms": 100, "stop_at_end": True,
                       "consumer": {**kafka_test_consumer, "max_poll_interval_ms": int(interval_s * 1000)}},
                      batch_size=1000)
    try:
        gen = src.batches()
        batch = next(gen)                     # the 10 lines, closed by the deadline
        wait_for(lambda: src.loop.ended, 60, "the reader to reach the end of the stream")
        time.sleep(3 * interval_s)            # the model trains the batch for 3 poll intervals
        src.commit(batch.offsets)
        assert next(gen, None) is None        # END
        assert sum(src.committed_offsets().values()) == 10
    finally:
        src.close()
    assert batch.size == 10 and src.stats["commit_failures"] == 0
    assert src.stats["keep_alive_polls"] >= 2
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic) == {0: 10}
