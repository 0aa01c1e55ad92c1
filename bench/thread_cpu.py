"""Per-thread CPU of a whole process (Linux): how busy the training thread and the parse thread are.

    python bench/thread_cpu.py -- python -m streamtrain run examples/fm.json --set reader.path=...

Runs the command and reads ``/proc/PID/task/*/stat`` every 20 ms until it exits; prints the
wall time and, for the busiest threads, their CPU seconds (user + system) and how busy each
was over the time it was seen. The main thread (``tid == pid``) is the training thread of
``streamtrain run``; the file reader's parse thread is usually the next busiest.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

POLL_S = 0.02


def _threads(pid: int, tick: int) -> dict[int, float]:
    """{tid: CPU seconds so far} of the process's live threads."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick      # utime + stime
    return out


def main() -> None:
    cmd = sys.argv[1:]
    if cmd[:1] == ["--"]:
        cmd = cmd[1:]
    if not cmd:
        sys.exit(__doc__)
    tick = os.sysconf("SC_CLK_TCK")
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    seen: dict[int, tuple[float, float, float]] = {}          # tid -> (first seen, last seen, CPU s)
    while proc.poll() is None:
        now = time.perf_counter() - t0
        for tid, cpu in _threads(proc.pid, tick).items():
            seen[tid] = (seen.get(tid, (now,))[0], now, cpu)
        time.sleep(POLL_S)
    wall = time.perf_counter() - t0
    print(f"wall {wall:.2f} s, exit {proc.returncode}, load {os.getloadavg()[0]:.1f}")
    for tid, (first, last, cpu) in sorted(seen.items(), key=lambda kv: -kv[1][2])[:6]:
        who = " (main)" if tid == proc.pid else ""
        print(f"  thread {tid}{who}: {cpu:.2f} CPU-s, seen {first:.2f}-{last:.2f} s, "
              f"{cpu / max(last - first, POLL_S):.0%} busy")


if __name__ == "__main__":
    main()
