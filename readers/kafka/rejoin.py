"""A group rejoin that kafka-python completed but never applied, noticed and applied.

kafka-python (2.2 and 3.0) applies a rejoin's result (the new assignment, then the listener's
``on_partitions_assigned``) only inside ``poll``'s join loop, which it enters while
``need_rejoin()``. When the rejoin was asked by a metadata change alone (a subscribed topic's
partition count changed: Tansu recreates a topic with 4 partitions after a restart), the group
leader's assignment makes ``need_rejoin()`` False as soon as it is computed; if ``poll``'s time
runs out while the SyncGroup request is in flight (the reader polls for 0.1-0.5 s, Tansu holds
a join ~1 s, more under load), the response is read by a later poll's fetch and the join loop is
never entered again: the consumer stays in the group with its old assignment and no callback,
so the reader, whose partitions were revoked, owns nothing and reads nothing, for ever. Seen
with kafka-python 2.2.21 (tests/test_faults_kafka.py's recreated-topic test: "Successfully
joined group", the leader's SyncGroup answered, heartbeats succeeding, no "Updated partition
assignment" for the 90 s that followed).

The state is kafka-python's ``rejoining`` (its listener's revocation ran, no assignment since)
while ``need_rejoin()`` is False. ``request_rejoin()`` makes the next poll enter the join loop:
kafka-python 2.2 then applies the completed join's assignment (its join future is kept until
then); 3.0 joins again.
"""
from __future__ import annotations

import logging

log = logging.getLogger("streamtrain.kafka")


def apply_lost_join(consumer) -> bool:
    """Ask for the rejoin again if a completed one was lost (see the module); True if it was."""
    coordinator = getattr(consumer, "_coordinator", None)
    try:
        if not getattr(coordinator, "rejoining", False) or coordinator.need_rejoin():
            return False
        coordinator.request_rejoin()
    except Exception:                      # another kafka-python: its own join logic stands
        return False
    log.warning("kafka reader: kafka-python stopped waiting for a group rejoin it had not applied "
                "(need_rejoin() went False before its join loop saw the join complete); asking again")
    return True
