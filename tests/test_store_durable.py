"""The bookkeeping behind ``ParamStore.durable_offsets`` (store/durable.py), without a store:
batches move held → flying → durable in order; a failed background flush puts its batches back
in front of the held ones; a flush makes every one durable."""
from __future__ import annotations

from streamtrain.readers.kafka.offsets import BatchOffsets
from streamtrain.store.durable import Durable, committed


def test_batches_become_durable_in_order_and_a_failed_flush_puts_them_back_first():
    d = Durable()
    d.hold({"a": 1}, written=False)
    d.hold({"a": 2}, written=False)
    d.begun()                                   # a background flush writes batches 1 and 2
    d.hold({"a": 3}, written=False)             # trained meanwhile
    assert d and d.take() == []
    d.failed()
    assert d.held == [{"a": 1}, {"a": 2}, {"a": 3}] and d.flying == []
    d.begun()
    d.hold({"a": 4}, written=False)
    d.landed()
    assert d.take() == [{"a": 1}, {"a": 2}, {"a": 3}] and d.take() == [] and d
    d.flushed()
    assert d.take() == [{"a": 4}] and not d


def test_a_store_that_writes_through_makes_them_durable_at_once():
    d = Durable()
    d.hold({"a": 1}, written=True)
    assert not d and d.take() == [{"a": 1}]


def test_a_held_batch_never_moves_a_partition_back_but_one_written_at_once_may():
    """A Kafka batch carries its other partitions' last committed position, older than the held
    batches before it: made durable after them, it is raised to theirs. Written at once (no
    batch held before it), it is handed out as it is (a recreated topic goes back to 0)."""
    d = Durable()
    d.hold({"p0": 10, "p1": 5}, written=False)
    d.hold({"p0": 3, "p1": 8}, written=False)       # p0: its last committed position
    d.flushed()
    assert d.take() == [{"p0": 10, "p1": 5}, {"p0": 10, "p1": 8}]
    at_once = Durable()
    at_once.hold({"p0": 10}, written=True)
    at_once.hold({"p0": 0}, written=True)
    assert at_once.take() == [{"p0": 10}, {"p0": 0}]


def test_a_partition_whose_log_went_back_starts_afresh_in_its_new_epoch():
    """A recreated topic: the reader bumps the partition's epoch (readers/kafka/offsets.py). A held
    batch of the new epoch is not raised to the old log's offsets; an old epoch's batch made
    durable after it is left as it is (the source ignores it) and does not raise the later ones."""
    d = Durable()
    d.hold(BatchOffsets({"p0": 900, "p1": 5}, {"p0": 0, "p1": 0}), written=False)
    d.hold(BatchOffsets({"p0": 40, "p1": 6}, {"p0": 1, "p1": 0}), written=False)     # p0 recreated
    d.hold(BatchOffsets({"p0": 950, "p1": 6}, {"p0": 0, "p1": 0}), written=False)    # cut before it
    d.hold(BatchOffsets({"p0": 30, "p1": 7}, {"p0": 1, "p1": 0}), written=False)     # p0: committed
    d.flushed()
    assert [dict(b) for b in d.take()] == [{"p0": 900, "p1": 5}, {"p0": 40, "p1": 6},
                                           {"p0": 950, "p1": 6}, {"p0": 40, "p1": 7}]


def test_the_offsets_a_checkpoint_records_never_take_an_older_epochs():
    into, epochs = {}, {}
    committed(into, epochs, {"f": 7})                                   # a file source: as it is
    committed(into, epochs, BatchOffsets({"p0": 900}, {"p0": 0}))
    committed(into, epochs, BatchOffsets({"p0": 40}, {"p0": 1}))        # the log went back
    committed(into, epochs, BatchOffsets({"p0": 950}, {"p0": 0}))       # cut before it: not kept
    assert into == {"f": 7, "p0": 40} and epochs == {"p0": 1}
