"""Parse time of a 768-line Criteo chunk holding one huge categorical value (issue 15, defect 2).

    python bench/bench_long_value.py

For a 100 KB and a 10 MB value, with the default ``field_length`` (65536: the line is counted
malformed, nothing hashed) and with a limit above the value (it is hashed): milliseconds per
parse, best of 3.
"""
from __future__ import annotations

import gzip
import os
import time
from pathlib import Path

from streamtrain.readers import make_parser

DATA = Path(os.environ.get("STREAMTRAIN_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def main() -> None:
    with gzip.open(DATA / "criteo_kaggle_head7625.tsv.gz", "rb") as fh:
        lines = fh.read().split(b"\n")[:768]
    for size in (100_000, 10_000_000):
        fields = lines[100].split(b"\t")
        fields[20] = b"x" * size
        buf = b"\n".join(lines[:100] + [b"\t".join(fields)] + lines[101:]) + b"\n"
        for limit in (65536, 2 * size):
            parser = make_parser("criteo", {"field_length": limit})
            parser.parse(lines[:5])                      # load the compiled hashing kernel
            times = []
            for _ in range(3):
                t = time.perf_counter()
                batch = parser.parse_buffer(buf)
                times.append(time.perf_counter() - t)
            print(f"value {size:>10,} B  field_length {limit:>10,}: {min(times) * 1000:7.1f} ms  "
                  f"rows {batch.size}  skipped as field_length: {parser.malformed.snapshot()['field_length'] // 3}")


if __name__ == "__main__":
    main()
