"""A dead-letter topic: every bad input line, as it was, with why it was rejected.

Each message's value is the raw line (undecodable bytes included); its headers are
``reason`` (one of ``readers.malformed.REASONS``) and, when known, ``source_topic``,
``source_partition``, ``source_offset``. A record too large to fetch (``too_large``) is sent by
reference: an empty value, the source headers and ``size``. The Kafka reader flushes the dead-letter producer
before it commits the offsets the bad lines came from, so a committed bad line is in the
topic — whole, or cut:

* the producer accepts messages as large as the consumer fetches (``clients.producer_settings``);
* a line still too large for the producer, or refused by the broker as too large, is sent
  again cut to what fits, with header ``truncated`` = its length in bytes;
* a line that cannot be sent even so (the broker refuses it, or is unreachable until the
  flush gives up) is counted in ``failed`` and logged with its source. It is never retried
  forever and never stops the reader: its offset is committed with the rest.
"""
from __future__ import annotations

import logging

from kafka import KafkaProducer
from kafka.errors import KafkaError, MessageSizeTooLargeError

log = logging.getLogger("streamtrain.kafka")

HEADROOM = 4096                    # bytes a record's framing and headers may need beside the value
BROKER_DEFAULT_MAX = 1_000_000     # what a broker refusing a record as too large surely takes
                                   # (Kafka's message.max.bytes default is 1048588)


def _headers(reason: str, source, truncated: int | None):
    headers = [("reason", reason.encode())]
    if source is not None:
        topic, partition, offset = source
        headers += [("source_topic", str(topic).encode()),
                    ("source_partition", str(int(partition)).encode()),
                    ("source_offset", str(int(offset)).encode())]
    if truncated is not None:
        headers.append(("truncated", str(truncated).encode()))
    return headers


class DeadLetter:
    def __init__(self, topic: str, producer_settings: dict):
        self.topic = topic
        self.limit = int(producer_settings.get("max_request_size", 1 << 20))
        self.sent = self.truncated = self.failed = 0
        settings = dict(producer_settings)
        if "buffer_memory" in KafkaProducer.DEFAULT_CONFIG:     # kafka-python 2 caps a record at it
            settings.setdefault("buffer_memory", max(32 << 20, 2 * self.limit))
        self._producer = KafkaProducer(**settings)
        self._unflushed: list = []          # (future, line, reason, source, cut to)

    def send(self, line: bytes, reason: str, source: tuple | None = None) -> None:
        self._send(bytes(line), reason, source, None)

    def send_reference(self, reason: str, source: tuple, size: int) -> None:
        """A record that could not be read at all: an empty value, its source headers and
        ``size`` (the bytes of the fetch that held it alone)."""
        try:
            fut = self._producer.send(self.topic, value=b"", headers=[*_headers(reason, source, None),
                                                                       ("size", str(int(size)).encode())])
        except KafkaError as err:
            return self._lost(b"", source, err)
        self._unflushed.append((fut, b"", reason, source, None))

    def _send(self, line: bytes, reason: str, source, cut: int | None) -> None:
        value = line if cut is None else line[:cut]
        try:
            fut = self._producer.send(self.topic, value=value,
                                      headers=_headers(reason, source, None if cut is None else len(line)))
        except MessageSizeTooLargeError:    # larger than max_request_size / buffer_memory
            if cut is None:
                return self._send(line, reason, source, max(0, self.limit - HEADROOM))
            return self._lost(line, source, "too large even when cut")
        except KafkaError as err:
            return self._lost(line, source, err)
        self._unflushed.append((fut, line, reason, source, cut))

    def _lost(self, line: bytes, source, why) -> None:
        self.failed += 1
        log.warning("dead-letter topic %s: could not send the bad line of %d bytes from %s (%s); "
                    "counted and committed", self.topic, len(line), source, why)

    def flush(self, timeout: float | None = 30.0) -> None:
        """Deliver what was sent; a line refused as too large goes again, cut."""
        for _ in range(2):                  # the second round delivers the cut lines
            if not self._unflushed:
                return
            pending, self._unflushed = self._unflushed, []
            try:
                self._producer.flush(timeout=timeout)
            except KafkaError as err:       # a flush timeout: what did not make it is lost
                log.warning("dead-letter topic %s: flush failed (%s)", self.topic, err)
            for fut, line, reason, source, cut in pending:
                if fut.succeeded():
                    self.sent += 1
                    self.truncated += cut is not None
                elif (cut is None and isinstance(fut.exception, MessageSizeTooLargeError)
                      and len(line) > BROKER_DEFAULT_MAX - HEADROOM):
                    self._send(line, reason, source, min(self.limit, BROKER_DEFAULT_MAX) - HEADROOM)
                else:
                    self._lost(line, source, fut.exception if fut.is_done else "not delivered in time")
        self._unflushed = []

    def close(self) -> None:
        try:
            self.flush()
        finally:
            self._producer.close(timeout=5)
