"""The Kafka reader (``reader.type = "kafka"``): an endless stream of log lines → mini-batches,
offsets committed only after the update.

    config.py      keys, defaults, validation (imports no kafka-python)
    clients.py     the settings of every kafka-python client: security, consumer, producer
    source.py      ``KafkaSource``: the poll loop          pending.py   the queue batches are cut from
    batching.py    segments → a parsed batch, line sources offsets.py   applied / due / committed, seek
    rebalance.py   the rebalance listener                 deadletter.py  bad lines to a topic
    segment.py     ``Segment``: messages as one line buffer decode.py   v2 record-batch bodies
    fastpath.py    kafka-python's fetcher handing out Segments (guarded; falls back)
    lag.py         consumer lag and freshness              trace.py     debug trace of applied rows
    admin.py       topic creation

``validate(cfg)`` and ``open_kafka(cfg, batch_size, malformed)`` are what ``readers`` registers.
"""
from __future__ import annotations

from .config import validate


def open_kafka(cfg: dict, batch_size: int, malformed):
    from .source import KafkaSource       # kafka-python is imported only when a reader opens
    return KafkaSource(cfg, batch_size, malformed)


__all__ = ["validate", "open_kafka"]
