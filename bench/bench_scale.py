"""Scaling out, measured, and the sizing it implies.

    python bench/bench_scale.py [--models lr,fm,deepfm,wide_deep,dcn,nfm,pnn] [--scan lr,deepfm]
                                [--examples 20000] [--trainers 1,2,3] [--json FILE]

Every trainer is a real ``streamtrain run examples/<model>.json`` process on a synthetic
Criteo-shaped stream (26 categorical fields of 100k Zipf(1.1) values, 13 numeric; its own
seed per trainer), parameters in Redis, async mode; it stops after ``--examples``. Its rate
is the median of its once-a-second progress lines after the first (the steady state: start-up
and the model build left out); the summary's ``examples_per_s`` (from the job's start) is kept too.

1. **Traffic per example** (every ``--models`` model, one trainer, one redis-server, a warm
   namespace): Redis commands, bytes in and out, and Redis CPU seconds per example, from
   ``INFO`` before and after the run.
2. **Throughput** (the ``--scan`` models): 1, 2, 3 trainers started together against one
   redis-server and against a 3-node Redis Cluster (all local); the aggregate is the sum of the
   trainers' steady rates (and, kept in the JSON, all examples over the slowest one's time).
3. **Sizing**: trainers = stream / (examples/s of one trainer); Redis nodes = stream x Redis
   CPU per example / 0.5 (a node is single-threaded: plan it half busy); Kafka partitions >=
   trainers. Printed as a Markdown table per model.

On a shared machine the figures move with the other load: run it on a quiet one for the record.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import redis

from streamtrain.store.redis_server import RedisServer, free_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/redis_cluster.py: test-only code
from tests.redis_cluster import cluster_args, create_cluster  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
READER = {"type": "synthetic", "fields": 26, "cardinality": 100_000, "zipf": 1.1, "dense": 13}
STREAMS = (100_000, 1_000_000, 10_000_000)
REDIS_BUSY = 0.5                 # plan each Redis node (one core) at half its capacity


def trainer(model: str, store: dict, seed: int, examples: int, workdir: Path) -> tuple[subprocess.Popen, Path]:
    summary = workdir / f"{uuid.uuid4().hex[:8]}.json"
    args = [sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / f"{model}.json"),
            "--set", "reader=" + json.dumps({**READER, "seed": seed}), "--set", "store=" + json.dumps(store),
            "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null", "--set", "log.every_seconds=1",
            "--log-format", "text", "--max-examples", str(examples), "--summary", str(summary)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), summary


def steady_rate(log: str, summary: dict) -> float:
    """Median ex/s of the progress lines after the first; the summary's rate if too few."""
    rates = [float(r) for r in re.findall(r"\bex/s=(\d+)", log)][1:]
    return statistics.median(rates) if len(rates) >= 2 else summary["examples_per_s"]


def run_trainers(model, store, n, examples, workdir, seed0=1) -> list[dict]:
    procs = [trainer(model, store, seed0 + i, examples, workdir) for i in range(n)]
    out = []
    for proc, summary in procs:
        _, err = proc.communicate(timeout=900)
        if proc.returncode != 0:
            raise RuntimeError(f"{model}: trainer exited {proc.returncode}: {err.decode()[-1500:]}")
        s = json.loads(summary.read_text())
        out.append({**s, "steady_per_s": steady_rate(err.decode(errors="replace"), s)})
    return out


def server_counters(clients) -> dict:
    total = {"commands": 0, "bytes_in": 0, "bytes_out": 0, "cpu_s": 0.0}
    for c in clients:
        info = c.info()
        total["commands"] += info["total_commands_processed"]
        total["bytes_in"] += info["total_net_input_bytes"]
        total["bytes_out"] += info["total_net_output_bytes"]
        total["cpu_s"] += info["used_cpu_user"] + info["used_cpu_sys"]
    return total


