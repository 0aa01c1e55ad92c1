"""Serving's deployment files: the compose service, the unit, the image; and a real Prometheus
scraping a prediction server under load, where every serving dashboard and alert expression
has data."""
from __future__ import annotations

import configparser
import json
import threading
from pathlib import Path

import httpx
import pytest
import yaml

from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.metrics import ServeMetrics
from streamtrain.serve.http import Server, make_app
from streamtrain.serve.service import JobModel, Service
from streamtrain.serve.settings import serve_settings
from tests.fixtures_prometheus import http_get, alert_signal, wait_all_have_data

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def test_compose_serve_service_is_a_redis_job_on_the_trainers_namespace():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    serve = services["serve"]
    assert serve["command"] == ["serve", "synthetic"]            # the shipped example, by name
    raw = serve["environment"]["STREAMTRAIN_SET"].replace("${TOPIC:-clicks}", "clicks") \
        .replace("${REPLAY_FORMAT:-criteo}", "criteo")
    cfg = configmod.validate(configmod.load(ROOT / "examples" / "synthetic.json", [s for s in raw.split(";") if s]))
    assert cfg["store"] == {"backend": "redis", "urls": ["redis://redis:6379/0"]}
    assert serve_settings(cfg)["host"] == "0.0.0.0" and serve_settings(cfg)["port"] == 8080
    assert "8080/healthz" in " ".join(serve["healthcheck"]["test"])
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert {"job_name": "streamtrain-serve", "static_configs": [{"targets": ["serve:8080"]}]} in prom["scrape_configs"]
    assert "/etc/prometheus/alerts-serving.yml" in prom["rule_files"]


def test_serve_unit_and_image():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string((DEPLOY / "systemd" / "streamtrain-serve.service").read_text().replace("\\\n", " "))
    svc = unit["Service"]
    assert "streamtrain serve /etc/streamtrain/job.json" in svc["ExecStart"] and svc["Restart"] == "on-failure"
    for key in ("NoNewPrivileges", "ProtectSystem", "DynamicUser", "RestrictAddressFamilies"):
        assert key in svc, key
    docker = (DEPLOY / "Dockerfile").read_text()
    assert "install.sh" in docker and "8080" in docker
    assert '"${wheel}[serve,compression]"' in (DEPLOY / "install.sh").read_text()   # the image: serving, compressed topics


def serving_exprs():
    dash = json.loads((DEPLOY / "grafana" / "dashboards" / "streamtrain-serving.json").read_text())
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"]) >= 6
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    rules = [r for g in yaml.safe_load((DEPLOY / "prometheus" / "alerts-serving.yml").read_text())["groups"]
             for r in g["rules"]]
    return [e.replace("$__rate_interval", "1m").replace("$instance", ".*") for e in exprs], rules


@pytest.mark.timeout(120)
def test_serving_dashboard_and_alerts_have_data(run_prometheus):
    cfg = configmod.validate(configmod.load("examples/lr.json", [
        "metrics.enabled=false", "reader.type=synthetic", "reader.examples=1024", "reader.fields=3"]))
    job = Job(cfg)
    job.run()
    srv = Server(make_app(Service(JobModel(job), serve_settings(cfg), cfg["reader"]), ServeMetrics()),
                 "127.0.0.1", 0).start()
    stop = threading.Event()

    def load():
        with httpx.Client(base_url=f"http://127.0.0.1:{srv.port}") as c:
            while not stop.is_set():
                c.post("/v1/predict", json={"records": [{"f0": "1"}, {"f1": "2"}]})
                c.post("/v1/predict", json={"records": [{"nope": 1}]})
                stop.wait(0.02)

    worker = threading.Thread(target=load, daemon=True)
    worker.start()
    try:
        exprs, rules = serving_exprs()
        base = run_prometheus(srv.port, [DEPLOY / "prometheus" / "alerts-serving.yml"])
        signals = exprs + [alert_signal(r["expr"]).replace('job="streamtrain-serve"', 'job="streamtrain"')
                           for r in rules]
        wait_all_have_data(base, signals)
        groups = json.loads(http_get(f"{base}/api/v1/rules")[1])["data"]["groups"]
        assert sum(len(g["rules"]) for g in groups) == len(rules)
    finally:
        stop.set()
        worker.join(10)
        srv.stop()
