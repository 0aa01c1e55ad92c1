"""Fixtures for the daemon, metrics and Prometheus tests.

* ``fake_stream`` — replaces ``streamtrain.readers.open_reader`` with an in-process source of
  random batches (offsets, event timestamps, a ``lag()``), so Job-level tests need no reader.
* ``free_port``, ``daemon_config``, ``start_daemon`` — a real ``streamtrain run`` subprocess on
  the synthetic stream, with tmp dirs and a free metrics port.
* ``prometheus_bin`` / ``run_prometheus`` — Debian's prometheus binary (``.ci/install-system-tools``
  installs it); tests skip with a reason when it is absent.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from streamtrain.readers.source import Source

ROOT = Path(__file__).resolve().parents[1]
MODEL = json.loads((ROOT / "examples" / "synthetic.json").read_text())["layers"]


def pick_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def free_port() -> int:
    return pick_port()


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            value = predicate()
        except OSError:
            value = None
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


# ---- querying a real Prometheus --------------------------------------------------------------
# a comparison between series or with a number (not a label matcher's `!=` inside braces)
COMPARISON = re.compile(r"(\{[^}]*\})|(==|!=|>=|<=|>|<)")


def alert_signal(expr: str) -> str:
    """An alert's condition with every comparison made ``bool``: a 0/1 sample wherever both sides
    have data, so "the condition has data" holds whether or not the alert fires (thresholds that are
    series, like the base-rate logloss, included)."""
    return COMPARISON.sub(lambda m: m.group(1) or f"{m.group(2)} bool", expr)


def query(base: str, expr: str) -> list:
    code, body = http_get(f"{base}/api/v1/query?query={urllib.parse.quote(expr)}")
    answer = json.loads(body)
    assert code == 200 and answer["status"] == "success", f"{expr!r}: {answer.get('error', body)}"
    return answer["data"]["result"]


def wait_all_have_data(base: str, exprs, timeout: float = 45) -> None:
    """Until every expression returns data (Prometheus scrapes every second); fail naming those that do not."""
    pending = set(exprs)

    def all_have_data():
        for expr in sorted(pending):
            if query(base, expr):
                pending.discard(expr)
        return not pending
    try:
        wait_for(all_have_data, timeout, "data for every expression", interval=1.0)
    except AssertionError:
        pytest.fail(f"no data from: {sorted(pending)}")


# ---- an in-process source ---------------------------------------------------------------------
class FakeSource(Source):
    """Random batches (fields a, b, c; 3 dense) with offsets ``{("fake", 0): n}`` and timestamps."""

    def __init__(self, batch_size=64, batches=None, poison=None, delay=0.0):
        from streamtrain.testing import random_batch
        super().__init__(description="fake")     # (the rest of Source's contract: commit_many, ...)
        self._make = random_batch
        self.batch_size, self.limit = batch_size, batches
        self.poison = poison or {}          # batch number -> callable(batch) that spoils it
        self.position = 0
        self.delay = delay
        self.committed: list[dict] = []
        self.closed = False

    def batches(self):
        n = 0
        while self.limit is None or n < self.limit:
            batch = self._make(self.batch_size, cardinality=50, seed=self.position)
            self.position += 1
            batch.offsets = {("fake", 0): self.position}
            batch.timestamps = np.full(batch.size, time.time() - 2.0)
            if n in self.poison:
                self.poison[n](batch)
            n += 1
            if self.delay:
                time.sleep(self.delay)
            yield batch

    def commit(self, offsets):
        self.committed.append(dict(offsets))

    def seek(self, offsets):
        self.position = offsets.get(("fake", 0), 0)

    def lag(self):
        return {("fake", 0): 1000 - self.position, ("fake", 1): 7}

    def describe(self):
        return "fake"

    def close(self):
        self.closed = True


@pytest.fixture
def fake_stream(monkeypatch):
    """``make(**kw)`` → the FakeSource the next Job will read from."""
    import streamtrain.readers as readers
    from streamtrain.readers.malformed import Malformed
    made = {}

    def make(**kw):
        made["source"] = FakeSource(**kw)
        return made["source"]

    monkeypatch.setattr(readers, "Malformed", Malformed, raising=False)
    monkeypatch.setattr(readers, "open_reader", lambda cfg, bs, malformed: made["source"], raising=False)
    return make


def job_config(tmp_path, **over) -> dict:
    from streamtrain import config as configmod
    cfg = configmod.merge(configmod.defaults(), {"layers": MODEL, "batch_size": 64,
                                               "checkpoint": {"dir": str(tmp_path / "ckpt")}})
    return configmod.merge(cfg, over)


# ---- a daemon subprocess ----------------------------------------------------------------------
def daemon_args(tmp_path, port, *extra) -> list[str]:
    return [sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / "synthetic.json"),
            "--set", f"metrics.port={port}", "--set", f"checkpoint.dir={tmp_path / 'ckpt'}",
            "--set", "checkpoint.every_seconds=2", "--set", "log.every_seconds=1",
            "--set", "metrics.refresh_seconds=0.2", *extra]


@pytest.fixture
def start_daemon(tmp_path):
    """Start ``streamtrain run`` on the synthetic stream; every process is killed at teardown."""
    procs = []

    def start(*extra, port=None, env=None, log_name="daemon.log"):
        port = port or pick_port()
        logf = open(tmp_path / log_name, "wb")
        proc = subprocess.Popen(daemon_args(tmp_path, port, *extra), stdout=logf, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, cwd=tmp_path)
        proc.port, proc.log = port, tmp_path / log_name
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)


def wait_metrics(proc, predicate=lambda text: "streamtrain_batches_total" in text, timeout=30.0) -> str:
    def scrape():
        assert proc.poll() is None, f"daemon exited with {proc.returncode}:\n{proc.log.read_text()[-3000:]}"
        code, text = http_get(f"http://127.0.0.1:{proc.port}/metrics")
        return text if code == 200 and predicate(text) else None
    return wait_for(scrape, timeout, "the daemon's /metrics")


# ---- a real Prometheus ------------------------------------------------------------------------
@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if not path:
        from tests.conftest import install_system_tools
        install_system_tools()
        path = shutil.which("prometheus")
    if path is None:
        pytest.skip("the prometheus binary is absent (run .ci/install-system-tools: Debian package 'prometheus')")
    return path


@pytest.fixture
def run_prometheus(prometheus_bin, tmp_path):
    """``start(target_port, rule_files)`` → base URL of a Prometheus scraping 127.0.0.1:target
    (or each of a list of ports) every 1 s."""
    procs = []

    def start(target_port, rule_files=()):
        port = pick_port()
        ports = target_port if isinstance(target_port, (list, tuple)) else [target_port]
        conf = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(p) for p in rule_files],
                "scrape_configs": [{"job_name": "streamtrain",
                                    "static_configs": [{"targets": [f"127.0.0.1:{p}" for p in ports]}]}]}
        (tmp_path / "prometheus.yml").write_text(json.dumps(conf))   # JSON is YAML
        logf = open(tmp_path / "prometheus.log", "wb")
        procs.append(subprocess.Popen(
            [prometheus_bin, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=logf, stderr=subprocess.STDOUT))
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: http_get(base + "/-/ready", 1)[0] == 200, 20, "prometheus to be ready")
        return base

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)
