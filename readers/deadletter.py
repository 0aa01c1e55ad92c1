"""A dead-letter topic: every bad input line, as it was, with why it was rejected.

Each message's value is the raw line (undecodable bytes included); its headers are
``reason`` (one of ``readers.malformed.REASONS``) and, when known, ``source_topic``,
``source_partition``, ``source_offset``. The Kafka reader flushes the dead-letter producer
before it commits the offsets the bad lines came from, so a committed bad line is never lost.
"""
from __future__ import annotations

import logging

log = logging.getLogger("streamtrain.kafka")

PRODUCER_DEFAULTS = {"linger_ms": 20, "acks": 1}


class DeadLetter:
    def __init__(self, bootstrap, topic: str, producer_settings: dict | None = None):
        from kafka import KafkaProducer

        self.topic = topic
        self.sent = 0
        self._producer = KafkaProducer(bootstrap_servers=bootstrap,
                                       **{**PRODUCER_DEFAULTS, **(producer_settings or {})})
        self._unflushed = 0

    def send(self, line: bytes, reason: str, source: tuple | None = None) -> None:
        headers = [("reason", reason.encode())]
        if source is not None:
            topic, partition, offset = source
            headers += [("source_topic", str(topic).encode()),
                        ("source_partition", str(int(partition)).encode()),
                        ("source_offset", str(int(offset)).encode())]
        self._producer.send(self.topic, value=bytes(line), headers=headers)
        self.sent += 1
        self._unflushed += 1

    def flush(self, timeout: float | None = 30.0) -> None:
        if self._unflushed:
            self._producer.flush(timeout=timeout)
            self._unflushed = 0

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._producer.close(timeout=5)
