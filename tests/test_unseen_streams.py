"""bench/unseen_streams.py: the streams no AutoML default was tuned on (issue 28), written as a
user's CSV, and examples/auto.json run on one from the command line as the README says."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import unseen_streams as U  # noqa: E402

SHAPES = {"clicks24": (24, 0), "mlp8": (8, 2), "numcross": (4, 8), "drift": (10, 2), "rare": (5, 0)}


def write(tmp_path, name: str, n: int, tag: str = "") -> Path:
    path = tmp_path / f"{name}{tag}.csv"
    U.write_csv(path, *U.GENERATORS[name](np.random.default_rng([U.VERSION, U.NAMES.index(name)]), n))
    return path


def test_each_stream_is_a_seeded_csv_of_its_shape(tmp_path):
    assert set(SHAPES) == set(U.NAMES)
    for name, (fields, numeric) in SHAPES.items():
        a, b = write(tmp_path, name, 3000), write(tmp_path, name, 3000, "again")
        assert a.read_bytes() == b.read_bytes()            # the stream depends on its seed only
        lines = a.read_text().splitlines()
        header = lines[0].split(",")
        assert header[0] == "click" and len(header) == 1 + fields + numeric and len(lines) == 3001
        sets = U.reader_sets(a)
        assert "reader.label=click" in sets
        dense = json.loads(next(s for s in sets if s.startswith("reader.numeric=")).split("=", 1)[1]) if numeric else []
        assert dense == [f"d{j}" for j in range(numeric)]
        labels = np.array([int(line.split(",", 1)[0]) for line in lines[1:]])
        assert set(labels) <= {0, 1} and 0 < labels.sum() < len(labels)


def test_rates_and_the_drift_halfway(tmp_path):
    """The planted click-through rates the docs state (100,000 examples, ±0.01 / ±0.002)."""
    rates = {}
    for name in ("clicks24", "rare", "drift"):
        _, _, y = U.GENERATORS[name](np.random.default_rng([U.VERSION, U.NAMES.index(name)]), U.EXAMPLES)
        rates[name] = y.mean()
    assert abs(rates["clicks24"] - 0.204) < 0.01
    assert abs(rates["rare"] - 0.0042) < 0.002


def test_auto_json_on_a_click_log_csv_from_the_cli(tmp_path):
    """The README's command on a 24-column categorical click log: it runs, reads every column
    as a field, and the summary names the champion."""
    path = write(tmp_path, "clicks24", 4000)
    summary = tmp_path / "summary.json"
    sets = [a for s in U.reader_sets(path) for a in ("--set", s)]
    run = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / "auto.json"), *sets,
                          "--set", "metrics.enabled=false", "--summary", str(summary)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(summary.read_text())
    assert out["examples"] == 4000 and out["malformed"] == 0
    assert 0.3 < out["logloss"] < 0.6
    champion = out["automl"]["champion"]["assign"]
    assert champion["crosses"] == []        # 24 fields: more than max_fields (8), so none crossed at the start
