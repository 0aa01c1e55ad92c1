"""The record-batch decoder (no broker): the vectorised path gives what the per-record loop
gives, on batches with keys, headers, null and empty values, long varints and a fetch offset
inside the batch; and corrupt bytes are refused."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("kafka")

from kafka import TopicPartition                                           # noqa: E402
from kafka.record.default_records import DefaultRecordBatchBuilder         # noqa: E402
from kafka.record.memory_records import MemoryRecords                      # noqa: E402

from streamtrain.readers.kafka import decode, fastpath                     # noqa: E402

TP = TopicPartition("t", 3)


def _batch_bytes(values, keys=None, headers=None, base_ts=1_700_000_000_000, ts_step=1):
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 24)
    for i, v in enumerate(values):
        b.append(i, timestamp=base_ts + i * ts_step, key=None if keys is None else keys[i],
                 value=v, headers=[] if headers is None else headers[i])
    return bytes(b.build())


def _batch(raw, base_offset=0):
    batch = MemoryRecords(raw).next_batch()
    batch._header_data = (base_offset,) + tuple(batch._header_data[1:])
    return batch


def _same(a, b):
    assert a.buf == b.buf
    assert np.array_equal(a.ends, b.ends)
    assert np.array_equal(a.offsets, b.offsets)
    assert np.array_equal(a.ts, b.ts)
    assert a.next_offset == b.next_offset and (a.topic, a.partition) == (b.topic, b.partition)


@pytest.mark.parametrize("n", [1, 5, 127, 128, 300, 3000])
def test_vectorised_decode_equals_the_loop(n):
    rng = np.random.default_rng(n)
    values = [None if i % 97 == 5 else b"" if i % 89 == 7 else
              bytes(rng.integers(32, 127, int(rng.integers(0, 400)), dtype=np.uint8))
              for i in range(n)]
    values[0] = b"x" * 70000                                   # a 3-byte length varint
    keys = [None if i % 3 else f"k{i}".encode() * (i % 50) for i in range(n)]
    headers = [[] if i % 4 else [("h", b"v" * (i % 9)), ("reason", b"r")] for i in range(n)]
    raw = _batch_bytes(values, keys, headers, ts_step=37_000)  # ts deltas of several bytes
    for fetch_offset in sorted({0, min(2, n - 1), n // 2, n - 1}):
        fast = fastpath.segment_of_batch(TP, _batch(raw, 1000), 1000 + fetch_offset)
        slow = fastpath._segment_of_batch_loop(TP, _batch(raw, 1000), 1000 + fetch_offset)
        _same(fast, slow)
        assert len(fast) == n - fetch_offset and fast.next_offset == 1000 + n
        assert fast.offsets[0] == 1000 + fetch_offset
        kept = values[fetch_offset:]
        assert fast.buf == b"".join((v or b"") + b"\n" for v in kept)
    assert fastpath.segment_of_batch(TP, _batch(raw), n) is None     # everything before the fetch offset


def test_vectorised_decode_refuses_corrupt_bytes():
    values = [b"line %d" % i for i in range(500)]
    raw = bytearray(_batch_bytes(values))
    batch = _batch(bytes(raw))
    body = batch._pos
    with pytest.raises((ValueError, IndexError)):
        decode.decode_v2_columns(batch._buffer[:-3], body, batch.records_count)     # truncated
    buf = bytearray(batch._buffer)
    buf[body] += 2                                             # a record length off by one
    with pytest.raises((ValueError, IndexError)):
        decode.decode_v2_columns(buf, body, batch.records_count)
    buf = bytearray(batch._buffer)
    assert buf[body + 4] == 1                                  # record 0's key: null
    buf[body + 4] = 0x7E                                       # now 63 bytes: past the record
    with pytest.raises((ValueError, IndexError)):
        decode.decode_v2_columns(buf, body, batch.records_count)


def test_varints_round_trip_64_bit_values():
    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.integers(-2**62, 2**62, 300), rng.integers(-300, 300, 300),
                           np.array([0, -1, 1, 2**63 - 1, -2**63])])

    def enc(v):
        z = ((v << 1) ^ (v >> 63)) & ((1 << 64) - 1)
        out = bytearray()
        while z >= 0x80:
            out.append((z & 0x7F) | 0x80)
            z >>= 7
        out.append(z)
        return bytes(out)

    buf, pos = b"", []
    for v in vals.tolist():
        pos.append(len(buf))
        buf += enc(int(v))
    a = np.frombuffer(buf, np.uint8)
    got, nxt = decode._varints(a, np.array(pos, np.int64), len(a) - 1)
    assert np.array_equal(got, vals)
    assert np.array_equal(nxt, np.array(pos[1:] + [len(buf)]))


class _FakeConsumer:
    """Records commits; fails the ones asked to."""

    def __init__(self):
        self.commits, self.fail, self.closed = [], 0, False

    def commit(self, offsets, timeout_ms=None):
        from kafka.errors import CommitFailedError
        assert timeout_ms is not None and 0 < timeout_ms <= 30_000      # a commit never waits for minutes
        if self.fail:
            self.fail -= 1
            raise CommitFailedError("rebalance in progress")
        self.commits.append({(tp.topic, tp.partition): om.offset for tp, om in offsets.items()})

    def close(self, autocommit=True):
        assert autocommit is False
        self.closed = True


def _source():
    from streamtrain.readers.kafka.source import KafkaSource
    src = KafkaSource({"type": "kafka", "bootstrap": "127.0.0.1:1", "topic": "t", "group": "g",
                       "format": "criteo"}, batch_size=8)
    src.consumer = _FakeConsumer()
    src.offsets.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
    return src


def test_commits_are_sent_every_other_batch_and_before_the_consumer_is_used_again():
    from streamtrain.readers.kafka import offsets
    assert offsets.COMMIT_EVERY == 2
    src = _source()
    c = src.consumer
    src.commit({("t", 0): 10, ("t", 1): 5})
    assert c.commits == []                                     # due, not sent yet
    src.commit({("t", 0): 20, ("t", 1): 5})
    assert c.commits == [{("t", 0): 20, ("t", 1): 5}]          # the newer offsets only
    src.commit({("t", 0): 30, ("t", 1): 7, ("t", 2): 4})       # t/2 is not owned here
    assert src.stats["commits_skipped"] == 1
    assert src.committed_offsets() == {("t", 0): 30, ("t", 1): 7}   # sends what is due first
    assert c.commits[-1] == {("t", 0): 30, ("t", 1): 7}
    src.rebalance.revoked([TopicPartition("t", 1)], "revoked")
    src.commit({("t", 0): 40, ("t", 1): 9})                    # t/1 was revoked meanwhile
    src.close()
    assert c.commits[-1] == {("t", 0): 40} and c.closed


def test_a_failed_commit_is_counted_not_raised_and_retried_once_at_close():
    src = _source()
    c = src.consumer
    c.fail = 1
    src.commit({("t", 0): 10, ("t", 1): 5})
    src.commit({("t", 0): 12, ("t", 1): 5})                    # sent: fails
    assert c.commits == [] and src.stats["commit_failures"] == 1
    assert src.committed_offsets() == {}
    src.close()                                                # retried once
    assert c.commits == [{("t", 0): 12, ("t", 1): 5}] and src.stats["commits"] == 1


def test_a_batch_is_traced_only_once_the_previous_batchs_commit_ran():
    """At most COMMIT_EVERY traced batches are uncommitted at any instant (the kill -9 test's
    bound): the training thread hands each commit to the consumer thread and waits for the
    previous one *before* writing the next batch's trace, not after."""
    import threading
    src = _source()
    order, release = [], threading.Event()

    class Trace:
        def write(self, rows):
            order.append(("traced", rows))

    src.trace = Trace()
    applied = src.committer.applied
    src.committer.applied = lambda offsets: (order.append(("applied", offsets[("t", 0)])), applied(offsets))

    def consumer_thread():
        release.wait(10)
        while not stop.is_set():
            src.handoff.run_work()
            src.handoff.wait(0.01)

    stop = threading.Event()
    src.handoff.consumer_thread = threading.Thread(target=consumer_thread, daemon=True)
    src.handoff.consumer_thread.start()
    try:
        for n in (1, 2):
            offsets = {("t", 0): 10 * n, ("t", 1): n}
            src._inflight.append((offsets, n, None))
            if n == 2:
                threading.Timer(0.3, release.set).start()   # the consumer thread is busy meanwhile
            src.commit(offsets)
        src.handoff.result(src._commit_token, timeout=10)
    finally:
        stop.set()
        release.set()
        src.handoff.consumer_thread.join(10)
    assert order == [("traced", 1), ("applied", 10), ("traced", 2), ("applied", 20)]
    assert src.consumer.commits == [{("t", 0): 20, ("t", 1): 2}]


