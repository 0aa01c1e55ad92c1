"""CPU-seconds per million lines of Kafka → trainer, per thread and for the broker, for several
versions of streamtrain (each its own python) and consumer settings, interleaved.

    python bench/kafka_cpu.py --records 1000000 --rounds 3 --lpm 1 100 \\
        --variant base=/tmp/base-venv/bin/python --variant new=/work/wt/x/venv/bin/python \\
        [--variant 'wait500=/path/python:{"fetch_min_bytes": 1048576, "fetch_max_wait_ms": 500}'] [--file]

One Tansu broker is started and the Criteo sample produced once per ``--lpm`` (lines per
message) into a 4-partition topic. Each run is one child process (``--child``) training
``--model`` with the Kafka reader (``stop_at_end``) on a fresh group, under its variant's
python, from ``/tmp`` (so the python's own streamtrain is imported, not this tree's). The child
samples ``/proc/self/task/*/stat`` every 50 ms and names each thread (``threading``'s names:
``MainThread`` trains, ``streamtrain-kafka-consumer``, ``kafka-io-*``, the parse worker);
the parent reads the broker's ``/proc/PID/stat`` (CPU-s, of which system, and minor page faults) before
and after each run. Rounds interleave
variants (A B A B ...); the medians per variant and lines-per-message are printed, and every
run as a JSON line on stderr. ``--file`` adds the file reader on the same lines as a variant.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICK = os.sysconf("SC_CLK_TCK")
GROUPS = {"MainThread": "train", "streamtrain-kafka-consumer": "consumer"}


def _fields(stat_path: str) -> list[str]:
    with open(stat_path) as f:
        stat = f.read()
    return stat[stat.rindex(")") + 2:].split()


def _cpu(stat_path: str) -> float:
    fields = _fields(stat_path)
    return (int(fields[11]) + int(fields[12])) / TICK


def _broker(pid) -> tuple[float, float, int]:
    """The broker's (user CPU-s, system CPU-s, minor page faults) so far (zeros without one)."""
    if not pid:
        return 0.0, 0.0, 0
    fields = _fields(f"/proc/{pid}/stat")
    return int(fields[11]) / TICK, int(fields[12]) / TICK, int(fields[7])


def _group(name: str) -> str:
    if name in GROUPS:
        return GROUPS[name]
    if name.startswith("kafka-io"):
        return "io"
    if name == "streamtrain-buffered":
        return "file"
    return "parse" if "parse" in name or name.startswith("Thread-") else name


def child(args) -> None:
    """One training run; prints a JSON line of its figures."""
    import threading

    from streamtrain import startup
    startup.set_blas_variables()          # before numpy loads, as the command line does (else
                                          # OpenBLAS's second thread spins ~85 ms at import)
    from streamtrain import config as C
    from streamtrain.job import Job

    names, cpu, first, stop = {}, {}, {}, threading.Event()

    def read_all(into):
        for t in threading.enumerate():
            if t.native_id is not None:
                names[t.native_id] = t.name
        for tid in os.listdir("/proc/self/task"):
            try:
                into[int(tid)] = _cpu(f"/proc/self/task/{tid}/stat")
            except OSError:
                pass

    def sample():
        while True:
            read_all(cpu)
            if stop.wait(0.05):
                return

    def tick(j, b, r):
        if not ticks:                      # the steady window starts after the first batch
            read_all(first)
            first[0] = _cpu("/proc/self/stat")
        ticks.append((time.perf_counter(), b.size))

    sampler = threading.Thread(target=sample, name="sampler", daemon=True)
    if args.topic == "-":
        reader = {"type": "file", "path": args.bootstrap, "format": "criteo"}
    else:
        reader = {"type": "kafka", "bootstrap": args.bootstrap, "topic": args.topic, "group": args.group,
                  "format": "criteo", "stop_at_end": True,
                  "consumer": {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300,
                               "max_poll_interval_ms": 10000, **json.loads(args.consumer)}}
    model = json.loads(Path(args.model).read_text())
    keys = {k: model[k] for k in ("layers", "default_optimizer", "batch_size") if k in model}
    cfg = C.validate(C.merge(C.defaults(), {"reader": reader, **keys, "store": {"backend": "memory"},
                                          "metrics": {"enabled": False}, "checkpoint": {"dir": None}}))
    startup.apply()
    startup.for_job(cfg)
    sys.setswitchinterval(cfg.get("switch_interval_ms", 1.0) / 1000)
    sampler.start()
    job = Job(cfg)
    ticks = []
    job.hooks.append(tick)
    t0 = time.perf_counter()
    s = job.run()
    wall, proc = time.perf_counter() - t0, _cpu("/proc/self/stat") - first[0]
    stop.set()
    sampler.join()
    per = {}
    for tid, c in cpu.items():
        g = _group(names.get(tid, "?"))
        per[g] = per.get(g, 0.0) + c - first.get(tid, 0.0)
    steady = (sum(n for _, n in ticks[1:]) / max(ticks[-1][0] - ticks[0][0], 1e-9)) if len(ticks) > 1 else 0.0
    import streamtrain
    print(json.dumps({"examples": s["examples"], "steady": s["examples"] - ticks[0][1], "auc": s.get("auc"), "wall": wall, "process": proc,
                      "threads": per, "rate": steady, "module": streamtrain.__file__}))


