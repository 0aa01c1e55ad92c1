"""The peers' inputs as their users write them: the raw values of a stream's file.

Nothing of streamtrain's encoding reaches a peer (no hashing, no log transform): each example is
read from the file itself and written in the peer's own documented format.

* Vowpal Wabbit text format, one line per example::

      1 |n I1:5 I2:-1 I3:12 |c C1=68fd1e64 C2=80e26c9b ...

  label -1/1; namespace ``n`` holds the numeric columns with their values, namespace ``c`` one
  feature ``column=value`` per categorical value (a multi-valued column gives one per value);
  an empty field is left out, a namespace with nothing in it too. Bytes VW reads as syntax
  (space, ``:``, ``|``) inside a value become ``_``.
* River: a dict per example, ``{"I1": 5.0, ..., "C1": "68fd1e64", ..., "genres": ["Comedy",
  "Drama"]}`` (numbers as floats, categorical values as strings, a multi-valued column as a
  list; empty fields left out), learnt through ``(SelectType(Number) | StandardScaler()) +
  (SelectType(str, list) | OneHotEncoder(drop_zeros=True)) | model`` (``bench/peers.py``).
"""
from __future__ import annotations

import csv
import gzip
import io
from dataclasses import dataclass, field

DENSE = tuple(f"I{i}" for i in range(1, 14))
SPARSE = tuple(f"C{i}" for i in range(1, 27))
_VW_SYNTAX = str.maketrans({" ": "_", ":": "_", "|": "_", "\t": "_"})


@dataclass
class RawRows:
    """Labels (0/1 floats), and per example its numeric (column, value) and categorical
    (column, value) pairs, in file order; ``numeric`` names the numeric columns."""
    labels: list = field(default_factory=list)
    nums: list = field(default_factory=list)
    cats: list = field(default_factory=list)
    numeric: tuple = ()


def _open_text(path):
    raw = gzip.open(path, "rb") if str(path).endswith(".gz") else open(path, "rb")
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def criteo_rows(path) -> RawRows:
    out = RawRows(numeric=DENSE)
    with _open_text(path) as f:
        for line in f:
            parts = line.rstrip("\r\n").split("\t")
            if len(parts) != 40:
                continue                       # streamtrain counts such a line as malformed too
            out.labels.append(float(parts[0]))
            out.nums.append([(k, float(v)) for k, v in zip(DENSE, parts[1:14]) if v])
            out.cats.append([(k, v) for k, v in zip(SPARSE, parts[14:]) if v])
    return out


def csv_rows(path, reader: dict) -> RawRows:
    """A header CSV read with the stream's reader options (label, numeric, multivalue, drop)."""
    label = reader.get("label", "label")
    numeric = tuple(reader.get("numeric", ()))
    multi = dict(reader.get("multivalue", {}))
    skip = {label, *numeric, *reader.get("drop", ())}
    out = RawRows(numeric=numeric)
    with _open_text(path) as f:
        for rec in csv.DictReader(f, delimiter=reader.get("delimiter", ",")):
            out.labels.append(float(rec[label]))
            out.nums.append([(k, float(rec[k])) for k in numeric if rec[k]])
            cats = []
            for k, v in rec.items():
                if k in skip or not v:
                    continue
                cats.extend((k, part) for part in (v.split(multi[k]) if k in multi else [v]) if part)
            out.cats.append(cats)
    return out


def rows_of(stream) -> RawRows:
    """The raw rows of a ``bench/streams.py`` stream."""
    if stream.reader.get("format") == "criteo":
        return criteo_rows(stream.path)
    return csv_rows(stream.path, stream.reader)


def vw_line(label: float, nums, cats) -> str:
    parts = ["1" if label > 0.5 else "-1"]
    if nums:
        parts.append("|n " + " ".join(f"{k}:{v:g}" for k, v in nums))
    if cats:
        parts.append("|c " + " ".join(f"{k}={v.translate(_VW_SYNTAX)}" for k, v in cats))
    return " ".join(parts)


def vw_lines(rows: RawRows) -> list[str]:
    return [vw_line(y, n, c) for y, n, c in zip(rows.labels, rows.nums, rows.cats)]


def river_dicts(rows: RawRows) -> list[dict]:
    out = []
    for nums, cats in zip(rows.nums, rows.cats):
        d = dict(nums)
        for k, v in cats:
            if k not in d:
                d[k] = v
            elif isinstance(d[k], list):
                d[k].append(v)
            else:
                d[k] = [d[k], v]
        out.append(d)
    return out


def criteo_vw_bytes(line: bytes) -> bytes:
    """One raw Criteo TSV line (with its ``\\n``) as a VW text line: the converter of the
    throughput run, which streams the TSV through it without holding every row."""
    parts = line.rstrip(b"\r\n").split(b"\t")
    out = [b"1" if parts[0] == b"1" else b"-1"]
    nums = [b"%s:%s" % (k, v) for k, v in zip(_DENSE_B, parts[1:14]) if v]
    if nums:
        out.append(b"|n " + b" ".join(nums))
    cats = [b"%s=%s" % (k, v) for k, v in zip(_SPARSE_B, parts[14:]) if v]
    if cats:
        out.append(b"|c " + b" ".join(cats))
    return b" ".join(out) + b"\n"


_DENSE_B = tuple(k.encode() for k in DENSE)
_SPARSE_B = tuple(k.encode() for k in SPARSE)
