"""A real Prometheus scrapes a running daemon; every dashboard and alert expression evaluates and has data.

The daemon is the real wiring (``daemon.serve``: metrics, HTTP server, heartbeat) around a Job
in a thread, fed by an in-process source that reports Kafka-style lag, so every metric —
``streamtrain_kafka_lag`` included — has samples.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml

from streamtrain.daemon import serve
from streamtrain.job import Job
from tests.fixtures_prometheus import THRESHOLD, http_get, job_config, pick_port, query, wait_all_have_data, wait_for

pytestmark = pytest.mark.timeout(120)
DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def dashboard_exprs() -> list[str]:
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "streamtrain.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"]) >= 10
    # Grafana's variables, as Grafana would expand them with "All" selected
    return [e.replace("$__rate_interval", "1m").replace("$instance", ".*") for e in exprs]


def alert_rules() -> list[dict]:
    rules = [r for g in yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"]
             for r in g["rules"]]
    assert {r["alert"] for r in rules} >= {"StreamtrainNoProgress", "StreamtrainKafkaLagGrowing",
                                           "StreamtrainLoglossHigh", "StreamtrainStoreErrors",
                                           "StreamtrainCheckpointTooOld"}
    return rules


def test_dashboard_and_alert_expressions_return_data(tmp_path, fake_stream, run_prometheus):
    fake_stream(batch_size=64, delay=0.01)
    port = pick_port()
    cfg = job_config(tmp_path, metrics={"port": port, "refresh_seconds": 0.2},
                     checkpoint={"dir": str(tmp_path / "ckpt"), "every_seconds": 1})
    job = Job(cfg)
    _, server, _ = serve(job, cfg)
    worker = threading.Thread(target=job.run, daemon=True)
    worker.start()
    try:
        base = run_prometheus(port, [DEPLOY / "prometheus" / "alerts.yml"])
        rules = alert_rules()
        # what must have data: every dashboard query, and every alert condition without its threshold
        signals = dashboard_exprs() + [THRESHOLD.sub("", r["expr"]) for r in rules]
        wait_all_have_data(base, signals)
        for rule in rules:                               # the full conditions evaluate without error
            query(base, rule["expr"])
        groups = json.loads(http_get(f"{base}/api/v1/rules")[1])["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        assert len(loaded) == len(rules)
        wait_for(lambda: all(r["health"] == "ok" for g in json.loads(http_get(f"{base}/api/v1/rules")[1])
                             ["data"]["groups"] for r in g["rules"]), 10, "every rule evaluated ok")
        up = query(base, 'up{job="streamtrain"}')
        assert up and up[0]["value"][1] == "1"
    finally:
        job.stop_requested = True
        worker.join(20)
        server.stop()
    assert not worker.is_alive()
