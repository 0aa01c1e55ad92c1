"""Whole jobs: the synthetic stream against its planted model, every example model on real data,
the summary contract, --max-examples, and concurrent evaluators."""
import json
import subprocess
import sys
import threading

import numpy as np
import pytest

from streamtrain import config as cfgmod
from streamtrain.evaluator import Evaluator
from streamtrain.job import Job
from streamtrain.scores import auc as exact_auc
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"
MODELS = ["lr", "fm", "deepfm", "wide_deep", "dcn", "pnn", "nfm"]
SUMMARY_KEYS = {"examples", "batches", "malformed", "elapsed_s", "examples_per_s", "logloss", "auc"}
QUIET = ["metrics.enabled=false", "log.every_seconds=1000", "checkpoint.dir=null"]    # nothing written into the checkout


def run_job(path, sets, **kw):
    job = Job(cfgmod.validate(cfgmod.load(path, [*QUIET, *sets])), **kw)
    preds, labels = [], []
    job.hooks.append(lambda j, b, r: (preds.append(np.array(r.predictions)), labels.append(b.labels.copy())))
    summary = job.run()
    return job, summary, np.concatenate(preds), np.concatenate(labels)


def test_synthetic_progressive_auc_reaches_the_planted_model():
    """Over the last 20% of 200k examples the learner's progressive AUC is within 0.02 of the
    AUC of the planted model itself on the same examples."""
    job, summary, p, y = run_job(EXAMPLES / "synthetic.json", ["reader.examples=200000"])
    assert summary["examples"] == len(p) == 200_000
    cut = int(0.8 * len(p))
    learner = exact_auc(y[cut:], p[cut:])
    planted = job.source.truth.auc(cut, len(p))
    assert planted > 0.85
    assert learner > planted - 0.02, (learner, planted)
    # the histogram AUC of the summary agrees with the exact one over all examples
    assert summary["auc"] == pytest.approx(exact_auc(y, p), abs=1e-4)


@pytest.mark.parametrize("model", MODELS)
def test_every_example_model_trains_on_criteo_to_the_end(model, criteo_path):
    _, s, p, y = run_job(EXAMPLES / f"{model}.json", [
        "reader.type=file", f"reader.path={criteo_path}", "reader.format=criteo"])
    assert SUMMARY_KEYS <= set(s)
    assert s["examples"] == 7625 and s["malformed"] == 0
    assert s["batches"] == -(-7625 // json.loads((EXAMPLES / f"{model}.json").read_text())["batch_size"])
    assert 0.40 < s["logloss"] < 0.56, s["logloss"]       # the base rate alone gives 0.52
    assert s["auc"] > 0.62, s["auc"]
    assert abs(s["predicted_ctr"] - 0.2147) < 0.05


@pytest.fixture(scope="module")
def movielens_csv(data_dir, tmp_path_factory):
    from streamtrain.movielens import write_movielens_csv
    path = tmp_path_factory.mktemp("ml") / "movielens.csv"
    write_movielens_csv(data_dir / "movielens_100k", path)
    return path


@pytest.mark.parametrize("model", MODELS)
def test_every_example_model_runs_on_movielens_csv_unchanged(model, movielens_csv):
    limit = None if model in ("lr", "fm") else 30_000
    _, s, p, y = run_job(EXAMPLES / f"{model}.json", [
        "reader.type=file", f"reader.path={movielens_csv}", "reader.format=csv",
        'reader.multivalue={"genres": "|"}'], max_examples=limit)
    assert s["examples"] == (limit or 100_000) and s["malformed"] == 0
    assert s["auc"] > 0.65 and s["logloss"] < 0.66, s


def test_cli_run_writes_the_summary_contract(tmp_path, criteo_path):
    out = tmp_path / "s.json"
    proc = subprocess.run(
        [sys.executable, "-m", "streamtrain", "run", str(EXAMPLES / "lr.json"),
         "--set", "reader.type=file", "--set", f"reader.path={criteo_path}", "--set", "reader.format=criteo",
         "--set", "metrics.enabled=false", "--max-examples", "1000", "--summary", str(out)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    s = json.loads(out.read_text())
    assert SUMMARY_KEYS <= set(s)
    assert s["examples"] == 1000                              # stopped exactly, mid-batch
    batch_size = json.loads((EXAMPLES / "lr.json").read_text())["batch_size"]
    assert s["batches"] == -(-1000 // batch_size) and s["examples_per_s"] > 0


def test_env_variables_stand_in_for_options(tmp_path, criteo_path):
    out = tmp_path / "s.json"
    env = {"STREAMTRAIN_CONFIG": str(EXAMPLES / "lr.json"), "STREAMTRAIN_MAX_EXAMPLES": "300",
           "STREAMTRAIN_SUMMARY": str(out), "PATH": "/usr/bin:/bin",
           "STREAMTRAIN_SET": f"reader.type=file;reader.path={criteo_path};reader.format=criteo;metrics.enabled=false"}
    proc = subprocess.run([sys.executable, "-m", "streamtrain", "run"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["examples"] == 300
    helptext = subprocess.run([sys.executable, "-m", "streamtrain", "run", "--help"], capture_output=True,
                              text=True).stdout
    for var in ("STREAMTRAIN_CONFIG", "STREAMTRAIN_SET", "STREAMTRAIN_MAX_EXAMPLES", "STREAMTRAIN_SUMMARY"):
        assert var in helptext


def test_concurrent_evaluators_share_one_model(criteo_path):
    job, _, _, _ = run_job(EXAMPLES / "deepfm.json", [
        "reader.type=file", f"reader.path={criteo_path}", "reader.format=criteo"], max_examples=3000)
    from streamtrain.readers import open_reader
    batches = list(open_reader({"type": "file", "path": str(criteo_path), "format": "criteo"}, 128).batches())[:12]
    rows_before = {n: len(t) for n, t in job.store.tables.items()}
    solo = Evaluator(job.graph, job.store)
    expected = [(solo.predict(b).copy(), solo.activation("deep1").copy()) for b in batches]
    results, errors = {}, []

    def serve(k):
        try:
            ev = Evaluator(job.graph, job.store)
            for _ in range(3):
                for i, b in enumerate(batches):
                    if (i + k) % 2:
                        results[(k, i)] = (ev.predict(b).copy(), ev.activation("deep1").copy())
        except Exception as err:   # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=serve, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 4 * 6
    for (_k, i), (p, h) in results.items():
        assert np.array_equal(p, expected[i][0]) and np.array_equal(h, expected[i][1])
    assert {n: len(t) for n, t in job.store.tables.items()} == rows_before   # serving adds no rows
    assert expected[0][1].shape == (128, 64)
