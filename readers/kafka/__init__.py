"""The Kafka reader (``reader.type = "kafka"``): an endless stream of log lines → mini-batches,
offsets committed only after the update.

    config.py      keys, defaults, validation (imports no kafka-python)
    clients.py     the settings of every kafka-python client: security, consumer, producer
    source.py      ``KafkaSource``: the reader as the job sees it (the training thread's side)
    loop.py        ``ConsumerLoop``: the consumer thread — poll, decode, cut, parse, hand over
    handoff.py     batches to the training thread; commits, seeks and settles back
    offsets.py     ``PartitionOffsets``: owned / applied / due / committed (pure)
    commits.py     ``Committer``: sends what is due     rebalance.py  ``Rebalance``: the listener
    pending.py     the queue batches are cut from        batching.py   segments → a parsed batch
    segment.py     ``Segment``: messages as one line buffer decode.py   v2 record-batch bodies
    fastpath.py    kafka-python's fetcher handing out Segments (guarded; falls back)
    fetchdecode.py a partition's whole fetch decoded at once  zerocopy.py  fetch responses as views
    lag.py         consumer lag and freshness              trace.py     debug trace of applied rows
    admin.py       topic creation                          connect.py   the consumer made, waiting for a broker
    deadletter.py  bad lines to a topic                    oversize.py  records too large to fetch: skipped

The reader type ``kafka`` is ``KafkaReader`` below, registered in ``readers.source.READERS``:
its keys are ``config.OPTIONS``.
"""
from __future__ import annotations

from ..source import Reader, register
from .config import OPTIONS, validate


@register
class KafkaReader(Reader):
    """Topics of a Kafka cluster: mini-batches of their lines, offsets committed after the update."""

    kind = "kafka"
    options = OPTIONS
    offline = False

    @classmethod
    def check_config(cls, cfg):
        return validate(cfg)

    @classmethod
    def open(cls, cfg, batch_size, malformed):
        from .source import KafkaSource       # kafka-python is imported only when a reader opens
        return KafkaSource(cfg, batch_size, malformed)

    @classmethod
    def test_params(cls):
        return {"bootstrap": "127.0.0.1:9092", "topic": "clicks", "group": "trainers"}


__all__ = ["KafkaReader"]
