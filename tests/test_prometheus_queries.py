"""A real Prometheus scrapes running daemons; every dashboard and alert expression evaluates and has data.

Each daemon is the real wiring (``daemon.serve``: metrics, HTTP server, heartbeat) around a Job
in a thread, fed by an in-process source that reports Kafka-style lag, so every metric —
``streamtrain_kafka_lag`` included — has samples. Three daemons, one per loss kind (logloss,
softmax_ce, mse), so every quality panel and alert has a model it applies to; each exports
only its own kind's quality gauges.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
import yaml

from streamtrain.daemon import serve
from streamtrain.job import Job
from tests.fixtures_prometheus import http_get, alert_signal, job_config, pick_port, query, wait_all_have_data, wait_for

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


QUALITY = {"logloss": {"streamtrain_progressive_logloss", "streamtrain_progressive_auc", "streamtrain_predicted_ctr",
                       "streamtrain_observed_ctr"},
           "softmax_ce": {"streamtrain_progressive_logloss", "streamtrain_progressive_accuracy"},
           "mse": {"streamtrain_progressive_rmse", "streamtrain_progressive_mae", "streamtrain_label_stddev"}}


def start_daemons(tmp_path, fake_stream) -> dict:
    """One daemon per loss kind: {loss: (port, job, server, thread)}."""
    from tests.test_quality import MODELS
    out = {}
    for loss in QUALITY:
        fake_stream(batch_size=64, delay=0.01)
        port = pick_port()
        over = {} if loss == "logloss" else {"layers": MODELS[loss]}
        cfg = job_config(tmp_path / loss, metrics={"port": port, "refresh_seconds": 0.2},
                         checkpoint={"dir": str(tmp_path / loss / "ckpt"), "every_seconds": 1}, **over)
        job = Job(cfg)
        _, server, _ = serve(job, cfg)
        worker = threading.Thread(target=job.run, daemon=True)
        worker.start()
        out[loss] = (port, job, server, worker)
    return out


def test_dashboard_and_alert_expressions_return_data(tmp_path, fake_stream, run_prometheus):
    daemons = start_daemons(tmp_path, fake_stream)
    try:
        base = run_prometheus([d[0] for d in daemons.values()], [DEPLOY / "prometheus" / "alerts.yml"])
        rules = alert_rules()
        # what must have data: every dashboard query, and every alert condition without its threshold
        signals = dashboard_exprs() + [alert_signal(r["expr"]) for r in rules]
        wait_all_have_data(base, signals)
        for rule in rules:                               # the full conditions evaluate without error
            query(base, rule["expr"])
        groups = json.loads(http_get(f"{base}/api/v1/rules")[1])["data"]["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        assert len(loaded) == len(rules)
        wait_for(lambda: all(r["health"] == "ok" for g in json.loads(http_get(f"{base}/api/v1/rules")[1])
                             ["data"]["groups"] for r in g["rules"]), 10, "every rule evaluated ok")
        # the logloss alert's threshold is the window's base rate, which only a binary model has
        logloss_rule = next(r for r in rules if r["alert"] == "StreamtrainLoglossHigh")
        compared = {x["metric"]["instance"] for x in query(base, alert_signal(logloss_rule["expr"]))}
        assert compared == {f"127.0.0.1:{daemons['logloss'][0]}"}
        # the RMSE alert's threshold is the window's label standard deviation: mse models only
        rmse_rule = next(r for r in rules if r["alert"] == "StreamtrainRmseHigh")
        compared = {x["metric"]["instance"] for x in query(base, alert_signal(rmse_rule["expr"]))}
        assert compared == {f"127.0.0.1:{daemons['mse'][0]}"}
        up = query(base, 'up{job="streamtrain"}')
        assert len(up) == 3 and all(x["value"][1] == "1" for x in up)
        for loss, (port, *_) in daemons.items():      # each kind's gauges, and no other kind's
            have = {x["metric"]["__name__"] for x in query(base, f'{{instance="127.0.0.1:{port}", '
                                                                 f'__name__=~"streamtrain_(progressive_.*|.*_ctr|label_.*)"}}')}
            assert have == QUALITY[loss], loss
    finally:
        for _, job, server, worker in daemons.values():
            job.stop_requested = True
            worker.join(20)
            server.stop()
    assert not any(worker.is_alive() for *_, worker in daemons.values())
