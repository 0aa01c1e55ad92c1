"""Serving a graph model: latency and throughput of ``graphsage_rec`` (fanouts [30, 10]) alone.

    STREAMTRAIN_DATA=../shared/data python bench/bench_serve_graph.py [--source checkpoint|redis]
        [--seconds 15] [--rate 200] [--batch 256] [--clients 2] [--train-rows 90000]

Trains examples/graphsage_rec.json on the first ``--train-rows`` rows of the MovieLens-100K
stream (``streamtrain run``, to its end), then starts one ``streamtrain serve`` process on
loopback and no trainer beside it (the issue's "server alone"):

* ``checkpoint`` (default): ``serve --restore`` the run's final checkpoint (parameters and graph
  in the server's memory);
* ``redis``: the run trained into a redis-server on a free port (parameters and graph store),
  and ``serve`` reads both from there (``serve.schema`` given; the replica of the tables on).

Requests are user/item records of the held-out rest of the stream (their own edges are never in
the graph): single records, open loop at ``--rate`` requests/s (client-side latency p50 / p99,
the server's CPU per request), then batches of ``--batch`` records from ``--clients``
closed-loop clients (records/s). Targets (issue 26): single p50 <= 5 ms, p99 <= 20 ms;
batched >= 5k records/s. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_serve import _transport, cpu_seconds, ms, start, wait_port  # noqa: E402
from streams import movielens_csv  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def split_stream(path: Path, train_rows: int, tmp: Path) -> tuple[Path, list[dict]]:
    """The first ``train_rows`` rows as a CSV to train on; the rest as request records."""
    with open(path, newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    train = tmp / "train.csv"
    with open(train, "w", newline="") as fh:
        csv.writer(fh).writerows([header, *body[:train_rows]])
    records = [{k: (v.split("|") if k == "genres" else v) for k, v in zip(header, row) if k != "label"}
               for row in body[train_rows:]]
    return train, records


def open_loop(base, rate, seconds, bodies):
    lat, errors = [], {}
    with httpx.Client(base_url=base, timeout=5, transport=_transport()) as c:
        t0 = time.perf_counter()
        for i in range(int(rate * seconds)):
            due = t0 + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            r = c.post("/v1/predict", content=bodies[i % len(bodies)], headers={"content-type": "application/json"})
            lat.append(time.perf_counter() - max(due, now))
            if r.status_code != 200:
                kind = r.json().get("error", str(r.status_code))
                errors[kind] = errors.get(kind, 0) + 1
    return np.array(lat), errors


def closed_loop(base, bodies, batch, clients, seconds):
    import threading
    counts = [0] * clients
    stop = time.perf_counter() + seconds

    def run(k):
        with httpx.Client(base_url=base, timeout=30, transport=_transport()) as c:
            i = k
            while time.perf_counter() < stop:
                r = c.post("/v1/predict", content=bodies[i % len(bodies)], headers={"content-type": "application/json"})
                counts[k] += batch if r.status_code == 200 else 0
                i += clients

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--source", choices=("checkpoint", "redis"), default="checkpoint")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--train-rows", type=int, default=90_000)
    return ap.parse_args()


def job_config(args, train: Path, tmp: Path, redis_url: str | None) -> dict:
    """examples/graphsage_rec.json on the training part; its stores on ``redis_url`` when given."""
    cfg = json.loads((ROOT / "examples" / "graphsage_rec.json").read_text())
    cfg["reader"]["path"] = str(train)
    cfg.update(name="bench-graph", metrics={"enabled": False}, log={"every_seconds": 30},
               checkpoint={"dir": str(tmp / "ckpt")}, serve={"port": 0, "max_records": 1024})
    if redis_url is not None:
        cfg["store"] = {"backend": "redis", "urls": [redis_url], "write_back_s": 0}
        cfg["graph"]["store"] = {"backend": "redis", "url": redis_url, "neighbours": 128}
    return cfg


def train_job(args, cfg: dict, tmp: Path) -> dict:
    """Run the training job to its end; its summary. For the Redis source the job file gets the
    checkpoint's schema (the server reads the model from Redis, its schema from the job)."""
    t0 = time.monotonic()
    trainer = start(["run", "--summary", str(tmp / "summary.json")], tmp / "job.json", tmp / "trainer.log")
    if trainer.wait() != 0:
        raise SystemExit("training failed:\n" + (tmp / "trainer.log").read_text()[-2000:])
    trained = json.loads((tmp / "summary.json").read_text())
    print(f"trained {trained['examples']} examples in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    if args.source == "redis":
        ckpt_meta = json.loads(next((tmp / "ckpt").glob("ckpt-*/meta.json")).read_text())
        cfg["serve"]["schema"] = ckpt_meta["schema"]
        (tmp / "job.json").write_text(json.dumps(cfg))
    return trained


def load_phases(base: str, args, records: list, server_pid: int) -> dict:
    """The single-record open loop, then the batched closed loop: the raw readings."""
    singles = [json.dumps({"records": [r]}).encode() for r in records[:2048]]
    batches = [json.dumps({"records": records[i:i + args.batch]}).encode()
               for i in range(0, len(records) - args.batch, args.batch)][:32]
    closed_loop(base, batches, args.batch, 1, 2.0)                 # warm up (caches, first compiles)
    gc.collect()
    gc.freeze()
    c0 = cpu_seconds(server_pid)
    lat, errors = open_loop(base, args.rate, args.seconds, singles)
    c1 = cpu_seconds(server_pid)
    rps = closed_loop(base, batches, args.batch, args.clients, args.seconds)
    c2 = cpu_seconds(server_pid)
    return {"lat": lat, "errors": errors, "rps": rps, "cpu": (c0, c1, c2),
            "model": httpx.get(base + "/v1/model").json()}


def main() -> None:
    args = parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-graph-"))
    train, records = split_stream(movielens_csv(), args.train_rows, tmp)
    redis_server = None
    if args.source == "redis":
        from streamtrain.store.redis_server import RedisServer
        redis_server = RedisServer().start()
    cfg = job_config(args, train, tmp, redis_server.url if redis_server is not None else None)
    (tmp / "job.json").write_text(json.dumps(cfg))
    server = None
    try:
        trained = train_job(args, cfg, tmp)
        serve_args = ["serve"] + (["--restore", str(tmp / "ckpt")] if args.source == "checkpoint" else [])
        server = start(serve_args, tmp / "job.json", tmp / "serve.log")
        run = load_phases(f"http://127.0.0.1:{wait_port(tmp / 'serve.log', server)}", args, records, server.pid)
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
        if redis_server is not None:
            redis_server.stop()
    lat, (c0, c1, c2), rps = run["lat"], run["cpu"], run["rps"]
    print(json.dumps({
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, {platform.python_implementation()} {platform.python_version()}",
        "load": os.getloadavg(), "source": args.source, "model": "graphsage_rec", "fanouts": cfg["graph"]["fanouts"],
        "trained_examples": trained["examples"], "trained_graph": trained.get("graph"), "served_step": run["model"]["step"],
        "single": {"rate": args.rate, "requests": len(lat), "errors": run["errors"], "p50_ms": ms(lat, 50),
                   "p99_ms": ms(lat, 99), "server_cpu_ms_per_request": round(1000 * (c1 - c0) / max(len(lat), 1), 3)},
        "batched": {"batch": args.batch, "clients": args.clients, "records_per_s": round(rps),
                    "server_cpu_records_per_s": round(rps * args.seconds / max(c2 - c1, 1e-9))},
    }, indent=2))

if __name__ == "__main__":
    main()
