"""``Rebalance``: kafka-python's rebalance listener, run inside ``poll`` (on the consumer thread
with kafka-python 2, on kafka-python 3's IO thread, where nothing may block on the network).

On revocation, first everything trained is made durable and committed while the partitions
are still owned (``settle``: the job's idle hook with ``due_only=False``, then the due commits
sent — by the consumer thread before the poll that rebalances when the listener runs on
kafka-python 3's IO thread, ``KafkaSource._settle_in_listener``), then the revoked partitions' queued, untrained messages are abandoned (the next owner
reads them again from the committed offset; a partition that comes back to this consumer is
sought back to its first abandoned offset, since kafka-python keeps its position). A lost
partition (the group moved on without us) is abandoned without the settle: its commits would
fail. On assignment, partitions are sought where ``PartitionOffsets.assign`` says.
"""
from __future__ import annotations

import logging

from kafka import ConsumerRebalanceListener, TopicPartition

from .offsets import PartitionOffsets

log = logging.getLogger("streamtrain.kafka")


class Rebalance(ConsumerRebalanceListener):
    """The listener, with what it acts on passed in (it holds no reader state of its own but the
    count of revocations): ``offsets`` (``PartitionOffsets``), ``abandon(pred) -> (n, {key: first
    dropped offset})`` (drops the reader's queued messages ``pred(topic, partition)`` selects,
    counting them), ``settle()`` (trained batches made durable, due commits sent), ``seek(tp,
    offset)`` (the consumer's), ``forget(keys)`` (lag bookkeeping)."""

    def __init__(self, offsets: PartitionOffsets, abandon, settle, seek, forget):
        self.offsets = offsets
        self.abandon, self.settle, self.seek, self.forget = abandon, settle, seek, forget
        self.revocations = 0

    def on_partitions_revoked(self, revoked):
        self.revoked(revoked, "revoked")

    def on_partitions_lost(self, lost):
        self.revoked(lost, "lost")

    def on_partitions_assigned(self, assigned):
        self.assigned(assigned)

    def revoked(self, tps, how: str) -> None:
        if how == "revoked":                # commit trained batches while still owned
            self.settle()
        keys = {(tp[0], tp[1]) for tp in tps}
        dropped, first = self.abandon(lambda topic, partition: (topic, partition) in keys)
        self.offsets.abandoned(first)
        self.offsets.revoke(keys, lost=how == "lost")
        self.revocations += 1
        self.forget(keys)
        log.info("kafka reader: partitions %s %s; %d queued untrained messages abandoned",
                 sorted(keys), how, dropped)

    def assigned(self, tps) -> None:
        for key, target in self.offsets.assign(tps).items():
            self.seek(TopicPartition(*key), target)
        log.info("kafka reader: assigned %s", sorted((tp[0], tp[1]) for tp in tps))
