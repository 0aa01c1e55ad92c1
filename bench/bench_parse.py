"""Parse speed of the readers (lines/s), on the real data files cycled.

    python bench/bench_parse.py [--lines 300000] [--repeat 3]

Prints, for criteo and csv (TalkingData): the parser alone on lines already in memory
(``parse_buffer`` on 1024-line pieces, what the file reader does) and the whole file reader
(gunzip + parse + batches of 1024, looping over the file). Best of ``--repeat`` runs.
For criteo also the reader as ``streamtrain run`` drives it in ``bench/compare.py --targets``:
the uncompressed TSV of ``bench/streams.py``, batches of 256, parsed inline
(``parse_ahead=0``, so the figure is the parse thread's work per line, GIL or not).
"""
from __future__ import annotations

import argparse
import gzip
import os
import time
from pathlib import Path

from streamtrain.readers import Malformed, file_reader, make_parser

DATA = Path(os.environ.get("STREAMTRAIN_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
CASES = {
    "criteo": ("criteo_kaggle_head7625.tsv.gz", "criteo", {}),
    "csv": ("talkingdata_train_sample_100k.csv.gz", "csv", {"label": "is_attributed"}),
}


def best(fn, repeat):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        n = fn()
        out.append(n / (time.perf_counter() - t))
    return max(out)


def parse_only(name, fmt, options, lines, piece=1024):
    raw = gzip.open(DATA / name, "rb").read()
    all_lines = raw.split(b"\n")[:-1]
    p = make_parser(fmt, options, Malformed())
    if p.needs_header:
        p.set_header(all_lines[0])
        all_lines = all_lines[1:]
    bufs = [b"\n".join(all_lines[i:i + piece]) + b"\n" for i in range(0, len(all_lines), piece)]
    per_pass = sum(b.count(b"\n") for b in bufs)

    def run():
        done = 0
        while done < lines:
            for buf in bufs:
                p.parse_buffer(buf)
            done += per_pass
        return done
    return run


def whole_reader(name, fmt, options, lines):
    def run():
        r = file_reader(DATA / name, fmt, options, 1024, Malformed(), loop=True, limit=lines)
        return sum(b.size for b in r())
    return run


def tsv_reader(lines):
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import streams
    path = streams.criteo_tsv(lines)

    def run():
        r = file_reader(path, "criteo", {}, 256, Malformed(), limit=lines, parse_ahead=0)
        return sum(b.size for b in r())
    return run


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for case, (name, fmt, options) in CASES.items():
        a = best(parse_only(name, fmt, options, args.lines), args.repeat)
        b = best(whole_reader(name, fmt, options, args.lines), args.repeat)
        print(f"{case:7s} parse_buffer: {a:>10,.0f} lines/s   file_reader(.gz): {b:>10,.0f} lines/s")
        if case == "criteo":
            c = best(tsv_reader(args.lines), args.repeat)
            print(f"{case:7s} file_reader(tsv, batches of 256, inline): {c:>10,.0f} lines/s")


if __name__ == "__main__":
    main()
