"""Kafka into a store that writes back (Redis with ``write_back_s``): one flush makes many
batches durable at once, and their offsets reach the consumer thread as one piece of work.

Handed over a batch at a time, each commit waited for the consumer thread's next turn, and a
caught-up consumer's turn is an idle poll (``IDLE_POLL_S``, 0.5 s): 20,000 lines in batches
of 128 were trained in 0.3 s and committed over 80 s, the training thread blocked meanwhile.
"""
from __future__ import annotations

import tests.kafka_broker as broker_mod
from tests.fixtures_prometheus import wait_for
from tests.test_faults_kafka import applied, assert_committed_were_applied, criteo_lines, produce, start_lr_job


def test_a_flush_commits_its_batches_at_once(tmp_path, kafka_bootstrap, kafka_topic, kafka_names, redis_url):
    topic, group, trace = kafka_topic(partitions=4), kafka_names("g"), tmp_path / "trace"
    produce(kafka_bootstrap, topic, criteo_lines(20_000, seed=4))
    end = broker_mod.end_offsets(kafka_bootstrap, topic)
    store = {"backend": "redis", "urls": [redis_url], "timeout_s": 1.0, "write_back_s": 0.5}
    job, runner = start_lr_job(kafka_bootstrap, topic, group, trace, store)     # batches of 50
    try:        # a commit a consumer turn: 200 s at least
        wait_for(lambda: broker_mod.committed_offsets(kafka_bootstrap, topic, group) == end, 90,
                 "every message committed")
    finally:
        job.stop_requested = True
        runner.join(30)
    assert not runner.is_alive()
    stats, flushes = job.source.stats, job.store.stats.flushes
    assert stats["batches"] >= 400 and stats["commits"] <= 2 * (flushes + 1), (stats, flushes)
    assert_committed_were_applied(end, applied(trace))
