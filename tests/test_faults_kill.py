"""kill -9 with the memory store: the last checkpoint is whole, and ``--restore latest`` resumes from it.

A checkpoint holds parameters and the stream offsets together (one atomic rename), so what it
says was consumed is exactly what its parameters learned; a kill at any moment leaves the
previous one. (With Kafka + Redis, see test_faults_kafka.py.)
"""
from __future__ import annotations

import json
import signal
import time

import pytest

from streamtrain import checkpoint
from tests.fixtures_prometheus import wait_for

pytestmark = pytest.mark.timeout(120)


def test_kill_9_then_restore_latest(start_daemon, tmp_path):
    ckpt = tmp_path / "ckpt"
    first = start_daemon("--set", "checkpoint.every_batches=5", "--set", "checkpoint.every_seconds=0",
                         log_name="first.log")
    wait_for(lambda: len(list(ckpt.glob("ckpt-*"))) >= 3, 60, "three checkpoints")
    time.sleep(0.05)                                   # likely mid-step or mid-checkpoint
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    snap, meta = checkpoint.read(ckpt)                 # LATEST names a whole checkpoint
    assert meta["step"] % 5 == 0 and meta["step"] >= 5
    assert meta["offsets"] == {"synthetic": meta["examples"]} and meta["examples"] == meta["step"] * 256
    assert len(list(ckpt.glob("ckpt-*"))) <= 3 + 1      # keep=3 (+1 when killed before the prune)

    target = meta["examples"] + 256 * 10
    second = start_daemon("--restore", "latest", "--max-examples", str(target),
                          "--summary", str(tmp_path / "summary.json"), log_name="second.log")
    assert second.wait(60) == 0, second.log.read_text()[-3000:]
    log = second.log.read_text()
    assert f"(step {meta['step']})" in log and "restored checkpoint" in log
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["examples"] == target and summary["batches"] == meta["step"] + 10
    assert not list(ckpt.glob(".ckpt-*.tmp"))          # a temp dir left by the kill is cleaned up
    _, final = checkpoint.read(ckpt)
    assert final["step"] == meta["step"] + 10
