"""Memory soak: the daemon on the endless synthetic stream, RSS sampled, embedding tables reported.

    python bench/soak.py [--minutes 10] [--every 5] [--config examples/synthetic.json] [--out FILE.json]

Starts ``streamtrain run CONFIG`` as a subprocess (metrics served on a free loopback port so the
table sizes can be read from ``streamtrain_embedding_rows``; checkpoints every 60 s into a
temporary directory, as a deployed daemon would write them), samples ``VmRSS`` from
``/proc/PID/status`` every ``--every`` seconds, then stops it with SIGTERM (the daemon's clean
shutdown) and prints a table plus a verdict. "Flat" means: RSS growth over the second half of the
run, after the embedding tables stopped growing, is below ``--tolerance-mb``.
"""
from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def scrape(port: int) -> dict:
    """Embedding rows per table and the examples counter from /metrics ({} if not up yet)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return {}
    out = {"tables": {}}
    for line in text.splitlines():
        if line.startswith("streamtrain_embedding_rows{"):
            labels, value = line.rsplit(" ", 1)
            if 'state="live"' in labels or "state=" not in labels:
                table = labels.split('table="', 1)[1].split('"', 1)[0]
                out["tables"][table] = int(float(value))
        elif line.startswith("streamtrain_examples_total "):
            out["examples"] = int(float(line.split()[1]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--config", default=str(ROOT / "examples" / "synthetic.json"))
    ap.add_argument("--tolerance-mb", type=float, default=8.0)
    ap.add_argument("--out", default=None, help="write the samples as JSON here")
    args = ap.parse_args(argv)

    port = free_port()
    ckpt = tempfile.mkdtemp(prefix="soak-ckpt-")
    cmd = [sys.executable, "-m", "streamtrain", "run", args.config,
           "--set", f"metrics.port={port}", "--set", "metrics.host=127.0.0.1",
           "--set", f"checkpoint.dir={ckpt}", "--set", "checkpoint.every_seconds=60",
           "--log-level", "WARNING"]
    print("# " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples, t0 = [], time.monotonic()
    try:
        while time.monotonic() - t0 < args.minutes * 60:
            time.sleep(args.every)
            if proc.poll() is not None:
                print(proc.stderr.read().decode()[-2000:], file=sys.stderr)
                raise SystemExit(f"daemon exited early with {proc.returncode}")
            m = scrape(port)
            s = {"t": round(time.monotonic() - t0, 1), "rss_mb": round((rss_kb(proc.pid) or 0) / 1024, 1),
                 "examples": m.get("examples"), "tables": m.get("tables", {})}
            samples.append(s)
            print(f"t={s['t']:7.1f}s rss={s['rss_mb']:7.1f} MB examples={s['examples']} "
                  f"tables={s['tables']}", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
    return report(samples, args)


def report(samples: list, args) -> int:
    if len(samples) < 4:
        print("too few samples")
        return 1
    half = samples[len(samples) // 2:]
    grow = half[-1]["rss_mb"] - half[0]["rss_mb"]
    rows0, rows1 = sum(half[0]["tables"].values()), sum(half[-1]["tables"].values())
    peak = max(s["rss_mb"] for s in samples)
    rate = (samples[-1]["examples"] or 0) / max(samples[-1]["t"], 1e-9)
    print()
    print("| minutes | examples | ex/s | RSS first sample MB | RSS at half-time MB | RSS end MB | peak MB | table rows (end) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    print(f"| {samples[-1]['t'] / 60:.1f} | {samples[-1]['examples']} | {rate:.0f} | {samples[0]['rss_mb']} | "
          f"{half[0]['rss_mb']} | {half[-1]['rss_mb']} | {peak} | {samples[-1]['tables']} |")
    flat = grow < args.tolerance_mb
    print(f"\nsecond half: RSS {grow:+.1f} MB, table rows {rows0} -> {rows1}: "
          f"{'FLAT' if flat else 'GROWING'} (tolerance {args.tolerance_mb} MB)")
    if args.out:
        Path(args.out).write_text(json.dumps({"samples": samples, "flat": flat, "growth_mb": grow}, indent=1))
    return 0 if flat else 3


if __name__ == "__main__":
    sys.exit(main())
