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
    trained, started = 0, time.monotonic()
    try:
        for batch in src.batches():
            time.sleep(0.06)                  # a slow model: 60 batches take 3.6 s > 1.5 s
            trained += batch.size
            src.commit(batch.offsets)
    finally:
        src.close()
    assert trained == 6000 and time.monotonic() - started > 3
    assert src.stats["keep_alive_polls"] >= 2
    assert src.stats["commit_failures"] == 0 and src.stats["abandoned_messages"] == 0
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic)
