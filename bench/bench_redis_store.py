"""Redis store throughput against raw redis-py MGET/MSET on the same server, in one run.

    python bench/bench_redis_store.py [--url redis://127.0.0.1:PORT] [--dims 8 16] [--rows 10000]

Without --url an embedded redis-server is started on a free port. Every figure is rows/s,
the median of ``--repeat`` timed rounds. ``pull``: rows that exist (the steady state);
``push``: a push with no pull before it (read + numpy rule + compare-and-set script);
``push*``: the push of a training step, which reuses the values its pull read (only the rule
and the CAS script); ``step``: pull + push.
Targets (issue 3): pull >= 0.6x raw MGET, push >= 0.3x raw MSET.

    python bench/bench_redis_store.py --server-cpu [--chunks 125 250 500 1000 2000] [--feed-ms 0 2000]

(issue 11) redis-server CPU seconds per id of the compare-and-set script, read from
``/proc/<pid>/stat`` of the embedded server (so other load on the machine inflates it less
than wall time would), for a DeepFM-like push: every id updates a wide row (FTRL, dim 1:
20 bytes) and an embedding row (Adagrad, dim 8: 72 bytes), as two keys per id (the store's
layout) or as one packed key of 84 bytes per id (a layout the store does not have), per chunk
size (rows per script call; ``redis_scripts.MAX_ROWS``) and, with ``--feed-ms``, with and
without the change feed the script appends to (``store.feed_s``). Blocks of pushes are
interleaved over the variants, median reported.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import redis

from streamtrain.context import Gradients
from streamtrain.params import ParamSpec
from streamtrain.store import redis_keys, redis_scripts
from streamtrain.store.redis_server import RedisServer
from streamtrain.store.redis_store import RedisStore

sys.path.insert(0, str(Path(__file__).resolve().parent))
import report  # noqa: E402


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

    # write through (write_back_s 0): with the write-back default a pull after the first is
    # answered from the trainer's local copy and a push touches no Redis, which times nothing here
    store = RedisStore({"urls": [url], "namespace": f"bench{dim}", "write_back_s": 0})
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


def server_cpu(server: RedisServer, chunks: list[int], rounds: int, ids_total: int = 37_000,
               per_push: int = 1000, block: int = 20, feeds=(0,)) -> dict:
    """Median redis-server CPU µs per id of the CAS script, per (layout, chunk size, change
    feed retention in ms: 0 = no feed)."""
    client = redis.Redis.from_url(server.url)
    tick = os.sysconf("SC_CLK_TCK")

    def cpu_s() -> float:
        fields = open(f"/proc/{server.proc.pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 2**63, ids_total, dtype=np.uint64)
    tables = {"wide": 20, "emb": 72, "packed": 84}
    keys = {t: np.array(redis_keys.row_keys("bench", t, ids, 1).tolist(), object) for t in tables}

    def values(n: int, length: int) -> np.ndarray:
        v = rng.integers(0, 256, (n, length), dtype=np.uint8)
        v[:, :8] = rng.integers(1, 2**63, n, dtype=np.uint64).astype("<u8").view(np.uint8).reshape(n, 8)
        return v
    current = {t: values(ids_total, n) for t, n in tables.items()}
    for t in tables:
        client.mset(dict(zip(keys[t].tolist(), (bytes(v) for v in current[t]))))
    sha = client.script_load(redis_scripts.CAS)
    layouts = {"2 keys per id": ["wide", "emb"], "1 packed key per id": ["packed"]}
    got = {(lay, c, f): [] for lay in layouts for c in chunks for f in feeds}
    calls = 0
    for _ in range(rounds):
        for lay, chunk, feed_ms in got:
            t0 = cpu_s()
            for _ in range(block):
                sel = rng.choice(ids_total, per_push, replace=False)
                new = {t: values(per_push, tables[t]) for t in layouts[lay]}
                # rows in table order, cut into chunks: one segment per table in a chunk (as RowIO.cas)
                order = [(t, i) for t in layouts[lay] for i in range(per_push)]
                pipe = client.pipeline(transaction=False)
                for start in range(0, len(order), chunk):
                    part = order[start:start + chunk]
                    ks, argv, segments = [], [], 0
                    for t in layouts[lay]:
                        rows = np.array([i for tt, i in part if tt == t], np.int64)
                        if len(rows):
                            ks += keys[t][sel[rows]].tolist()
                            argv += [len(rows), tables[t], 0, current[t][sel[rows], :8].tobytes(),
                                     new[t][rows].tobytes(), t if feed_ms else b"",
                                     ids[sel[rows]].astype("<u8").tobytes() if feed_ms else b""]
                            segments += 1
                    calls += 1
                    pipe.evalsha(sha, len(ks) + 2, f"st:{{bench/0}}:receipt:{calls}", "st:{bench/0}:feed", *ks,
                                 600_000, segments, feed_ms, *argv)
                if any(a != b"ok:" for a in pipe.execute()):
                    raise RuntimeError("a compare-and-set failed: nobody else writes these keys")
                for t in layouts[lay]:
                    current[t][sel] = new[t]
            got[(lay, chunk, feed_ms)].append((cpu_s() - t0) / (block * per_push) * 1e6)
    client.close()
    return {k: statistics.median(v) for k, v in got.items()}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url")
    ap.add_argument("--dims", type=int, nargs="+", default=[8, 16])
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--optimizer", default="adagrad")
    ap.add_argument("--json", metavar="FILE", help="also write the rows/s of every dim, with the run's provenance, to FILE")
    ap.add_argument("--server-cpu", action="store_true", help="issue 11: redis-server CPU per id of the CAS script")
    ap.add_argument("--chunks", type=int, nargs="+", default=[125, 250, 500, 1000, 2000])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--feed-ms", type=int, nargs="+", default=[0],
                    help="--server-cpu: change feed retentions to compare (0 = no feed; store.feed_s x 1000)")
    args = ap.parse_args(argv)
    if args.server_cpu:
        with RedisServer() as server:
            info = redis.Redis.from_url(server.url).info("server")
            print(f"redis-server {info['redis_version']}; {args.rounds} rounds of 20 pushes of 1000 ids; "
                  "redis-server CPU µs per id (median)")
            print("| layout | feed | " + " | ".join(f"chunk {c}" for c in args.chunks) + " |")
            print("|---|---|" + "---:|" * len(args.chunks))
            got = server_cpu(server, args.chunks, args.rounds, feeds=args.feed_ms)
            for lay in ("2 keys per id", "1 packed key per id"):
                for f in args.feed_ms:
                    print(f"| {lay} | {f / 1000:g} s | " + " | ".join(f"{got[(lay, c, f)]:.2f}" for c in args.chunks) + " |")
        return
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
        dims = {}
        for dim in args.dims:
            r = dims[dim] = bench_dim(url, dim, args.rows, args.repeat, args.optimizer)
            print(f"{dim:>4} {r['mget']:>10,.0f} {r['mset']:>10,.0f} {r['pull']:>10,.0f} {r['push']:>10,.0f}"
                  f" {r['warm']:>10,.0f} {r['step']:>10,.0f} {r['pull'] / r['mget']:>10.2f}"
                  f" {r['push'] / r['mset']:>10.2f} {r['warm'] / r['mset']:>11.2f}")
        print("push: read + numpy rule + CAS script (no pull before it); push*: the push of a training "
              "step, reusing the rows its pull read; step: pull + push")
        if args.json:
            report.write(args.json, {**report.meta("bench/bench_redis_store.py", argv),
                                     "redis_server": info["redis_version"], "rows": args.rows,
                                     "optimizer": args.optimizer, "repeat": args.repeat,
                                     "dims": {str(d): r for d, r in dims.items()}})
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
