"""docker-compose.yml scales: ``docker compose up --scale trainer=N`` starts N trainers that
can coexist (no fixed name, no single host port, no shared state volume) and that Prometheus
scrapes one by one (DNS discovery of the service name)."""
from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_the_trainer_service_can_run_n_replicas():
    trainer = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["trainer"]
    assert "container_name" not in trainer and "hostname" not in trainer
    for port in trainer.get("ports", []):
        host = str(port).rsplit(":", 1)[0]
        low, _, high = host.rsplit(":", 1)[-1].partition("-")
        assert high and int(high) - int(low) >= 3, f"{port}: a fixed host port allows one replica"
    for volume in trainer.get("volumes", []):
        assert not str(volume).endswith(":/var/lib/streamtrain"), "replicas would share checkpoints"
    assert "--restore" not in trainer["command"] and trainer["environment"]["STREAMTRAIN_RESTORE"] == ""
    assert '"group": "streamtrain"' in trainer["environment"]["STREAMTRAIN_SET"]     # one consumer group


def test_prometheus_scrapes_every_replica():
    conf = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    (job,) = [j for j in conf["scrape_configs"] if j["job_name"] == "streamtrain"]
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["trainer"] and sd["type"] == "A" and sd["port"] == 9464
