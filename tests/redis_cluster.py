"""A local Redis Cluster for tests (``fixtures_redis.redis_cluster_url``) and ``bench/bench_scale.py``:
test-only code, so not in the package (the daemon never starts a cluster; it starts at most one
private ``redis-server``, ``streamtrain.store.redis_server``). Nodes are ``RedisServer``s started
with ``cluster_args(port)`` on ports from ``free_port(below=55536)`` (the bus port is +10000)."""
from __future__ import annotations

import shutil
import subprocess
import time

import redis

from streamtrain.errors import StoreError


def cluster_args(port: int) -> tuple:
    """The ``extra`` arguments of a Cluster node (its nodes file in the server's own dir)."""
    return ("--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf")


def create_cluster(addrs: list[str], wait_s: float = 30.0) -> None:
    """Join fresh Cluster nodes (``host:port``) into one cluster, no replicas, slots split
    evenly (``redis-cli --cluster create``), and wait until every node reports
    ``cluster_state:ok`` (each node learns it on its own: one still converging answers
    CLUSTERDOWN)."""
    cli = shutil.which("redis-cli")
    if cli is None:
        raise StoreError("creating a Redis Cluster needs redis-cli on PATH (apt install redis-tools)")
    out = subprocess.run([cli, "--cluster", "create", *addrs, "--cluster-replicas", "0", "--cluster-yes"],
                         capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise StoreError(f"redis-cli --cluster create {' '.join(addrs)} failed: {out.stdout[-400:]}{out.stderr[-400:]}")
    deadline = time.monotonic() + wait_s
    for addr in addrs:
        host, port = addr.rsplit(":", 1)
        client = redis.Redis(host=host, port=int(port))
        try:
            while client.cluster("info").get("cluster_state") != "ok":
                if time.monotonic() > deadline:
                    raise StoreError(f"cluster node {addr} did not reach cluster_state ok within {wait_s} s")
                time.sleep(0.05)
        finally:
            client.close()