def traffic(model, url, examples, workdir) -> dict:
    """Per example, one trainer, a namespace warmed by a first run."""
    store = {"backend": "redis", "urls": [url], "namespace": "traffic-" + model}
    run_trainers(model, store, 1, examples // 2, workdir, seed0=100)
    client = redis.Redis.from_url(url)
    before = server_counters([client])
    (summary,) = run_trainers(model, store, 1, examples, workdir)
    after = server_counters([client])
    n = summary["examples"]
    return {"examples_per_s": summary["steady_per_s"], "from_start_per_s": summary["examples_per_s"],
            **{f"{k}_per_example": (after[k] - before[k]) / n for k in before}}


def throughput(model, where, store, counts, examples, workdir, clients) -> dict:
    out = {}
    for k in counts:
        before = server_counters(clients)
        summaries = run_trainers(model, {**store, "namespace": f"scan-{model}-{where}-{k}-{uuid.uuid4().hex[:6]}"},
                                 k, examples, workdir)
        after = server_counters(clients)
        total = sum(s["examples"] for s in summaries)
        slowest = max(s["examples"] / s["examples_per_s"] for s in summaries)
        out[k] = {"aggregate_per_s": round(sum(s["steady_per_s"] for s in summaries)),
                  "aggregate_from_start_per_s": round(total / slowest),
                  "per_trainer_per_s": [round(s["steady_per_s"]) for s in summaries],
                  "redis_cpu_s_per_example": (after["cpu_s"] - before["cpu_s"]) / total}
    return out


def sizing(per_trainer: float, redis_cpu_per_example: float, bytes_per_example: float) -> list[dict]:
    rows = []
    for rate in STREAMS:
        rows.append({"stream_per_s": rate, "trainers": math.ceil(rate / per_trainer),
                     "redis_nodes": max(1, math.ceil(rate * redis_cpu_per_example / REDIS_BUSY)),
                     "network_MB_per_s": round(rate * bytes_per_example / 1e6)})
    return rows


def start_cluster(workdir: Path) -> tuple[list[RedisServer], list[str]]:
    servers, addrs = [], []
    for _ in range(3):
        port = free_port(below=55536)
        d = tempfile.mkdtemp(dir=workdir)
        servers.append(RedisServer(port, extra=cluster_args(port), workdir=d).start())
        addrs.append(f"127.0.0.1:{port}")
    create_cluster(addrs)
    return servers, addrs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="lr,fm,deepfm,wide_deep,dcn,nfm,pnn")
    p.add_argument("--scan", default="lr,deepfm", help="models whose 1..3-trainer throughput is measured")
    p.add_argument("--examples", type=int, default=20_000, help="examples per trainer and run")
    p.add_argument("--trainers", default="1,2,3")
    p.add_argument("--json", help="also write every figure to this file")
    args = p.parse_args(argv)
    counts = [int(k) for k in args.trainers.split(",")]
    workdir = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    single = RedisServer(workdir=tempfile.mkdtemp(dir=workdir)).start()
    cluster, addrs = start_cluster(workdir)
    result = {"machine": {"cpus": os.cpu_count(), "load_1m": os.getloadavg()[0]},
              "examples_per_trainer": args.examples, "traffic": {}, "throughput": {}, "sizing": {}}
    try:
        for model in args.models.split(","):
            t = result["traffic"][model] = traffic(model, single.url, args.examples, workdir)
            print(f"{model:10s} 1 trainer {t['examples_per_s']:>8.0f} ex/s ({t['from_start_per_s']:.0f} from the "
                  f"start) | per example: "
                  f"{t['commands_per_example']:.3f} commands, {t['bytes_in_per_example']:.0f} B in, "
                  f"{t['bytes_out_per_example']:.0f} B out, {t['cpu_s_per_example'] * 1e6:.1f} µs Redis CPU",
                  flush=True)
        cluster_clients = [redis.Redis(host=a.rsplit(":", 1)[0], port=int(a.rsplit(":", 1)[1])) for a in addrs]
        for model in args.scan.split(","):
            result["throughput"][model] = {
                "redis x1": throughput(model, "x1", {"backend": "redis", "urls": [single.url]}, counts,
                                       args.examples, workdir, [redis.Redis.from_url(single.url)]),
                "cluster x3": throughput(model, "cluster", {"backend": "redis", "cluster": f"redis://{addrs[0]}"},
                                         counts, args.examples, workdir, cluster_clients)}
            for where, by_k in result["throughput"][model].items():
                print(f"{model:10s} {where:10s} " + "  ".join(
                    f"{k} trainer(s): {v['aggregate_per_s']:>7d} ex/s {v['per_trainer_per_s']}" for k, v in by_k.items()),
                    flush=True)
        for model, t in result["traffic"].items():
            result["sizing"][model] = sizing(t["examples_per_s"], t["cpu_s_per_example"],
                                             t["bytes_in_per_example"] + t["bytes_out_per_example"])
        print("\n| model | stream (ex/s) | trainers (1 core each) | Redis nodes | Redis traffic (MB/s) |\n|---|---|---|---|---|")
        for model, rows in result["sizing"].items():
            for r in rows:
                print(f"| {model} | {r['stream_per_s']:,} | {r['trainers']:,} | {r['redis_nodes']:,} | "
                      f"{r['network_MB_per_s']:,} |")
    finally:
        for s in [single, *cluster]:
            s.stop()
    result["machine"]["load_1m_end"] = os.getloadavg()[0]
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
