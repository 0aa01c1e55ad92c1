"""Serving while it learns: latency, throughput and freshness of ``streamtrain serve``.

    python bench/bench_serve.py [--seconds 15] [--rate 200] [--batch 256] [--clients 2] [--no-trainer] [--trainer-nice N]

Starts, on loopback only: a redis-server on a free port, a ``streamtrain run`` trainer
(examples/deepfm.json on the synthetic stream, Criteo-like width: 26 categorical fields of
10k values, 13 numeric, training at full speed into the Redis store) and a ``streamtrain serve``
process on the same config (``serve.max_staleness_s`` 1 s). Then, while the trainer trains:

* single-record requests, open loop at ``--rate`` requests/s: client-side latency p50 / p99,
  over all requests and split into each of the 512 bodies' first send (its rarer ids are not
  in the server's row cache yet: the request waits for Redis) and the repeats (cycled every
  512 / rate s), with the row cache's hit ratio over the phase;
* batched requests of ``--batch`` records from ``--clients`` closed-loop clients: records/s;
* the ``max_param_age_s`` every answer reports (age of the oldest parameter it used): p50 / p99;
* the serve process's own CPU time per request and per record (``/proc``): on a machine other
  processes load, the capacity of one serve process when it has a core to itself.

Targets (issue 13): single-record p50 <= 2 ms and p99 <= 10 ms at 200 requests/s; batched
(256 records) >= 20k records/s from one serve process. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import socket

import httpx
import numpy as np

from streamtrain.store.redis_server import RedisServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIELDS, DENSE, CARD = 26, 13, 10_000


def records(rng, n):
    vals = np.minimum(rng.zipf(1.2, size=(n, FIELDS)) - 1, CARD - 1)
    dense = rng.standard_normal((n, DENSE)).round(3)
    return [{**{f"f{i}": int(v[i]) for i in range(FIELDS)}, **{f"d{j}": float(d[j]) for j in range(DENSE)}}
            for v, d in zip(vals, dense)]


def start(args, cfg_path, log_path, nice=0):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "streamtrain", *args, str(cfg_path)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=open(log_path, "w"),
                            preexec_fn=(lambda: os.nice(nice)) if nice else None)


def wait_port(log_path, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"serving predictions on http://127\.0\.0\.1:(\d+)/", Path(log_path).read_text())
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit("serve did not start:\n" + Path(log_path).read_text()[-2000:])


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``): what a request costs
    the server, whatever else runs on the machine."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _transport() -> httpx.HTTPTransport:
    """Requests go out at once (TCP_NODELAY), as any latency-minded client sends them: without
    it the request's second segment waits for the server's delayed ACK (~40 ms on Linux)."""
    return httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])


def open_loop(base, rate, seconds, rng):
    """One request every 1/rate s on schedule; latency from the scheduled send time."""
    bodies = [json.dumps({"records": records(rng, 1)}).encode() for _ in range(512)]
    lat, first, ages, errors = [], [], [], {}
    with httpx.Client(base_url=base, timeout=5, transport=_transport()) as c:
        t0 = time.perf_counter()
        for i in range(int(rate * seconds)):
            due = t0 + i / rate
            now = time.perf_counter()
            if due > now:
                time.sleep(due - now)
            r = c.post("/v1/predict", content=bodies[i % len(bodies)],
                       headers={"content-type": "application/json"})
            lat.append(time.perf_counter() - max(due, now))
            first.append(i < len(bodies))
            if r.status_code == 200:
                ages.append(r.json()["max_param_age_s"])
            else:
                kind = r.json().get("error", str(r.status_code))
                errors[kind] = errors.get(kind, 0) + 1
    return np.array(lat), np.array(first), ages, errors


def cache_lookups(base) -> dict:
    """The server's row-cache counters (hits, misses) from its /metrics."""
    text = httpx.get(base + "/metrics").text
    return {k: float(re.search(rf'streamtrain_serve_cache_lookups_total{{result="{k}"}} (\S+)', text).group(1))
            for k in ("hit", "miss")}


def ms(a, q) -> float | None:
    return round(1000 * float(np.percentile(a, q)), 3) if len(a) else None


def split(lat) -> dict:
    return {"requests": len(lat), "p50_ms": ms(lat, 50), "p99_ms": ms(lat, 99)}


def closed_loop(base, batch, clients, seconds, rng):
    bodies = [json.dumps({"records": records(rng, batch)}).encode() for _ in range(16)]
    counts, ages = [0] * clients, []
    stop = time.perf_counter() + seconds

    def run(k):
        with httpx.Client(base_url=base, timeout=30, transport=_transport()) as c:
            i = 0
            while time.perf_counter() < stop:
                r = c.post("/v1/predict", content=bodies[i % len(bodies)], headers={"content-type": "application/json"})
                if r.status_code == 200:
                    counts[k] += batch
                    ages.append(r.json()["max_param_age_s"])
                i += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.perf_counter() - t0), ages


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--no-trainer", action="store_true", help="serve a store nobody writes to")
    ap.add_argument("--trainer-nice", type=int, default=0,
                    help="start the trainer at this nice value (default 0: the same priority as the server)")
    ap.add_argument("--json", metavar="FILE",
                    help="also write the figures, the run's provenance and every single-record latency to FILE")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                    help="a serve setting for the server, e.g. refresh_window_s=0 (repeatable)")
    return ap.parse_args()


