"""Redis store throughput against raw redis-py MGET/MSET on the same server, in one run.

    python bench/bench_redis_store.py [--url redis://127.0.0.1:PORT] [--dims 8 16] [--rows 10000]

Without --url an embedded redis-server is started on a free port. Every figure is rows/s,
the median of ``--repeat`` timed rounds. ``pull``: rows that exist (the steady state);
``push``: a push with no pull before it (read + numpy rule + compare-and-set script);
``push*``: the push of a training step, which reuses the values its pull read (only the rule
and the CAS script); ``step``: pull + push.
Targets (issue 3): pull >= 0.6x raw MGET, push >= 0.3x raw MSET.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import redis

from streamtrain.context import Gradients
from streamtrain.params import ParamSpec
from streamtrain.store.redis_server import RedisServer
from streamtrain.store.redis_store import RedisStore


def timed(fn, repeat: int) -> float:
    fn()                                    # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_dim(url: str, dim: int, n: int, repeat: int, optimizer: str) -> dict:
    client = redis.Redis.from_url(url)
    client.flushall()
    rng = np.random.default_rng(dim)
    rows = rng.standard_normal((n, dim)).astype(np.float32)
    keys = [f"raw:{dim}:{i:016x}".encode() for i in range(n)]
    values = rows.view(f"V{4 * dim}").reshape(-1).tolist()
    mapping = dict(zip(keys, values))
    t_mset = timed(lambda: client.mset(mapping), repeat)
    t_mget = timed(lambda: client.mget(keys), repeat)

    store = RedisStore({"urls": [url], "namespace": f"bench{dim}"})
    store.declare({"t": ParamSpec("t", (dim,), table=True)}, {"type": optimizer})
    ids = np.unique(rng.integers(0, 2**63, n * 2, dtype=np.uint64))[:n]
    grads = Gradients(tables={"t": (ids, rng.standard_normal((n, dim)).astype(np.float32) * 0.01)})
    store.pull([], {"t": ids})                     # creates the rows
    t_pull = timed(lambda: store.pull([], {"t": ids}), repeat)
    store._cache.clear()
    t_push = timed(lambda: store.push(grads), repeat)

    warm = []

    def step():
        store.pull([], {"t": ids})
        t0 = time.perf_counter()
        store.push(grads)
        warm.append(time.perf_counter() - t0)
    t_step = timed(step, repeat)
    t_warm = statistics.median(warm[1:])
    store.close()
    client.close()
    return {"dim": dim, "mget": n / t_mget, "mset": n / t_mset, "pull": n / t_pull, "push": n / t_push,
            "step": n / t_step, "warm": n / t_warm}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url")
    ap.add_argument("--dims", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--optimizer", default="adagrad")
    args = ap.parse_args(argv)
    server = None
    url = args.url
    if not url:
        server = RedisServer().start()
        url = server.url
    try:
        info = redis.Redis.from_url(url).info("server")
        print(f"redis-server {info['redis_version']} at {url}; redis-py {redis.__version__}; "
              f"python {platform.python_version()}; {args.rows} rows per call; optimizer {args.optimizer}")
        print(f"{'dim':>4} {'MGET/s':>10} {'MSET/s':>10} {'pull/s':>10} {'push/s':>10} {'push*/s':>10}"
              f" {'step/s':>10} {'pull/MGET':>10} {'push/MSET':>10} {'push*/MSET':>11}")
        for dim in args.dims:
            r = bench_dim(url, dim, args.rows, args.repeat, args.optimizer)
            print(f"{dim:>4} {r['mget']:>10,.0f} {r['mset']:>10,.0f} {r['pull']:>10,.0f} {r['push']:>10,.0f}"
                  f" {r['warm']:>10,.0f} {r['step']:>10,.0f} {r['pull'] / r['mget']:>10.2f}"
                  f" {r['push'] / r['mset']:>10.2f} {r['warm'] / r['mset']:>11.2f}")
        print("push: read + numpy rule + CAS script (no pull before it); push*: the push of a training "
              "step, reusing the rows its pull read; step: pull + push")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
