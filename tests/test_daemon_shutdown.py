"""Shutdown and readiness of a real ``streamtrain run`` (issue 24, item 8).

* a final checkpoint that cannot be written (read-only filesystem): one clear ERROR line naming
  the checkpoint that stays, exit 3, no traceback;
* ``/readyz`` follows the Kafka broker: 503 while it is down, 200 again once it is back;
* a first SIGTERM while Redis or Kafka is unreachable at start-up stops the daemon within
  seconds (it used to wait out the store's 30 s give-up, or the consumer's 30 s bootstrap),
  and ``streamtrain_store_waiting`` is 1 during the store's own retries, not only after them;
* a daemon started before its Kafka broker waits for it and then trains.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures_prometheus import http_get, wait_for
from tests.kafka_broker import TEST_CONSUMER, TansuBroker, create_topic, free_port

pytestmark = pytest.mark.timeout(240)
ROOT = Path(__file__).resolve().parents[1]


def scrape(port: int) -> dict:
    from prometheus_client.parser import text_string_to_metric_families
    code, text = http_get(f"http://127.0.0.1:{port}/metrics")
    assert code == 200
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def kafka_reader(bootstrap: str, topic: str, **more) -> str:
    return "reader=" + json.dumps({"type": "kafka", "bootstrap": bootstrap, "topic": topic, "group": "g-" + topic,
                                   "format": "criteo", "max_wait_ms": 100, "consumer": TEST_CONSUMER, **more})


def criteo(n: int) -> list[bytes]:
    return [("\t".join(["1" if i % 3 else "0", *["1"] * 13, *[f"{(i * 7 + k) % 97:08x}" for k in range(26)]])).encode()
            for i in range(n)]


def stop_and_time(proc) -> tuple[int, float]:
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    return proc.wait(60), time.monotonic() - sent


# ---- the final checkpoint -------------------------------------------------------------------
@pytest.fixture
def remountable(tmp_path):
    """A 4 MiB tmpfs at tmp/ckpt and ``read_only()`` to remount it read-only (root only)."""
    where = tmp_path / "ckpt"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a tmpfs")
    yield where, lambda: subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
    subprocess.run(["umount", "-l", str(where)], check=False)


def run(*args, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / "fm.json"),
                           "--set", "metrics.enabled=false", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_a_final_checkpoint_on_a_read_only_disk_exits_3_with_one_clear_line(remountable, tmp_path):
    where, read_only = remountable
    first = run("--max-examples", 4096, "--set", f"checkpoint.dir={where}")
    assert first.returncode == 0, first.stderr[-2000:]
    kept = (where / "LATEST").read_text().strip()
    read_only()
    summary = tmp_path / "summary.json"
    second = run("--max-examples", 8192, "--set", f"checkpoint.dir={where}", "--restore", "latest",
                 "--summary", summary)
    assert second.returncode == 3, second.stderr[-3000:]
    assert "Traceback" not in second.stderr
    errors = [line for line in second.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1, errors
    assert "final checkpoint failed" in errors[0] and f"{where / kept}" in errors[0]
    assert "Read-only file system" in errors[0]
    out = json.loads(summary.read_text())
    assert out["examples"] == 8192 and "Read-only file system" in out["checkpoint_error"]
    assert (where / "LATEST").read_text().strip() == kept


# ---- start-up without Redis or Kafka: SIGTERM at once ------------------------------------------
def test_sigterm_while_redis_is_unreachable_at_start_up(start_daemon):
    port = free_port()           # nothing listens there; the store's own give-up stays at 30 s
    proc = start_daemon("--set", "store.backend=redis", "--set", f'store.urls=["redis://127.0.0.1:{port}"]')
    wait_for(lambda: proc.poll() is None and scrape(proc.port).get("streamtrain_store_waiting") == 1, 20,
             "store_waiting = 1 while the store retries (before its 30 s give-up)")
    assert http_get(f"http://127.0.0.1:{proc.port}/readyz")[0] == 503
    code, text = http_get(f"http://127.0.0.1:{proc.port}/healthz")
    assert code == 200 and "waiting for the store to answer (redis store:" in text
    time.sleep(2.0)              # the store's retries have run past their grace for a blip
    rc, took = stop_and_time(proc)
    assert rc == 0 and took < 5.0, (rc, took, proc.log.read_text()[-2000:])
    log = proc.log.read_text()
    assert "stopped while 127.0.0.1:" in log and "failed after" not in log       # it never gave up


def test_sigterm_while_kafka_is_unreachable_at_start_up(start_daemon):
    port = free_port()
    proc = start_daemon("--set", kafka_reader(f"127.0.0.1:{port}", "nowhere"))
    base = f"http://127.0.0.1:{proc.port}"
    wait_for(lambda: proc.poll() is None and http_get(base + "/healthz")[0] == 200, 20, "the endpoints")
    wait_for(lambda: "waiting for the Kafka broker" in http_get(base + "/healthz")[1], 20, "the wait for the broker")
    assert http_get(base + "/readyz") == (503, "reader not connected\n")
    time.sleep(3.0)
    rc, took = stop_and_time(proc)
    assert rc == 0 and took < 5.0, (rc, took, proc.log.read_text()[-2000:])
    assert "Traceback" not in proc.log.read_text()


# ---- Kafka: waiting for a broker, readiness while it is down ---------------------------------------
@pytest.fixture
def private_broker():
    """A Tansu broker of this test's own (it is stopped and started again)."""
    broker = TansuBroker()
    yield broker
    broker.stop()


