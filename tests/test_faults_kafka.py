"""The daemon against a real Kafka-protocol broker and a real Redis: kill -9 and restart, broker restart.

The contract checked: every offset below a committed offset was applied to the store. The
Kafka reader's ``trace_file`` lists each applied message (``topic partition offset``), written
and flushed after the update and before the offset commit, so a committed offset with no trace
line is an update that was lost.
"""
from __future__ import annotations

import json
import signal
import socket
import struct
import subprocess
import threading
import time
from collections import defaultdict

import numpy as np
import pytest

from tests.fixtures_kafka import read_trace
from tests.fixtures_prometheus import wait_for, wait_metrics

pytestmark = pytest.mark.timeout(240)
broker_mod = pytest.importorskip("tests.kafka_broker")


def lag_of(text: str) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    return {(s.labels["topic"], s.labels["partition"]): s.value
            for f in text_string_to_metric_families(text) if f.name == "streamtrain_kafka_lag" for s in f.samples}


def criteo_lines(n: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    ints = rng.integers(0, 50, (n, 13))
    cats = rng.zipf(1.3, (n, 26)) % 500
    labels = (rng.random(n) < 1 / (1 + np.exp(-(cats[:, 0] % 7 - 3.0)))).astype(int)
    return [("\t".join([str(y), *map(str, i), *(f"{c:08x}" for c in cs)])).encode()
            for y, i, cs in zip(labels, ints, cats)]


def produce(bootstrap, topic, lines):
    from streamtrain.produce import produce as send
    send(iter(lines), bootstrap, topic)


def applied(trace_path, since_line: int = 0) -> dict:
    """{partition: set of offsets} applied, from the reader's trace (lines after ``since_line``)."""
    out = defaultdict(set)
    for p, o in read_trace(trace_path)[since_line:]:     # (a line cut mid-write is left out)
        out[p].add(o)
    return out


def assert_committed_were_applied(committed: dict, done: dict) -> None:
    for p, c in committed.items():
        missing = set(range(c or 0)) - done.get(p, set())
        assert not missing, f"partition {p}: committed {c} but offsets {sorted(missing)[:10]}... never applied"


@pytest.fixture
def redis_url(tmp_path):
    server_mod = pytest.importorskip("streamtrain.store.redis_server")
    try:
        server = server_mod.RedisServer(workdir=str(tmp_path)).start()
    except Exception as err:
        pytest.skip(f"no redis-server: {err}")
    yield server.url
    server.stop()


def kafka_sets(bootstrap, topic, group, trace, redis_url, **reader) -> list[str]:
    from tests.kafka_broker import TEST_CONSUMER
    cfg = {"type": "kafka", "bootstrap": bootstrap, "topic": topic, "group": group, "format": "criteo",
           "max_wait_ms": 100, "trace_file": str(trace), "consumer": TEST_CONSUMER, **reader}
    store = {"backend": "redis", "urls": [redis_url], "timeout_s": 1.0}
    return ["--set", "reader=" + json.dumps(cfg), "--set", "store=" + json.dumps(store),
            "--set", "checkpoint.dir=null"]


def test_kill_9_and_restart_loses_no_committed_update(start_daemon, tmp_path, kafka_bootstrap,
                                                      kafka_topic, kafka_names, redis_url):
    committed_offsets, end_offsets = broker_mod.committed_offsets, broker_mod.end_offsets
    topic, group = kafka_topic(partitions=4), kafka_names("g")
    produce(kafka_bootstrap, topic, criteo_lines(60_000, seed=1))
    first = start_daemon(*kafka_sets(kafka_bootstrap, topic, group, tmp_path / "trace1", redis_url),
                         log_name="first.log")
    wait_for(lambda: sum(map(len, applied(tmp_path / "trace1").values())) >= 8000, 90, "8000 applied rows")
    wait_for(lambda: any(committed_offsets(kafka_bootstrap, topic, group).values()), 90,
             "a committed offset")                # a loaded host can delay the first commit past the rows
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    committed = committed_offsets(kafka_bootstrap, topic, group)
    assert any(committed.values()), committed
    before = applied(tmp_path / "trace1")
    assert_committed_were_applied(committed, before)

    second = start_daemon(*kafka_sets(kafka_bootstrap, topic, group, tmp_path / "trace2", redis_url,
                                      stop_at_end=True), log_name="second.log")
    assert second.wait(120) == 0, second.log.read_text()[-3000:]
    end = end_offsets(kafka_bootstrap, topic)
    final = committed_offsets(kafka_bootstrap, topic, group)
    assert final == end and sum(end.values()) == 60_000
    after = applied(tmp_path / "trace2")
    for p in end:                       # the restart resumed exactly at the committed offset
        if (committed[p] or 0) < end[p]:    # (a write-back window may commit a partition to its end)
            assert min(after[p]) == (committed[p] or 0), (p, committed[p], min(after[p]))
    assert_committed_were_applied(final, {p: before[p] | after[p] for p in end})


class Proxy:
    """A TCP forwarder standing in for the broker's address: ``stop()`` resets every
    connection and then resets each new one at once, as a dying broker would; ``start()``
    forwards again. The broker behind it keeps its state, like a Kafka broker restarted over
    its durable log (Tansu here keeps only memory). The listening socket stays bound all
    along, so no other process can take the port during the outage."""

    def __init__(self, target_port: int, port: int):
        self.target, self.port, self.conns, self.down = target_port, port, [], False
        self.server = socket.create_server(("127.0.0.1", port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.down:
                self._reset(client)
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while data := a.recv(65536):
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    @staticmethod
    def _reset(s) -> None:
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))   # RST
            s.close()
        except OSError:
            pass

    def start(self) -> "Proxy":
        self.down = False
        return self

    def stop(self) -> None:
        self.down = True
        conns, self.conns = self.conns, []
        for s in conns:
            self._reset(s)

    def close(self) -> None:
        self.stop()
        self.server.close()


@pytest.fixture
def proxied_broker():
    """A Tansu broker that advertises a proxy's address, and that proxy."""
    try:
        binary = broker_mod._tansu_binary()
    except RuntimeError as err:
        pytest.skip(f"no Tansu broker: {err}")
    inner, outer = broker_mod.free_port(), broker_mod.free_port()
    proc = subprocess.Popen([binary, "broker", "--listener-url", f"tcp://127.0.0.1:{inner}",
                             "--advertised-listener-url", f"tcp://127.0.0.1:{outer}", "--silent"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        broker_mod.wait_for_port("127.0.0.1", inner, 15, proc)
        proxy = Proxy(inner, outer)
        yield f"127.0.0.1:{outer}", proxy
        proxy.close()
    finally:
        proc.kill()
        proc.wait(10)


def test_broker_restart_mid_run(start_daemon, tmp_path, kafka_names, redis_url, proxied_broker):
    bootstrap, proxy = proxied_broker
    topic, group = kafka_names("t"), kafka_names("g")
    broker_mod.create_topic(bootstrap, topic, 4)
    produce(bootstrap, topic, criteo_lines(40_000, seed=2))
    trace = tmp_path / "trace"
    proc = start_daemon(*kafka_sets(bootstrap, topic, group, trace, redis_url, max_wait_ms=50),
                        "--set", "batch_size=128")
    wait_for(lambda: sum(map(len, applied(trace).values())) >= 5000, 90, "5000 applied rows")
    proxy.stop()                                     # the broker goes away mid-stream ...
    time.sleep(5)
    assert proc.poll() is None, "the daemon survived the broker outage"
    proxy.start()                                    # ... and comes back with its log and offsets
    produce(bootstrap, topic, criteo_lines(10_000, seed=3))
    end = broker_mod.end_offsets(bootstrap, topic)
    assert sum(end.values()) == 50_000
    wait_for(lambda: broker_mod.committed_offsets(bootstrap, topic, group) == end, 120,
             "the daemon to train on and commit every message", interval=1)
    assert_committed_were_applied(end, applied(trace))
    lag = lag_of(wait_metrics(proc, lambda text: lag_of(text) and set(lag_of(text).values()) == {0.0}, timeout=15))
    assert lag and set(lag.values()) == {0.0}, lag
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0, proc.log.read_text()[-3000:]
    assert "Connection" in proc.log.read_text()      # it did see the broker go away


# A job's start-up in this process: the model built and, on a cold numba cache (CI's lowest-versions
# stage compiles every kernel again at the floor numba), each kernel compiled as it is first used:
# 10-20 s on a quiet 2-core host, 48 s measured under load ~10 (pytest -n 2, niced) before the
# first batch. Waited for on its own, so the waits after it bound what they are about.
STARTUP_S = 120


def start_lr_job(bootstrap, topic, group, trace, store=None):
    """LR on the memory store (or ``store``) reading ``topic`` (batches of 50, tracing to
    ``trace``), in a thread; returned once it has trained its first batch."""
    from streamtrain import config as configmod
    from streamtrain.job import Job
    from tests.fixtures_kafka import LR_LAYERS

    cfg = configmod.merge(configmod.defaults(), {
        "batch_size": 50, "layers": LR_LAYERS, "metrics": {"enabled": False},
        "reader": {"type": "kafka", "bootstrap": bootstrap, "topic": topic, "group": group,
                   "format": "criteo", "max_wait_ms": 100, "trace_file": str(trace),
                   "consumer": dict(broker_mod.TEST_CONSUMER)},
        **({"store": store} if store else {})})
    job = Job(configmod.validate(cfg))
    runner = threading.Thread(target=job.run, daemon=True)
    runner.start()
    wait_for(lambda: job.first_step is not None or not runner.is_alive(), STARTUP_S,
             "the job's first trained batch (its start-up)")
    assert runner.is_alive(), "the job ended before training"
    return job, runner


@pytest.mark.parametrize("backend", ["memory", "redis"])
def test_a_recreated_topic_is_followed_not_skipped(tmp_path, backend, request):
    """Tansu keeps its log in memory, so restarting it recreates the topic from offset 0. The
    consumer resets after OffsetOutOfRange; the reader must follow it down (and commit the new,
    lower offsets) instead of re-committing its stale position and skipping the new records.

    Deterministic: what is checked is *which* records were applied (the reader's trace), not
    how many times. After the restart the consumer still holds its old group generation until
    it rejoins, so a commit sent meanwhile fails and its batch is delivered again (at least
    once, as promised); and the consumer may reach the new broker before the test creates the
    topic (Tansu then auto-creates it with 4 partitions). Neither may make the test fail.

    With Redis writing back, a batch is committed after the flush that wrote it, raised to the
    newest offset of the batches before it: the new log's batches must not be raised to the old
    log's offsets (the partition's epoch, readers/kafka/offsets.py), or the commit would pass
    the new log's end (records below it skipped by the next owner)."""
    trace = tmp_path / "trace"
    store = None
    if backend == "redis":
        store = {"backend": "redis", "urls": [request.getfixturevalue("redis_url")], "timeout_s": 1.0,
                 "write_back_s": 0.5}
    broker = broker_mod.TansuBroker().start()
    try:
        topic, group = "recreated", "g-recreated"
        broker_mod.create_topic(broker.bootstrap, topic, partitions=2)
        produce(broker.bootstrap, topic, criteo_lines(400, seed=1))
        old_ends = broker_mod.end_offsets(broker.bootstrap, topic)
        job, runner = start_lr_job(broker.bootstrap, topic, group, trace, store)
        # every old record applied *and committed*: nothing of the old log is in flight
        wait_for(lambda: broker_mod.committed_offsets(broker.bootstrap, topic, group) == old_ends,
                 60, f"the first 400 records to be committed at {old_ends}")
        before = len(trace.read_text().splitlines())
        assert applied(trace) == {p: set(range(n)) for p, n in old_ends.items()}
        broker.stop()
        broker.start()
        broker_mod.create_topic(broker.bootstrap, topic, partitions=2)
        produce(broker.bootstrap, topic, criteo_lines(120, seed=2))
        ends = broker_mod.end_offsets(broker.bootstrap, topic)
        assert sum(ends.values()) == 120
        try:
            wait_for(lambda: broker_mod.committed_offsets(broker.bootstrap, topic, group) == ends, 90,
                     f"committed offsets to reach the new log end {ends}")
        except AssertionError as err:
            raise AssertionError(f"{err}: committed {broker_mod.committed_offsets(broker.bootstrap, topic, group)}, "
                                 f"the job's offsets {job.offsets}") from None
        job.stop_requested = True
        runner.join(30)
        assert not runner.is_alive()
        after = applied(trace, since_line=before)
        # every record of the recreated topic applied (none skipped), nothing else
        assert {p: after.get(p, set()) for p in ends} == {p: set(range(n)) for p, n in ends.items()}
        assert set(after) <= set(ends)
        assert job.trainer.examples >= 520
    finally:
        broker.stop()


def _topics(bootstrap) -> set:
    """The broker's topics, from a metadata request that creates none (Tansu creates a topic a
    metadata request names)."""
    from kafka import KafkaAdminClient
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **broker_mod.patient(KafkaAdminClient))
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def test_a_topic_the_reader_recreates_is_read_from_its_start(tmp_path):
    """The recreated-topic case where the consumer reaches the restarted broker first (what made
    the test above fail now and then under load): its metadata request creates the topic again
    (Tansu: 4 partitions), the group rejoins and the consumer keeps its old positions (200) past
    the new, empty logs; Tansu answers those fetches with nothing instead of OffsetOutOfRange,
    so nothing was ever read from them again (and once a new log passed 200, the records below
    would have been skipped). The reader now notices a position past the log end (confirmed
    with the broker's end offset) and reads the partition again from the beginning. The test
    waits for that case's event — the topic created by the reader, not by the test — before it
    produces: deterministic."""
    trace = tmp_path / "trace"
    broker = broker_mod.TansuBroker().start()
    try:
        topic, group = "recreated-by-reader", "g-recreated-by-reader"
        broker_mod.create_topic(broker.bootstrap, topic, partitions=2)
        produce(broker.bootstrap, topic, criteo_lines(400, seed=1))
        old_ends = broker_mod.end_offsets(broker.bootstrap, topic)
        job, runner = start_lr_job(broker.bootstrap, topic, group, trace)
        wait_for(lambda: broker_mod.committed_offsets(broker.bootstrap, topic, group) == old_ends,
                 60, f"the first 400 records to be committed at {old_ends}")
        before = len(trace.read_text().splitlines())
        broker.stop()
        broker.start()
        wait_for(lambda: topic in _topics(broker.bootstrap), 60, "the reader to create the topic again")
        produce(broker.bootstrap, topic, criteo_lines(120, seed=2))
        ends = broker_mod.end_offsets(broker.bootstrap, topic)
        assert sum(ends.values()) == 120
        wait_for(lambda: broker_mod.committed_offsets(broker.bootstrap, topic, group) == ends, 90,
                 f"committed offsets to reach the new log end {ends}")
        job.stop_requested = True
        runner.join(60)
        assert not runner.is_alive()
        after = applied(trace, since_line=before)
        assert {p: after.get(p, set()) for p in ends} == {p: set(range(n)) for p, n in ends.items()}
        assert set(after) <= set(ends)
    finally:
        broker.stop()