def test_the_batches_of_one_flush_are_handed_over_and_committed_once():
    """A store that writes back makes many batches durable at once (``Job._commit``): traced in
    order, they reach the consumer thread as one piece of work and one commit of the newest
    offsets (one by one, each waited for a consumer turn: ``test_kafka_writeback.py``)."""
    src = _source()
    handed, traced, submit = [], [], src.handoff.submit
    src.handoff.submit = lambda fn: (handed.append(fn), submit(fn))[1]

    class Trace:
        def write(self, rows):
            traced.append(rows)

    src.trace = Trace()
    batches = [{("t", 0): 10 * n, ("t", 1): n} for n in range(1, 21)]
    for n, offsets in enumerate(batches, 1):
        src._inflight.append((offsets, n, None))
    src.commit_many(batches)
    assert len(handed) == 1 and traced == list(range(1, 21))
    assert src.consumer.commits == [{("t", 0): 200, ("t", 1): 20}] and src.stats["commits"] == 1


class _UnreachableConsumer(_FakeConsumer):
    """Its polls fail as kafka-python 3's do while the broker is away mid-rejoin, then answer.
    (The same path against a real broker: ``test_faults_kafka.py::test_broker_restart_mid_run``.)"""

    def __init__(self, failures, error):
        super().__init__()
        self.failures, self.error, self.polls = failures, error, 0

    def poll(self, timeout_ms=0, update_offsets=True):
        self.polls += 1
        if self.polls <= self.failures:
            raise self.error
        return {"got": self.polls}


