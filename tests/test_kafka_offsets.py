"""``PartitionOffsets`` without a broker: what is due, when a commit is sent, what is skipped,
what a failed commit leaves, where a seek or a reassignment reads from."""
from __future__ import annotations

from kafka import TopicPartition

from streamtrain.readers.kafka.offsets import COMMIT_EVERY, PartitionOffsets


def owned(*parts):
    o = PartitionOffsets()
    assert o.assign([("t", p) for p in parts]) == {}
    return o


def test_offsets_are_due_after_the_update_and_sent_every_other_batch():
    assert COMMIT_EVERY == 2
    o = owned(0, 1)
    assert o.applied({("t", 0): 10, ("t", 1): 5}) is False          # due, not sent yet
    assert o.applied({("t", 0): 20, ("t", 1): 5}) is True
    assert o.take_due() == {("t", 0): 20, ("t", 1): 5}              # the newer offsets only
    assert o.take_due() == {} and o.due_batches == 0


def test_a_partition_not_owned_is_skipped_and_a_commit_never_goes_back():
    o = owned(0, 1)
    o.applied({("t", 0): 30, ("t", 1): 7, ("t", 2): 4})             # t/2 is not owned here
    assert o.skipped == 1
    o.applied({("t", 0): 25})                                      # an older position: kept at 30
    assert o.take_due() == {("t", 0): 30, ("t", 1): 7}
    o.applied({("t", 0): 40, ("t", 1): 9})
    o.revoke([TopicPartition("t", 1)])                              # revoked before it was sent
    assert o.take_due() == {("t", 0): 40} and o.skipped == 2


def test_a_failed_commit_is_retried_once_if_still_owned():
    o = owned(0, 1)
    o.failed({("t", 0): 12, ("t", 1): 5})
    o.sent({("t", 1): 6})
    assert o.take_unconfirmed() == {("t", 0): 12} and o.take_unconfirmed() == {}
    assert o.committed == {("t", 1): 6}
    o.failed({("t", 0): 12})
    o.revoke([("t", 0)])
    assert o.take_unconfirmed() == {}


def test_positions_start_at_the_first_message_follow_a_reset_and_fill_the_batch_offsets():
    o = owned(0, 1)
    assert o.took(("t", 0), 100) == "start" and o.took(("t", 0), 150) is None
    o.applied({("t", 0): 160})
    assert o.took(("t", 0), 3) == "reset" and o.position[("t", 0)] == 3    # topic recreated
    assert o.with_owned({("t", 1): 8}) == {("t", 1): 8, ("t", 0): 3}     # t/1 has no position yet


def test_abandoned_messages_are_read_again_when_the_partition_comes_back():
    o = owned(0, 1)
    o.abandoned({("t", 0): 40})
    o.abandoned({("t", 0): 35, ("t", 1): 9})
    o.revoke([("t", 0), ("t", 1)])
    assert o.assign([TopicPartition("t", 0)]) == {("t", 0): 35}
    assert o.assign([("t", 1)]) == {}                               # the rewind is spent at the first assignment


def test_a_seek_targets_owned_partitions_now_and_the_others_when_assigned():
    o = owned(0)
    o.sent({("t", 0): 50})
    o.failed({("t", 0): 60})
    assert o.seek({("t", 1): 7}) == {("t", 0): 50}                  # owned, not in the seek: last committed
    assert o.unconfirmed == {}
    o.sought(("t", 0), 50)
    assert o.position[("t", 0)] == 50
    assert o.assign([("t", 1)]) == {("t", 1): 7}
    assert o.seek({}) == {("t", 0): 50, ("t", 1): None}              # never committed: the caller asks the broker


def test_a_batch_applied_after_its_revocation_is_committed_if_the_partition_comes_straight_back():
    """The trainer held a batch of t/0 when t/0 was revoked (eager rebalancing revokes all):
    kafka-python keeps t/0's position past it when the partition is assigned back, so its offset
    is due then, or a partition that gets no more messages stays uncommitted below it."""
    o = owned(0, 1)
    o.applied({("t", 0): 10, ("t", 1): 5})
    assert o.take_due() == {("t", 0): 10, ("t", 1): 5}
    o.revoke([("t", 0), ("t", 1)])
    o.applied({("t", 0): 30, ("t", 1): 9})                          # trained after the revocation
    assert o.take_due() == {} and o.skipped == 2
    o.assign([("t", 0), ("t", 2)])                                  # t/1 went to another trainer
    assert o.take_due() == {("t", 0): 30}
    o.revoke([("t", 0), ("t", 2)], lost=True)                       # lost: another may have committed
    o.applied({("t", 0): 40})
    o.assign([("t", 0)])
    assert o.take_due() == {}
    o.revoke([("t", 0)])
    o.applied({("t", 0): 50})
    o.assign([("t", 1)])                                            # not straight back: forgotten
    o.assign([("t", 0)])
    assert o.take_due() == {}


