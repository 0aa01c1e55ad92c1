"""Freshness, measured with real processes: a ``streamtrain run`` trainer writes to a real Redis,
a ``streamtrain serve`` process answers from it. The stream's labels flip at a known point (the
test creates a file the reader watches); the served predictions follow within
``max_staleness_s`` plus one request of the moment the flipped update is in the store."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np

from streamtrain.evaluator import Evaluator
from streamtrain.graph import Graph, Schema
from streamtrain.serve.inputs import records_batch
from streamtrain.store import make_store

ROOT = Path(__file__).resolve().parents[1]
STALENESS = 0.5
QUERY = {"records": [{"k": "x"}]}


def flip_reader(flag: str, pause_s: float = 0.002):
    """Item ``x`` is always clicked and ``y`` never, until ``flag`` exists: then the reverse."""
    def reader():
        i = 0
        flipped = False
        while True:
            if i % 64 == 0:
                flipped = flipped or os.path.exists(flag)
                time.sleep(pause_s)          # a trainer that leaves the machine some room
            k = "x" if i % 2 else "y"
            yield {"label": int((k == "x") != flipped), "k": k}
            i += 1
    return reader


LAYERS = [{"name": "sp", "type": "sparse_input"},
          {"name": "w", "type": "embedding", "inputs": ["sp"], "dim": 1, "init": "zeros"},
          {"name": "ws", "type": "sum_pooling", "inputs": ["w"]},
          {"name": "b", "type": "bias"},
          {"name": "logit", "type": "add", "inputs": ["ws", "b"]},
          {"name": "loss", "type": "logloss", "inputs": ["logit"]}]


def start(args, cfg_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "streamtrain", *args, str(cfg_path)], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def served_port(proc, deadline_s=30.0):
    deadline = time.monotonic() + deadline_s
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        m = re.search(r"serving predictions on http://127\.0\.0\.1:(\d+)/", line)
        if m:
            return int(m.group(1))
    raise AssertionError("serve did not start:\n" + "".join(seen[-20:]))


def test_served_predictions_follow_a_label_flip(tmp_path, redis_url, redis_namespace):
    flag = tmp_path / "flip"
    cfg = {"name": redis_namespace, "batch_size": 64, "layers": LAYERS,
           "default_optimizer": {"type": "adagrad", "lr": 0.3},
           "reader": {"type": "plugin", "factory": "tests.test_serve_freshness:flip_reader",
                      "args": {"flag": str(flag)}},
           "store": {"backend": "redis", "urls": [redis_url]},          # write-back on its default
           "metrics": {"enabled": False}, "drift": {"enabled": False},
           "serve": {"port": 0, "max_staleness_s": STALENESS}}
    path = tmp_path / "job.json"
    path.write_text(json.dumps(cfg))
    trainer = start(["run"], path)
    server = start(["serve"], path)
    truth_store = make_store({**cfg["store"], "namespace": redis_namespace, "write_back_s": 0})   # reads Redis
    try:
        port = served_port(server)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            def served():
                r = client.post("/v1/predict", json=QUERY)
                return (r.json()["predictions"][0], r.json()) if r.status_code == 200 else (None, r.json())

            deadline = time.monotonic() + 60        # 1: the trainer publishes and learns "x clicks"
            while (p := served()[0]) is None or p < 0.9:
                assert time.monotonic() < deadline and trainer.poll() is None, f"never learnt: {p}"
            # the server's copy of the tables is made before the flip, so the flip is served from
            # it (a loaded machine can take seconds to make it)
            deadline = time.monotonic() + 60
            while client.get("/v1/model").json().get("replica", {}).get("bootstraps", 0) < 1:
                assert time.monotonic() < deadline, "the server never made its copy of the tables"
                time.sleep(0.05)
            schema = Schema(("k",), ())
            graph = Graph.from_config(LAYERS, schema)
            truth_store.declare(graph.params, cfg["default_optimizer"])
            truth = Evaluator(graph, truth_store)
            batch = records_batch(QUERY, schema, 1)

            flag.touch()                             # 2: the labels flip now
            deadline = time.monotonic() + 60
            while truth.forward(batch)[0] >= 0.5:    # the store (read directly) has the flipped update
                assert time.monotonic() < deadline, "the trainer did not learn the flip"
            applied = time.monotonic()
            ages, lag = [], None
            while lag is None:                       # 3: the served prediction follows
                t0 = time.monotonic()
                p, body = served()
                ages.append(body["max_param_age_s"])
                if p is not None and p < 0.5:
                    lag = time.monotonic() - applied
                assert time.monotonic() - applied < STALENESS + 5, "served predictions never followed"
            request_s = time.monotonic() - t0
            assert lag <= STALENESS + request_s + 0.25, (lag, request_s)
            assert max(ages) <= STALENESS + 0.25, ages
            print(f"freshness: served after {lag:.3f}s (bound {STALENESS}s + one request {request_s:.3f}s); "
                  f"max_param_age_s p99 {np.percentile(ages, 99):.3f}")
            assert body["step"] > 0
            replica = client.get("/v1/model").json()["replica"]      # answered from the feed's copy
            assert replica["bootstraps"] >= 1 and replica["entries"] > 0, replica
    finally:
        stop(server)
        stop(trainer)
        truth_store.close()
    assert server.returncode == 0, server.stderr.read()[-2000:]      # SIGTERM: a graceful stop
    assert trainer.returncode == 0