def test_a_poll_that_cannot_reach_the_broker_is_retried_not_raised(monkeypatch, caplog):
    from kafka.errors import KafkaConnectionError
    from streamtrain.backoff import Backoff
    from streamtrain.readers.kafka import loop as source_mod
    monkeypatch.setattr(source_mod, "POLL_BACKOFF", Backoff(0.001, 0.002))
    src = _source()
    consumer = _UnreachableConsumer(3, KafkaConnectionError("104 ECONNRESET"))
    with caplog.at_level("WARNING", logger="streamtrain.kafka"):
        assert src.loop.poll(consumer, 100) == {"got": 4}
    assert consumer.polls == 4 and src.stats["poll_errors"] == 3
    assert sum("poll failed" in r.getMessage() for r in caplog.records) == 1    # not one per retry


def test_a_stop_ends_the_wait_for_the_broker_and_other_errors_propagate(monkeypatch):
    from kafka.errors import KafkaConnectionError, UnsupportedVersionError
    from streamtrain.backoff import Backoff
    from streamtrain.readers.kafka import loop as source_mod
    monkeypatch.setattr(source_mod, "POLL_BACKOFF", Backoff(0.05, 0.05))
    src = _source()
    src.request_stop()
    assert src.loop.poll(_UnreachableConsumer(10**6, KafkaConnectionError("down")), 100) == {}
    src = _source()
    with pytest.raises(UnsupportedVersionError):                 # not retriable: the job reports it
        src.loop.poll(_UnreachableConsumer(1, UnsupportedVersionError("no")), 100)


def test_a_damaged_batch_ends_the_run_naming_it_and_how_to_go_past_it():
    """kafka-python's CorruptRecordError (not retriable) ended the run with its traceback."""
    from kafka.errors import CorruptRecordError
    from streamtrain.errors import ReaderError
    src = _source()
    err = CorruptRecordError("record batch for partition TopicPartition(topic='t', partition=0) at offset 1200 "
                             "failed crc check")
    with pytest.raises(ReaderError, match=r"^kafka reader: record batch for partition .* at offset 1200 failed crc "
                                          r"check: the topic's log holds a damaged record batch; .* reader\.consumer\."
                                          r"check_crcs=false$"):
        src.loop.poll(_UnreachableConsumer(1, err), 100)


def test_pending_put_back_restores_the_queue_in_order():
    from streamtrain.readers.kafka.pending import Pending
    from streamtrain.readers.kafka.segment import Segment

    q = Pending()
    segs = [Segment.from_values("t", 0, [b"a\nb", b"c", b"d"], [3 * i, 3 * i + 1, 3 * i + 2], [0, 0, 0])
            for i in range(3)]                  # 4 lines each, in 3 messages
    for s in segs:
        q.push(s)
    before = [(s.offset, s.n_lines) for s in q.segments]
    take = q.cut(6)                             # a whole segment and part of the next
    assert sum(s.n_lines for s in take) == 6 and q.lines == 6
    q.put_back(take)
    assert q.lines == 12
    got = [(s.offset, s.n_lines) for s in q.segments]
    assert got[0] == before[0] and sum(n for _, n in got) == 12
    assert [o for o, _ in got] == sorted(o for o, _ in got)
    again = q.cut(6)                            # the same messages come out again
    assert [(s.offset, len(s)) for s in again] == [(s.offset, len(s)) for s in take]


def test_the_compiled_decode_matches_the_vectorised_one_and_refuses_corrupt_bytes():
    rng = np.random.default_rng(3)
    n = 400
    values = [None if i % 11 == 0 else bytes(rng.integers(32, 127, i % 300).astype(np.uint8)) for i in range(n)]
    values[1] = b"x" * 70000                                   # a 3-byte length varint
    keys = [None if i % 3 else f"k{i}".encode() * (i % 50) for i in range(n)]
    headers = [[] if i % 4 else [("h", b"v" * (i % 9))] for i in range(n)]
    batch = _batch(_batch_bytes(values, keys, headers, ts_step=37_000))
    buf, body = batch._buffer, batch._pos
    offd, tsd, vstart, vlen = decode.decode_v2_columns(buf, body, n)
    for skip in (0, 1, n // 2, n):
        offs, ts, joined, ends = decode.decode_v2_joined(buf, body, n, skip)
        assert offs.tolist() == offd[skip:].tolist() and ts.tolist() == tsd[skip:].tolist()
        assert joined == b"".join((v or b"") + b"\n" for v in values[skip:])
        assert ends.tolist() == (np.cumsum(np.maximum(vlen[skip:], 0) + 1) - 1).tolist()
    with pytest.raises(ValueError):
        decode.decode_v2_joined(bytes(buf)[:-3], body, n)       # truncated
    bad = bytearray(buf)
    bad[body] += 2                                             # a record length off by one
    with pytest.raises(ValueError):
        decode.decode_v2_joined(bytes(bad), body, n)