def test_a_batch_older_than_an_orphaned_one_does_not_lower_the_commit_when_applied_after():
    """Seen at kafka-python 3.0.12 (test_kafka_recovery's take-over: committed 2978 of 3000 for
    90 s, every row of the partition applied): the trainer held two batches at a revocation, the
    second carrying t/0's older applied offset (the batch offsets name every owned partition);
    the first was applied after the revocation (orphaned, due again when t/0 came straight
    back), the second after the reassignment, which set t/0's commit back to its older offset."""
    o = owned(0, 1)
    o.applied({("t", 0): 2978, ("t", 1): 100})
    assert o.take_due() == {("t", 0): 2978, ("t", 1): 100}
    o.revoke([("t", 0), ("t", 1)])
    o.applied({("t", 0): 3000, ("t", 1): 100})                      # orphaned
    o.assign([("t", 0), ("t", 1)])
    o.applied({("t", 0): 2978, ("t", 1): 120})                      # cut before, applied after
    assert o.take_due() == {("t", 0): 3000, ("t", 1): 120}
    o.applied({("t", 1): 130, ("t", 0): 2978})
    assert o.take_due() == {("t", 0): 3000, ("t", 1): 130}          # never back below 3000


def test_a_batch_cut_from_the_old_log_and_applied_after_a_reset_does_not_raise_the_commit():
    """A topic recreated while the trainer holds batches of the old log: their offsets carry the
    old epoch and are ignored (counted); the new log's batches commit from the new offsets."""
    o = owned(0, 1)
    o.took(("t", 0), 100)
    o.took(("t", 1), 0)
    old = o.cut([(("t", 0), o.epoch(("t", 0)), 900), (("t", 1), 0, 20)])       # before the reset
    assert dict(old) == {("t", 0): 900, ("t", 1): 20} and old.epochs == {("t", 0): 0, ("t", 1): 0}
    assert o.took(("t", 0), 0) == "reset" and o.epoch(("t", 0)) == 1
    # a cut holding the old log's tail and the new log's head names the new log's offset only
    mixed = o.cut([(("t", 0), 0, 950), (("t", 0), 1, 40)])
    assert dict(mixed) == {("t", 0): 40, ("t", 1): 0} and mixed.epochs == {("t", 0): 1, ("t", 1): 0}
    o.applied(old)                                    # held by the trainer, applied after the reset
    assert o.stale == 1 and o.position[("t", 0)] == 0
    o.applied(mixed)
    assert o.take_due() == {("t", 0): 40, ("t", 1): 20}
    tail = o.cut([(("t", 0), 0, 990)])                # only the old log's tail: its applied position
    assert dict(tail) == {("t", 0): 40, ("t", 1): 20}
    o.applied(tail)
    o.applied({("t", 0): 60})                         # offsets without a stamp are current
    assert o.take_due() == {("t", 0): 60, ("t", 1): 20} and o.stale == 1


def test_a_batch_cut_before_a_seek_back_does_not_raise_the_commit():
    o = owned(0)
    o.took(("t", 0), 500)
    before = o.cut([(("t", 0), 0, 600)])
    o.sought(("t", 0), 100)                           # e.g. back to a checkpoint's offsets
    o.applied(before)
    assert o.stale == 1 and o.take_due() == {}
    o.applied(o.cut([(("t", 0), o.epoch(("t", 0)), 150)]))
    assert o.take_due() == {("t", 0): 150}


