"""What is running, said everywhere a user or a scraper looks: ``streamtrain --version``, the
first log line of a run (and of eval), ``GET /v1/model`` and ``streamtrain_build_info`` (issue 30, item 7),
all from the one ``streamtrain.__version__`` the package metadata also reads."""
from __future__ import annotations

import json
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numba
import numpy as np

import streamtrain
from streamtrain import config as configmod
from streamtrain.job import Job
from streamtrain.metrics import Metrics, ServeMetrics
from streamtrain.serve.service import JobModel, Service
from streamtrain.serve.settings import serve_settings
from streamtrain.version import build_info

ROOT = Path(__file__).resolve().parents[1]
WANT = {"version": streamtrain.__version__, "python": platform.python_version(),
        "numpy": np.__version__, "numba": numba.__version__}


def test_one_version_read_by_the_metadata_and_printed_by_the_command():
    assert build_info() == WANT
    assert metadata.version("streamtrain") == streamtrain.__version__
    assert "dynamic = [\"version\"]" in (ROOT / "pyproject.toml").read_text()
    script = Path(sys.executable).with_name("streamtrain")
    out = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == (f"streamtrain {streamtrain.__version__} (Python {WANT['python']}, "
                          f"numpy {WANT['numpy']}, numba {WANT['numba']})\n")


def test_build_info_metric_on_the_trainers_and_the_servers_registries():
    for registry in (Metrics().registry, ServeMetrics().registry):
        assert registry.get_sample_value("streamtrain_build_info", WANT) == 1.0
    shared = Metrics().registry
    ServeMetrics(shared)                       # serving beside a job: one build_info, not two
    samples = [s for m in shared.collect() if m.name == "streamtrain_build" for s in m.samples]
    assert len(samples) == 1 and samples[0].labels == WANT


def test_the_first_log_line_and_the_model_description_carry_the_version(tmp_path):
    out = subprocess.run([sys.executable, "-m", "streamtrain", "run", "lr", "--max-examples", "600",
                          "--log-format", "json", "--set", "metrics.enabled=false",
                          "--set", f"checkpoint.dir={tmp_path}"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    first = json.loads(out.stderr.splitlines()[0])
    assert {k: first[k] for k in WANT} == WANT
    assert first["msg"].startswith(f"streamtrain {streamtrain.__version__} (Python ") and "'lr'" in first["msg"]
    scored = subprocess.run([sys.executable, "-m", "streamtrain", "eval", "lr", "--restore", str(tmp_path),
                             "--max-examples", "300", "--log-format", "json"],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert scored.returncode == 0, scored.stderr[-2000:]
    first = json.loads(scored.stderr.splitlines()[0])                 # eval's first line too
    assert {k: first[k] for k in WANT} == WANT
    assert first["msg"].startswith(f"streamtrain {streamtrain.__version__} (Python ") and "evaluating" in first["msg"]

    cfg = configmod.validate(configmod.load(ROOT / "examples" / "lr.json", [
        "metrics.enabled=false", "reader.examples=512", "batch_size=256"]))
    job = Job(cfg)
    job.run()
    described = Service(JobModel(job), serve_settings(cfg), cfg["reader"]).describe()
    assert described["version"] == streamtrain.__version__ and described["step"] == 2
