"""Topic creation (``streamtrain produce --partitions``, tests, benchmarks)."""
from __future__ import annotations

import time

from kafka import KafkaAdminClient, KafkaConsumer
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from .clients import client_settings, patient, quiet_library_logs


def create_topic(bootstrap, topic: str, partitions: int = 4, timeout: float = 15.0,
                 security: dict | None = None) -> None:
    """Create ``topic`` (no error when it exists) and wait until its partitions are visible."""
    quiet_library_logs()
    settings = client_settings(bootstrap, security)
    admin = KafkaAdminClient(**settings, **patient(KafkaAdminClient))
    try:
        try:
            admin.create_topics([NewTopic(topic, partitions, 1)])
        except TopicAlreadyExistsError:
            pass
    finally:
        admin.close()
    probe = KafkaConsumer(**settings, **patient(KafkaConsumer))
    try:
        deadline = time.monotonic() + timeout
        while len(probe.partitions_for_topic(topic) or ()) < partitions:
            if time.monotonic() > deadline:
                raise TimeoutError(f"topic {topic!r} has no {partitions} partitions after {timeout} s")
            time.sleep(0.05)
    finally:
        probe.close()
