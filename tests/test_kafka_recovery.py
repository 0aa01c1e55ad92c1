"""At-least-once under crashes and rebalances, with real trainer processes and a real broker.

Every trainer writes the (partition, offset) of each row it applied to a trace file (reader
option ``trace_file``), before it commits: "trained" below means "in a trace".
"""
from __future__ import annotations

import collections
import gzip
import re
import threading
import time


from tests.kafka_broker import committed_offsets, end_offsets
from streamtrain.produce import produce
from tests.fixtures_kafka import read_trace


def _lines(path, n=None):
    with gzip.open(path, "rb") as f:
        lines = [line for line in f.read().split(b"\n") if line]
    return lines if n is None else [lines[i % len(lines)] for i in range(n)]


def _every_offset(ends):
    return {(p, o) for p, n in ends.items() for o in range(n)}


def _wait_for(cond, timeout, what, detail=lambda: ""):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}{detail()}")
        time.sleep(0.05)


def _split(a, b, partitions: int = 4) -> bool:
    """The partitions each trainer owns now (its log's assignments less its revocations) are
    disjoint and cover the topic: the rebalance the second one's join started has ended."""
    owned = []
    for trainer in (a, b):
        mine = set()
        for line in trainer.log().splitlines():
            if "kafka reader: assigned" in line:
                mine |= set(re.findall(r", (\d+)\)", line))
            elif "kafka reader: partitions" in line:           # revoked or lost
                mine -= set(re.findall(r", (\d+)\)", line))
        owned.append(mine)
    return all(owned) and not owned[0] & owned[1] and owned[0] | owned[1] == {str(p) for p in range(partitions)}


def _producing(lines, bootstrap, topic, rate):
    t = threading.Thread(target=produce, args=(lines, bootstrap, topic), kwargs={"rate": rate})
    t.start()
    return t


def test_sigkill_mid_stream_then_restart_trains_every_record(criteo_path, kafka_bootstrap,
                                                             kafka_topic, kafka_names,
                                                             kafka_job_config, trainers, tmp_path):
    topic, group = kafka_topic(4), kafka_names("g")
    lines = _lines(criteo_path, 12000)
    feeder = _producing(lines, kafka_bootstrap, topic, rate=4000)     # ~3 s of stream
    trace1, trace2 = tmp_path / "trace1", tmp_path / "trace2"
    first = trainers("first", kafka_job_config(topic, group, batch_size=64, trace_file=str(trace1)))
    _wait_for(lambda: len(read_trace(trace1)) >= 3000, 30, "the first trainer to train 3000 rows")
    first.kill()                                                       # SIGKILL mid-stream
    killed_at = committed_offsets(kafka_bootstrap, topic, group)
    trained1 = read_trace(trace1)
    assert len(trained1) < len(lines)
    # nothing committed without its update: every offset below a committed one was trained
    done1 = set(trained1)
    for p, off in killed_at.items():
        assert all((p, o) in done1 for o in range(off or 0)), f"partition {p}: committed {off}"

    feeder.join()
    ends = end_offsets(kafka_bootstrap, topic)
    assert sum(ends.values()) == len(lines)
    second = trainers("second", kafka_job_config(topic, group, batch_size=64, stop_at_end=True,
                                                 trace_file=str(trace2)))
    summary = second.wait(timeout=60)
    trained2 = read_trace(trace2)
    assert summary["examples"] == len(trained2)

    trained = trained1 + trained2
    assert set(trained) == _every_offset(ends)                         # nothing lost
    retrained = len(trained) - len(set(trained))
    # a record is trained twice only if the kill came between its update and its commit
    assert retrained == len(set(trained1) & set(trained2))
    assert retrained <= 2 * 64
    assert committed_offsets(kafka_bootstrap, topic, group) == ends
    print(f"\ncrash test: {len(trained1)} rows before SIGKILL, {len(trained2)} after restart, "
          f"{retrained} re-trained, 0 lost")


