"""Each owned partition against its log end, checked every ``HEALTH_EVERY_S`` on the consumer
thread: the high watermark for the lag metrics, and a position past the end followed.

A position past the log end means the log went back under the consumer (a recreated topic) and
the broker answered its fetches with nothing instead of OffsetOutOfRange (Tansu after a restart,
when the consumer's metadata request created the topic again). It is confirmed with the broker's
own end offset (a position sought forward past a stale high watermark is not this), then reset
as OffsetOutOfRange would be.
"""
from __future__ import annotations

import logging

from kafka import TopicPartition

log = logging.getLogger("streamtrain.kafka")


def check_log_ends(loop) -> None:
    """``loop``: the ``ConsumerLoop`` (its consumer, source, config and ``fetched``)."""
    for k in list(loop.src.offsets.owned):
        tp = TopicPartition(*k)
        try:
            hw = loop.consumer.highwater(tp)
            loop.src.health.highwater(k, hw)
            if hw is not None and (loop.consumer.position(tp, timeout_ms=0) or 0) > hw:
                _past_the_end(loop, tp, hw)
        except Exception:               # revoked meanwhile
            pass


def _past_the_end(loop, tp, hw: int) -> None:
    consumer, earliest = loop.consumer, loop.cfg["auto_offset_reset"] == "earliest"
    pos = consumer.position(tp, timeout_ms=0)
    end = consumer.end_offsets([tp]).get(tp)
    if end is None or pos is None or pos <= end:
        return
    log.warning("kafka reader: %s[%d] is at offset %d, past its log end %d (topic recreated?); "
                "reading it again from the %s", tp.topic, tp.partition, pos, max(hw, end),
                "beginning" if earliest else "end")
    (consumer.seek_to_beginning if earliest else consumer.seek_to_end)(tp)
    loop.fetched.pop(tp, None)
    loop.src.offsets.went_back((tp.topic, tp.partition))   # batches of the old log: stale now
    loop.src.count("offset_resets")
