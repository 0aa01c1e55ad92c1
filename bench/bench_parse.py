"""Parse speed of the readers (lines/s), on the real data files cycled.

    python bench/bench_parse.py [--lines 300000] [--repeat 3]

Prints, for criteo and csv (TalkingData): the parser alone on lines already in memory
(``parse_buffer`` on 1024-line pieces, what the file reader does) and the whole file reader
(gunzip + parse + batches of 1024, looping over the file). Best of ``--repeat`` runs.
Then every format on the same 40 fields: the Criteo sample's rows written once (under
``$TMPDIR/streamtrain-bench``) as a CSV with a header (label, 13 numeric, 26 categorical
columns), as libsvm (``label j:value`` for I1..I13 present, ``i:1`` for C1..C26 present, ``i`` an
integer given to each (column, value) in order of appearance, as converters to libsvm do)
and as JSON lines (``{"label": 0, "I1": 1, ..., "C1": "68fd1e64", ...}``, missing keys left
out), each parsed by ``parse_buffer`` like the Criteo TSV; the ratio to the TSV's lines/s is
issue 27's target (>= 0.8).
For criteo also the reader as ``streamtrain run`` drives it in ``bench/compare.py --targets``:
the uncompressed TSV of ``bench/streams.py``, batches of 256, parsed inline
(``parse_ahead=0``, so the figure is the parse thread's work per line, GIL or not).
"""
from __future__ import annotations

import argparse
import gzip
import sys
import time
from pathlib import Path

from streamtrain.readers import Malformed, file_reader, make_parser

sys.path.insert(0, str(Path(__file__).resolve().parent))
from streams import DATA  # noqa: E402  (STREAMTRAIN_DATA, or ../shared/data beside the checkout)
CASES = {
    "criteo": ("criteo_kaggle_head7625.tsv.gz", "criteo", {}),
    "csv": ("talkingdata_train_sample_100k.csv.gz", "csv", {"label": "is_attributed"}),
}


CLOCK = time.perf_counter


def best(fn, repeat):
    out = []
    for _ in range(repeat):
        t = CLOCK()
        n = fn()
        out.append(n / (CLOCK() - t))
    return max(out)


def parse_only(name, fmt, options, lines, piece=1024):
    return parse_lines(gzip.open(DATA / name, "rb").read().split(b"\n")[:-1], fmt, options, lines, piece)


def parse_lines(all_lines, fmt, options, lines, piece=1024):
    """A pass of ``parse_buffer`` over ``all_lines`` in ``piece``-line buffers, repeated until
    ``lines`` are parsed (the kernels compiled or loaded first); returns the lines parsed."""
    p = make_parser(fmt, options, Malformed())
    if p.needs_header:
        p.set_header(all_lines[0])
        all_lines = all_lines[1:]
    bufs = [b"\n".join(all_lines[i:i + piece]) + b"\n" for i in range(0, len(all_lines), piece)]
    per_pass = len(all_lines)
    p.parse_buffer(bufs[0])                                  # compile / load the kernels first

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
    import streams
    path = streams.criteo_tsv(lines)

    def run():
        r = file_reader(path, "criteo", {}, 256, Malformed(), limit=lines, parse_ahead=0)
        return sum(b.size for b in r())
    return run


def same_fields_files() -> dict:
    """{format: (path, options)}: the Criteo sample's 40 fields in each format, written once."""
    import json
    import streams
    rows = [ln.split(b"\t") for ln in gzip.open(DATA / CASES["criteo"][0], "rb").read().split(b"\n")[:-1]]
    dense, sparse = [f"I{i}" for i in range(1, 14)], [f"C{i}" for i in range(1, 27)]

    def csv_line(r):
        return b",".join(r) + b"\n"

    index: dict = {}                      # libsvm's indices are integers: one per (column, value)

    def libsvm_line(r):
        toks = [r[0]] + [b"%d:%s" % (j + 1, v) for j, v in enumerate(r[1:14]) if v]
        cats = [index.setdefault((j, v), 14 + len(index)) for j, v in enumerate(r[14:]) if v]
        return b" ".join(toks + [b"%d:1" % i for i in cats]) + b"\n"

    def json_line(r):
        d = {"label": int(r[0])}
        d.update((k, int(v)) for k, v in zip(dense, r[1:14]) if v)
        d.update((k, v.decode()) for k, v in zip(sparse, r[14:]) if v)
        return json.dumps(d, separators=(",", ":")).encode() + b"\n"

    out = {}
    for fmt, line, head, opts in (
            ("csv", csv_line, ",".join(["label", *dense, *sparse]).encode() + b"\n", {"numeric": dense}),
            ("libsvm", libsvm_line, b"", {}),
            ("jsonl", json_line, b"", {"numeric": dense, "columns": sparse})):
        path = streams._write_once(streams.BENCH_TMP / f"criteo_fields.{fmt}",
                                   lambda f, line=line, head=head: f.write(head + b"".join(map(line, rows))))
        out[fmt] = (path, opts)
    return out


def parse_file(path, fmt, options, lines, piece=1024):
    return parse_lines(Path(path).read_bytes().split(b"\n")[:-1], fmt, options, lines, piece)


def same_fields(args) -> None:
    """Each format against the Criteo TSV, interleaved round by round (best of ``--repeat``)."""
    from streamtrain.readers import FORMATS
    files = {f: v for f, v in same_fields_files().items() if f in FORMATS}
    runs = {"criteo": parse_only(*CASES["criteo"], args.lines)}
    runs.update((f, parse_file(path, f, opts, args.lines)) for f, (path, opts) in files.items())
    got = {name: 0.0 for name in runs}
    for _ in range(args.repeat):
        for name, run in runs.items():
            got[name] = max(got[name], best(run, 1))
    print(f"same 40 fields, parse_buffer on 1024-line pieces ({args.clock} clock): "
          f"criteo TSV {got['criteo']:,.0f} lines/s")
    for name in files:
        print(f"{name:7s} {got[name]:>10,.0f} lines/s = {got[name] / got['criteo']:.2f}x criteo (target >= 0.8)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: lines per second of the process's CPU time (steadier on a loaded machine)")
    args = ap.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter
    same_fields(args)
    for case, (name, fmt, options) in CASES.items():
        a = best(parse_only(name, fmt, options, args.lines), args.repeat)
        b = best(whole_reader(name, fmt, options, args.lines), args.repeat)
        print(f"{case:7s} parse_buffer: {a:>10,.0f} lines/s   file_reader(.gz): {b:>10,.0f} lines/s")
        if case == "criteo":
            c = best(tsv_reader(args.lines), args.repeat)
            print(f"{case:7s} file_reader(tsv, batches of 256, inline): {c:>10,.0f} lines/s")


if __name__ == "__main__":
    main()