def test_one_seek_back_is_one_epoch_and_one_position():
    """``sought`` starts the seek's epoch; the first message read from the target is not the log
    going back (no second epoch from ``_went_back``): to an offset, and to the reset policy's
    (None) after the partition was revoked and assigned back, where the position it had at the
    revocation must not be taken for the log going back."""
    o = owned(0, 1)
    o.took(("t", 0), 0)
    o.took(("t", 1), 0)
    o.applied({("t", 0): 500, ("t", 1): 500})
    o.revoke([("t", 1)])
    o.assign([("t", 0), ("t", 1)])
    o.sought(("t", 0), 100)                           # back to a checkpoint's offset
    o.sought(("t", 1), None)                          # back to the beginning (nothing committed)
    assert (o.took(("t", 0), 100), o.took(("t", 1), 0)) == (None, "start")
    assert (o.epoch(("t", 0)), o.epoch(("t", 1))) == (1, 1)
    assert o.position == {("t", 0): 100, ("t", 1): 0}
    o.applied(o.cut([(("t", 0), 1, 150), (("t", 1), 1, 50)]))
    assert o.stale == 0 and o.position == {("t", 0): 150, ("t", 1): 50}


def test_a_revoked_batch_keeps_its_epoch_when_the_partition_comes_back():
    """Revocation and assignment do not bump the epoch: an orphaned batch still counts."""
    o = owned(0)
    o.took(("t", 0), 10)
    held = o.cut([(("t", 0), 0, 50)])
    o.revoke([("t", 0)])
    o.applied(held)
    o.assign([("t", 0)])
    assert o.stale == 0 and o.take_due() == {("t", 0): 50}


def test_a_log_found_lower_when_the_partition_is_assigned_back_starts_a_new_epoch():
    """A restarted broker (a recreated topic) makes the group rejoin: the partition comes back
    and its first message is below where the reader was: a new epoch, though 'start' not 'reset'."""
    o = owned(0, 1)
    o.took(("t", 0), 0)
    o.took(("t", 1), 0)
    o.applied({("t", 0): 200, ("t", 1): 200})
    held = o.cut([(("t", 0), 0, 250)])
    o.revoke([("t", 0), ("t", 1)])
    o.assign([("t", 0), ("t", 1)])
    assert o.took(("t", 0), 0) == "start" and o.epoch(("t", 0)) == 1     # the log went back
    assert o.took(("t", 1), 200) == "start" and o.epoch(("t", 1)) == 0   # where it was: same log
    o.applied(held)
    assert o.stale == 1 and o.position[("t", 0)] == 0


def test_an_orphaned_batch_of_the_old_log_is_not_sent_when_the_log_is_found_lower():
    """The trainer held a batch of the old log at the revocation and applied it then (orphaned:
    due again when the partition comes straight back); the partition comes back, its log
    recreated meanwhile: what assign made due belongs to the old log, not sent (it was before)."""
    o = owned(0)
    o.took(("t", 0), 0)
    held = o.cut([(("t", 0), 0, 300)])
    o.revoke([("t", 0)])
    o.applied(held)                                                 # orphaned
    o.assign([("t", 0)])
    assert o.due == {("t", 0): 300}                                 # due if the log is the same
    assert o.took(("t", 0), 0) == "reset" and o.epoch(("t", 0)) == 1
    assert o.take_due() == {}
    o.applied(o.cut([(("t", 0), 1, 7)]))
    assert o.take_due() == {("t", 0): 7}


def test_what_was_due_failed_or_committed_for_the_old_log_is_forgotten_at_a_reset():
    o = owned(0)
    o.took(("t", 0), 0)
    o.sent({("t", 0): 20})
    o.failed({("t", 0): 30})
    o.applied(o.cut([(("t", 0), 0, 40)]))                           # due, not sent yet
    assert o.took(("t", 0), 2) == "reset"
    assert o.take_due() == {} and o.take_unconfirmed() == {} and o.committed == {}
    assert o.seek({}) == {("t", 0): None}          # not back to the old log's committed 20


def test_a_position_found_past_the_log_end_makes_the_held_batches_stale_at_once():
    """logend.py: the new log is empty or shorter; nothing of it read yet."""
    o = owned(0)
    o.took(("t", 0), 0)
    o.applied(o.cut([(("t", 0), 0, 10)]))
    held = o.cut([(("t", 0), 0, 40)])
    o.went_back(("t", 0))
    o.applied(held)
    assert o.take_due() == {} and o.stale == 1 and o.epoch(("t", 0)) == 1
    assert o.took(("t", 0), 0) == "reset"
    o.applied(o.cut([(("t", 0), o.epoch(("t", 0)), 3)]))
    assert o.take_due() == {("t", 0): 3}
