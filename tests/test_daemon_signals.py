"""``streamtrain run`` as a real subprocess: metrics over HTTP, SIGHUP, SIGTERM drain, hard stop, sd_notify."""
from __future__ import annotations

import json
import re
import signal
import socket
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamtrain import checkpoint
from streamtrain.metrics import PHASES
from tests.fixtures_prometheus import http_get, wait_for, wait_metrics

pytestmark = pytest.mark.timeout(120)

EXPECTED = [
    "streamtrain_examples_total", "streamtrain_batches_total", "streamtrain_records_malformed_total",
    "streamtrain_step_seconds", "streamtrain_progressive_logloss", "streamtrain_progressive_auc",
    "streamtrain_predicted_ctr", "streamtrain_observed_ctr", "streamtrain_kafka_lag",
    "streamtrain_event_to_update_seconds", "streamtrain_store_rows_pulled_total",
    "streamtrain_store_rows_pushed_total", "streamtrain_store_errors_total", "streamtrain_embedding_rows",
    "streamtrain_layer_state", "streamtrain_checkpoint_last_success_timestamp_seconds",
    "streamtrain_nonfinite_batches_total",
]


def batches_of(text: str) -> float:
    m = re.search(r"^streamtrain_batches_total (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def samples(text: str) -> dict:
    """{sample name: [(labels, value)]} of an exposition; family names are checked apart."""
    out = {}
    for family in text_string_to_metric_families(text):
        out.setdefault("#" + family.name, family.type)
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def one(found, name, **labels):
    values = [v for lab, v in found.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(values) == 1, (name, labels, found.get(name))
    return values[0]


def check_sane(found: dict, started: float) -> None:
    declared = {k[1:] for k in found if k.startswith("#")}
    # Counter families are named without _total by the parser
    assert {n.removesuffix("_total") for n in EXPECTED} <= declared, set(EXPECTED) - declared
    examples, batches = one(found, "streamtrain_examples_total"), one(found, "streamtrain_batches_total")
    assert batches >= 3 and examples == pytest.approx(batches * 256, rel=0.01)
    for phase in PHASES:
        assert one(found, "streamtrain_step_seconds_count", phase=phase) >= 1, phase
        assert 0 < one(found, "streamtrain_step_seconds_sum", phase=phase) < 60 * batches
    assert 0.2 < one(found, "streamtrain_progressive_logloss") < 0.8       # the planted model's CTR is ~0.37
    assert 0.55 < one(found, "streamtrain_progressive_auc") <= 1
    assert abs(one(found, "streamtrain_predicted_ctr") - one(found, "streamtrain_observed_ctr")) < 0.1
    assert one(found, "streamtrain_event_to_update_seconds_count") == examples
    assert 0 <= one(found, "streamtrain_event_to_update_seconds_sum") / examples < 5
    assert one(found, "streamtrain_store_rows_pulled_total") >= one(found, "streamtrain_store_rows_pushed_total") > 0
    assert one(found, "streamtrain_store_errors_total") == 0
    live = [v for lab, v in found["streamtrain_embedding_rows"] if lab["state"] == "live"]
    assert len(live) == 2 and all(100 < v <= 8 * 10000 for v in live)
    assert one(found, "streamtrain_layer_state", layer="fm", streamtrain_layer_state="update") == 1
    assert started < one(found, "streamtrain_checkpoint_last_success_timestamp_seconds") < time.time()
    assert one(found, "streamtrain_nonfinite_batches_total") == 0
    assert {lab["reason"] for lab, v in found["streamtrain_records_malformed_total"]} >= {"label", "number"}
    assert "streamtrain_kafka_lag" not in found                  # declared; no partitions on this source


def test_metrics_sighup_and_sigterm_drain(start_daemon, tmp_path):
    started = time.time()
    proc = start_daemon("--set", "checkpoint.every_seconds=0", "--summary", str(tmp_path / "summary.json"))
    wait_metrics(proc, lambda t: batches_of(t) >= 80)         # ~20k examples: the model has learned a bit
    assert http_get(f"http://127.0.0.1:{proc.port}/healthz")[0] == 200
    assert http_get(f"http://127.0.0.1:{proc.port}/readyz") == (200, "ok\n")
    assert http_get(f"http://127.0.0.1:{proc.port}/nope")[0] == 404
    ckpt = tmp_path / "ckpt"
    assert not (ckpt / "LATEST").exists()                      # periodic checkpoints are off here
    proc.send_signal(signal.SIGHUP)
    wait_for(lambda: (ckpt / "LATEST").exists(), 10, "the SIGHUP checkpoint")
    text = wait_metrics(proc, lambda t: "streamtrain_checkpoint_last_success_timestamp_seconds 1" in t)
    found = samples(text)
    check_sane(found, started)
    first = checkpoint.resolve(ckpt).name

    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 0, proc.log.read_text()[-3000:]
    assert time.monotonic() - sent < 10
    snap, meta = checkpoint.read(ckpt)
    assert checkpoint.resolve(ckpt).name != first and meta["created"] > sent - time.monotonic() + time.time() - 1
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert meta["step"] == summary["batches"] >= one(found, "streamtrain_batches_total")
    assert meta["offsets"] == {"synthetic": summary["examples"]}   # committed = trained, in one place
    log = proc.log.read_text()
    assert "SIGHUP: writing a checkpoint" in log and "SIGTERM: finishing the current batch" in log


def test_double_signal_hard_stop_and_systemd_notify(start_daemon, tmp_path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "notify.sock"))
    sock.settimeout(30)
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "400000"}
    # one step of 300k examples takes seconds, so the second signal lands inside the first's drain
    proc = start_daemon("--set", "batch_size=300000", "--summary", str(tmp_path / "summary.json"), env=env)
    messages = []

    def receive(until):
        while not any(until in m for m in messages):
            messages.append(sock.recv(4096).decode())

    receive("READY=1")
    receive("WATCHDOG=1")
    wait_for(lambda: "model built" in proc.log.read_text(), 30, "the first batch")
    proc.send_signal(signal.SIGTERM)
    receive("STOPPING=1")                                       # sent after the handlers were re-pointed
    assert "SIGTERM: finishing" in proc.log.read_text()
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == -signal.SIGTERM                     # died of the second signal
    assert time.monotonic() - sent < 5                          # the rc above is the proof; this bounds it
    assert not (tmp_path / "summary.json").exists()             # no drain, no teardown
    assert not (tmp_path / "ckpt" / "LATEST").exists()
    assert "exiting at once" in proc.log.read_text()
    ready = next(m for m in messages if "READY=1" in m)
    assert messages.index(ready) < min(i for i, m in enumerate(messages) if "WATCHDOG=1" in m)
    assert any("STATUS=" in m for m in messages if "WATCHDOG=1" in m)
    sock.close()