def run_one(python, broker_pid, bootstrap, topic, group, consumer, args) -> dict:
    cmd = [python, str(Path(__file__).resolve()), "--child", "--bootstrap", bootstrap, "--topic", topic,
           "--group", group, "--consumer", consumer, "--model", str(ROOT / args.model)]
    b0 = _broker(broker_pid)
    out = subprocess.run(cmd, cwd="/tmp", capture_output=True, text=True)
    b1 = _broker(broker_pid)
    if out.returncode:
        raise RuntimeError(out.stderr[-3000:])
    fig = json.loads(out.stdout.strip().splitlines()[-1])
    fig["broker_user"], fig["broker_sys"], fig["broker_faults"] = (b - a for a, b in zip(b0, b1, strict=True))
    fig["broker"] = fig["broker_user"] + fig["broker_sys"]
    return fig


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap"), ap.add_argument("--topic"), ap.add_argument("--group")
    ap.add_argument("--consumer", default="{}")
    ap.add_argument("--model", default="examples/lr.json")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--lpm", type=int, nargs="+", default=[1, 100])
    ap.add_argument("--variant", action="append", default=[], help="NAME=PYTHON[:CONSUMER-JSON] (default: this python)")
    ap.add_argument("--file", action="store_true", help="also the file reader (the first variant's python)")
    ap.add_argument("--producer", action="append", default=[], metavar="NAME=JSON",
                    help="also a topic per lines-per-message written with these producer settings, e.g. "
                         "'lz4={\"compression_type\": \"lz4\"}' (default: streamtrain produce's own)")
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return 0
    sys.path.insert(0, str(ROOT))
    from bench.bench_kafka import lines
    from streamtrain.produce import produce
    from tests.kafka_broker import TansuBroker, create_topic

    variants = []
    for v in args.variant or [f"this={sys.executable}"]:     # none named: this python
        name, rest = v.split("=", 1)
        python, _, consumer = rest.partition(":")
        variants.append((name, python, consumer or "{}"))
    data = lines(args.records)
    tmp = Path(tempfile.mkdtemp(prefix="kafka-cpu-"))
    path = tmp / "criteo.tsv"
    path.write_bytes(b"\n".join(data) + b"\n")
    broker = TansuBroker().start()
    tag = f"{os.getpid()}"
    runs: dict[tuple, list] = {}
    try:
        topics = {}
        producers = [("", {})] + [(n, json.loads(js)) for n, _, js in (p.partition("=") for p in args.producer)]
        for k in args.lpm:
            for pname, settings in producers:
                topics[k, pname] = f"t{k}{pname}-{tag}"
                create_topic(broker.bootstrap, topics[k, pname], 4)
                b0 = _cpu(f"/proc/{broker.proc.pid}/stat")
                produce(data, broker.bootstrap, topics[k, pname], lines_per_message=k, producer_settings=settings)
                print(json.dumps({"produce": pname or "default", "lpm": k,
                                  "broker": round((_cpu(f"/proc/{broker.proc.pid}/stat") - b0) * 1e6 / len(data), 3)}),
                      file=sys.stderr, flush=True)
        del data
        for r in range(args.rounds):
            for (k, pname), topic in topics.items():
                for name, python, consumer in variants:
                    fig = run_one(python, broker.proc.pid, broker.bootstrap, topic, f"{name}{pname}-{k}-{r}-{tag}",
                                  consumer, args)
                    _record(runs, (name + (f"/{pname}" if pname else ""), k), fig, args.records, r,
                            os.getloadavg()[0])
            if args.file:
                fig = run_one(variants[0][1], None, str(path), "-", "-", "{}", args)
                _record(runs, ("file", 0), fig, args.records, r, os.getloadavg()[0])
    finally:
        broker.stop()
        path.unlink()
        tmp.rmdir()
    _summary(runs, args.records)
    return 0


def _record(runs, key, fig, records, r, load) -> None:
    """Per million lines of the steady window (the broker's: of the whole run)."""
    assert fig["examples"] == records, (key, fig["examples"])
    per = {g: c * 1e6 / fig["steady"] for g, c in fig["threads"].items()}
    row = {"variant": key[0], "lpm": key[1], "round": r, "load": round(load, 2), "rate": round(fig["rate"]),
           "auc": fig["auc"], "process": round(fig["process"] * 1e6 / fig["steady"], 3),
           "broker": round(fig["broker"] * 1e6 / records, 3), "b_sys": round(fig["broker_sys"] * 1e6 / records, 3),
           "b_kflt": round(fig["broker_faults"] * 1e3 / records, 1), **{g: round(c, 3) for g, c in per.items()}}
    print(json.dumps(row), file=sys.stderr, flush=True)
    runs.setdefault(key, []).append(row)


def _summary(runs, records) -> None:
    cols = ["rate", "process", "broker", "b_sys", "b_kflt", "train", "parse", "consumer", "io", "file"]
    print(f"# medians per variant; CPU-s per million lines ({records:,} lines a run); the broker's: "
          f"CPU-s, of which system (kernel), and its minor page faults in thousands")
    print(f"{'variant':<14}{'lpm':>4}" + "".join(f"{c:>10}" for c in cols))
    for (name, k), rows in runs.items():
        med = [statistics.median(r.get(c, 0.0) for r in rows) for c in cols]
        print(f"{name:<14}{k:>4}" + "".join(f"{m:>10,.0f}" if c == "rate" else f"{m:>10.3f}"
                                            for c, m in zip(cols, med, strict=True)))


if __name__ == "__main__":
    sys.exit(main())