def test_two_trainers_split_the_partitions_and_skip_nothing(criteo_path, kafka_bootstrap,
                                                            kafka_topic, kafka_names,
                                                            kafka_job_config, trainers, tmp_path):
    topic, group = kafka_topic(4), kafka_names("g")
    # no idle timeout: a trainer that started first must not end (idle) while the second one
    # starts and joins, which takes seconds on a loaded machine; both are stopped by SIGTERM
    # once every record is committed
    cfg = lambda name: kafka_job_config(topic, group, batch_size=128,  # noqa: E731
                                        trace_file=str(tmp_path / f"trace-{name}"))
    a = trainers("a", cfg("a"))
    b = trainers("b", cfg("b"))
    _wait_for(lambda: _split(a, b), 60, "both trainers to join and split the partitions")
    lines = _lines(criteo_path, 10000)
    _producing(lines, kafka_bootstrap, topic, rate=5000).join()
    ends = end_offsets(kafka_bootstrap, topic)
    _wait_for(lambda: committed_offsets(kafka_bootstrap, topic, group) == ends, 90, "every record committed")
    sa, sb = a.drain(), b.drain()
    ta, tb = read_trace(tmp_path / "trace-a"), read_trace(tmp_path / "trace-b")
    assert set(ta) | set(tb) == _every_offset(ends)                    # no record skipped
    parts_a, parts_b = {p for p, _ in ta}, {p for p, _ in tb}
    assert parts_a and parts_b, "both trainers should have owned partitions"
    assert sa["examples"] + sb["examples"] == len(ta) + len(tb) >= len(lines)
    assert committed_offsets(kafka_bootstrap, topic, group) == ends
    print(f"\ntwo trainers: a trained {len(ta)} rows of partitions {sorted(parts_a)}, "
          f"b {len(tb)} of {sorted(parts_b)}; {len(ta) + len(tb) - len(lines)} re-trained")


def test_a_dead_trainers_partitions_are_taken_over(criteo_path, kafka_bootstrap, kafka_topic,
                                                   kafka_names, kafka_job_config, trainers,
                                                   tmp_path):
    topic, group = kafka_topic(4), kafka_names("g")
    cfg = lambda name: kafka_job_config(topic, group, batch_size=64,  # noqa: E731
                                        trace_file=str(tmp_path / f"trace-{name}"))
    a = trainers("a", cfg("a"))
    b = trainers("b", cfg("b"))
    _wait_for(lambda: _split(a, b), 60, "both trainers to join and split the partitions")
    lines = _lines(criteo_path, 12000)
    feeder = _producing(lines, kafka_bootstrap, topic, rate=4000)
    _wait_for(lambda: len(read_trace(tmp_path / "trace-a")) >= 1000, 30, "trainer a to train")
    a.kill()
    feeder.join()
    ends = end_offsets(kafka_bootstrap, topic)
    _wait_for(lambda: committed_offsets(kafka_bootstrap, topic, group) == ends, 90, "every record committed",
              lambda: f": committed {committed_offsets(kafka_bootstrap, topic, group)}, ends {ends}; "
                      f"b's log:\n{b.log()[-4000:]}")
    sb = b.drain()
    ta, tb = read_trace(tmp_path / "trace-a"), read_trace(tmp_path / "trace-b")
    assert set(ta) | set(tb) == _every_offset(ends)
    assert {p for p, _ in tb} == set(ends), "b should have taken over every partition"
    assert committed_offsets(kafka_bootstrap, topic, group) == ends
    assert sb["examples"] == len(tb)


def test_restoring_a_checkpoint_seeks_to_its_offsets(criteo_path, kafka_bootstrap, kafka_topic,
                                                     kafka_names, kafka_job_config, trainers,
                                                     tmp_path):
    from streamtrain import checkpoint

    topic, group = kafka_topic(2), kafka_names("g")
    produce(_lines(criteo_path), kafka_bootstrap, topic)
    ckpt = tmp_path / "ckpt"
    cfg = kafka_job_config(topic, group, batch_size=100, stop_at_end=True)
    cfg["checkpoint"] = {"dir": str(ckpt), "every_seconds": 0, "every_batches": 0, "keep": 2}
    s1 = trainers("first", cfg, "--max-examples", "3000").wait()
    assert s1["examples"] == 3000
    _, meta = checkpoint.read(ckpt)
    at = {k[1]: v for k, v in meta["offsets"].items()}
    assert sum(at.values()) == 3000 and set(at) == {0, 1}      # both partitions, even one untouched
    # the group moves on to the end ...
    trainers("second", kafka_job_config(topic, group, stop_at_end=True)).wait()
    ends = end_offsets(kafka_bootstrap, topic)
    assert committed_offsets(kafka_bootstrap, topic, group) == ends
    # ... more arrives (the graph, and so the restore, waits for a first batch) ...
    produce(_lines(criteo_path)[:500], kafka_bootstrap, topic)
    ends = end_offsets(kafka_bootstrap, topic)
    # ... and restoring the checkpoint takes the reader back to where it was taken
    cfg3 = kafka_job_config(topic, group, stop_at_end=True, trace_file=str(tmp_path / "trace3"))
    cfg3["checkpoint"] = {"dir": str(ckpt)}
    s3 = trainers("third", cfg3, "--restore", "latest").wait()
    trace = read_trace(tmp_path / "trace3")
    assert set(trace) == {(p, o) for p, n in ends.items() for o in range(at.get(p, 0), n)}
    assert len(trace) == len(set(trace)) == 8125 - 3000
    assert s3["examples"] == 8125                  # 3000 restored + 5125 trained
    firsts = collections.OrderedDict()
    for p, o in trace:
        firsts.setdefault(p, o)
    assert firsts == {p: at[p] for p in firsts}