def produce(bootstrap, topic, n):
    from streamtrain.produce import produce as send
    send(iter(criteo(n)), bootstrap, topic)


def test_a_daemon_started_before_its_broker_waits_then_trains(start_daemon, private_broker):
    # the run ends 5 s after the last record, not at the end seen at assignment (stop_at_end): the
    # daemon joins the moment the broker answers, so that end could be what was produced so far
    proc = start_daemon("--set", kafka_reader(private_broker.bootstrap, "late", idle_timeout_s=5),
                        "--summary", "summary.json")
    base = f"http://127.0.0.1:{proc.port}"
    wait_for(lambda: proc.poll() is None and "waiting for the Kafka broker" in http_get(base + "/healthz")[1], 30,
             "the daemon to wait for its broker")
    private_broker.start()
    create_topic(private_broker.bootstrap, "late", 2)
    produce(private_broker.bootstrap, "late", 3000)
    assert proc.wait(90) == 0, proc.log.read_text()[-3000:]
    summary = json.loads((proc.log.parent / "summary.json").read_text())
    assert summary["examples"] == 3000


def test_readyz_follows_the_kafka_broker(start_daemon, private_broker):
    private_broker.start()
    create_topic(private_broker.bootstrap, "ready", 2)
    produce(private_broker.bootstrap, "ready", 2000)
    proc = start_daemon("--set", kafka_reader(private_broker.bootstrap, "ready"))
    base = f"http://127.0.0.1:{proc.port}"
    wait_for(lambda: proc.poll() is None and scrape(proc.port).get("streamtrain_examples_total", 0) >= 2000, 60,
             "the records trained")
    assert http_get(base + "/readyz") == (200, "ok\n")
    private_broker.stop()
    down = time.monotonic()
    wait_for(lambda: http_get(base + "/readyz") == (503, "reader not connected\n"), 30, "/readyz 503 without a broker")
    assert time.monotonic() - down < 30
    assert http_get(base + "/healthz")[0] == 200          # caught up, not stalled: no restart wanted
    private_broker.start()
    wait_for(lambda: http_get(base + "/readyz") == (200, "ok\n"), 60, "/readyz 200 with the broker back")
    rc, took = stop_and_time(proc)
    assert rc == 0, proc.log.read_text()[-3000:]
