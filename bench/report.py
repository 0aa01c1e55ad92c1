"""What every benchmark's ``--json FILE`` carries besides its figures: the command, the date,
the host (CPU model, cores) and the versions, plus the progressive-logloss curve the plots draw.
``bench/plots.py`` reads these files; BENCHMARKS.md's tables are made from the same runs."""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

PACKAGES = ("numpy", "river", "vowpalwabbit", "torch", "torch-geometric", "redis", "kafka-python", "uvicorn")


def cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def meta(script: str, argv=None) -> dict:
    """The run's provenance: exact command, date, host and versions."""
    args = sys.argv[1:] if argv is None else list(argv)
    return {"command": " ".join(["python", script, *args]),
            "date": datetime.date.today().isoformat(),
            "host": {"cpu": cpu(), "cores": os.cpu_count(), "machine": platform.machine(),
                     "load_average": round(os.getloadavg()[0], 2)},
            "versions": versions()}


def curve(y, p, points: int = 100) -> dict:
    """Progressive logloss over the stream: the mean loss of the first n examples, at ``points``
    evenly spaced n (predictions clipped to [1e-7, 1 - 1e-7], as ``streamtrain.scores``)."""
    y = np.asarray(y, np.float64).reshape(-1)
    p = np.clip(np.asarray(p, np.float64).reshape(-1), 1e-7, 1 - 1e-7)
    loss = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    at = np.unique(np.linspace(1, len(y), min(points, len(y))).astype(np.int64))
    cum = np.cumsum(loss)[at - 1] / at
    return {"examples": at.tolist(), "logloss": [round(float(v), 6) for v in cum]}


def write(path, obj: dict) -> None:
    Path(path).write_text(json.dumps(obj, indent=1) + "\n")
    print(f"# wrote {path}", file=sys.stderr)