def job_config(args, redis_url: str) -> dict:
    """examples/deepfm.json on the synthetic stream, its store the bench's redis-server, serving on."""
    cfg = json.loads((ROOT / "examples" / "deepfm.json").read_text())
    cfg.update(name="bench", reader={"type": "synthetic", "fields": FIELDS, "dense": DENSE, "cardinality": CARD, "seed": 1},
               store={"backend": "redis", "urls": [redis_url]}, metrics={"enabled": False},
               serve={"port": 0, "max_staleness_s": 1.0, "max_records": 1024,
                      **{k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}})
    return cfg


def wait_ready(base: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while httpx.get(base + "/readyz").status_code != 200:       # a trainer has published
        if time.monotonic() > deadline:
            raise SystemExit("not ready:\n" + log.read_text()[-2000:])
        time.sleep(0.2)


def load_phases(base: str, args, server_pid: int, rng) -> dict:
    """The single-record open loop, then the batched closed loop: the raw readings."""
    closed_loop(base, args.batch, 1, 2.0, rng)                      # warm the row cache
    # the load generator's own garbage collector: a full collection of its ~10^5 objects
    # (numpy, httpx, redis-py) stops it for tens of ms, and the requests due meanwhile
    # would count that as the server's latency
    gc.collect()
    gc.freeze()
    print(f"single-record phase, serve pid {server_pid}", file=sys.stderr, flush=True)
    c0, k0 = cpu_seconds(server_pid), cache_lookups(base)
    lat, first, ages1, errors = open_loop(base, args.rate, args.seconds, rng)
    c1, k1 = cpu_seconds(server_pid), cache_lookups(base)
    print("batched phase", file=sys.stderr, flush=True)
    rps, ages2 = closed_loop(base, args.batch, args.clients, args.seconds, rng)
    c2 = cpu_seconds(server_pid)
    return {"lat": lat, "first": first, "errors": errors, "rps": rps, "cpu": (c0, c1, c2), "cache": (k0, k1),
            "ages": np.array(ages1 + ages2), "model": httpx.get(base + "/v1/model").json()}


def serve_under_load(args, tmp: Path, rng) -> dict:
    """Trainer and server on a fresh redis-server, the load phases, every process stopped."""
    redis_server = RedisServer().start()
    (tmp / "job.json").write_text(json.dumps(job_config(args, redis_server.url)))
    procs = []
    try:
        trainer = start(["run", "--summary", str(tmp / "summary.json")], tmp / "job.json", tmp / "trainer.log",
                        nice=args.trainer_nice)
        procs.append(trainer)
        server = start(["serve"], tmp / "job.json", tmp / "serve.log")
        procs.append(server)
        base = f"http://127.0.0.1:{wait_port(tmp / 'serve.log', server)}"
        wait_ready(base, tmp / "serve.log")
        if args.no_trainer:
            trainer.send_signal(signal.SIGTERM)
            trainer.wait(60)
        return load_phases(base, args, server.pid, rng)
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        redis_server.stop()


def figures(args, run: dict, summary: dict) -> dict:
    lat, first, ages, model = run["lat"], run["first"], run["ages"], run["model"]
    (c0, c1, c2), (k0, k1) = run["cpu"], run["cache"]
    hits, lookups = k1["hit"] - k0["hit"], k1["hit"] + k1["miss"] - k0["hit"] - k0["miss"]
    return {
        "machine": f"{platform.machine()} {os.cpu_count()} cpu, {platform.python_implementation()} {platform.python_version()}",
        "load": os.getloadavg(),
        "model": "deepfm", "fields": FIELDS, "dense": DENSE, "trainer": not args.no_trainer,
        "trainer_nice": args.trainer_nice,
        "trainer_examples_per_s": summary.get("examples_per_s"), "served_step": model["step"],
        "single": {"rate": args.rate, "requests": len(lat), "errors": run["errors"],
                   "p50_ms": ms(lat, 50), "p99_ms": ms(lat, 99),
                   # each of the 512 bodies' first send (its rare ids not yet cached) and the repeats
                   "first_send": split(lat[first]), "repeat": split(lat[~first]),
                   "row_cache_hit_ratio": round(hits / max(1.0, lookups), 4),
                   "server_cpu_ms_per_request": round(1000 * (c1 - c0) / max(len(lat), 1), 3)},
        "batched": {"batch": args.batch, "clients": args.clients, "records_per_s": round(run["rps"]),
                    "server_cpu_records_per_s": round(run["rps"] * args.seconds / max(c2 - c1, 1e-9))},
        "replica": model.get("replica"),
        "param_age_s": {"p50": round(float(np.percentile(ages, 50)), 3), "p99": round(float(np.percentile(ages, 99)), 3),
                        "max_staleness_s": 1.0},
    }


def main() -> None:
    args = parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
    run = serve_under_load(args, tmp, np.random.default_rng(0))
    summary = json.loads((tmp / "summary.json").read_text()) if (tmp / "summary.json").exists() else {}
    result = figures(args, run, summary)
    print(json.dumps(result, indent=2))
    if args.json:
        report.write(args.json, {**report.meta("bench/bench_serve.py"), **result,
                                 "single_latency_ms": [round(1000 * float(v), 3) for v in run["lat"]]})

if __name__ == "__main__":
    main()
