"""Rebalances: kafka-python's listener, run inside ``poll`` (never while a batch is trained).

Revoked partitions lose their queued, untrained messages (abandoned: the next owner reads
them again from the committed offset; a partition that comes back to this consumer is sought
back to its first abandoned offset, since kafka-python keeps its position); the in-flight
batch has already been committed by then (due commits are sent before ``poll``).

``RebalanceMixin`` is part of ``KafkaSource`` (``source.py`` holds ``_assigned``,
``_pending``, ``_rewind``, ``_seek_later``, ``_fetched``, ``_applied``, ``_unconfirmed``).
"""
from __future__ import annotations

import logging

from kafka import ConsumerRebalanceListener

log = logging.getLogger("streamtrain.kafka")


class Listener(ConsumerRebalanceListener):
    def __init__(self, source):
        self.source = source

    def on_partitions_revoked(self, revoked):
        self.source._on_revoked(revoked, "revoked")

    def on_partitions_lost(self, lost):
        self.source._on_revoked(lost, "lost")

    def on_partitions_assigned(self, assigned):
        self.source._on_assigned(assigned)


class RebalanceMixin:
    def _abandon(self, pred) -> int:
        """Drop queued segments; remember where each partition must be read again from."""
        dropped, first = self._pending.abandon(pred)
        for key, off in first.items():
            self._rewind[key] = min(self._rewind.get(key, off), off)
        self.stats["abandoned_messages"] += dropped
        return dropped

    def _on_revoked(self, tps, how: str) -> None:
        if self.before_poll is not None and how == "revoked":     # commit trained batches while owned
            self.before_poll(False)
            self._flush_commits()
        tps = set(tps)
        keys = {(tp.topic, tp.partition) for tp in tps}
        with self._lock:
            self.stats["revocations"] += 1
            dropped = self._abandon(lambda seg: (seg.topic, seg.partition) in keys)
            self._assigned -= tps
            for tp in tps:
                self._unconfirmed.pop(tp, None)
                self._fetched.pop(tp, None)
                self._applied.pop((tp.topic, tp.partition), None)
        self.health.forget(keys)
        log.info("kafka reader: partitions %s %s; %d queued untrained messages abandoned",
                 sorted(keys), how, dropped)

    def _on_assigned(self, tps) -> None:
        with self._lock:
            self._assigned |= set(tps)
            for tp in tps:
                key = (tp.topic, tp.partition)
                # kafka-python keeps the position of a partition that stays with this consumer
                # across a rebalance: read the messages abandoned at revocation again
                target = self._seek_later.pop(key, None)
                if target is None:
                    target = self._rewind.get(key)
                if target is not None:
                    self.consumer.seek(tp, target)
                    self._fetched[tp] = target
            self._rewind.clear()
        log.info("kafka reader: assigned %s", sorted((tp.topic, tp.partition) for tp in tps))
