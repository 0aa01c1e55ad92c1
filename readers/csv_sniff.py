"""Warn once when a CSV column (or a JSON lines key) read as categorical holds decimal numbers.

A column left out of ``reader.numeric`` is hashed value by value: each distinct number is its
own id, seen once or twice, and the model learns nothing from it (on a stream whose signal is
in its numeric columns, ``auto.json`` ends at 0.677 logloss read that way and 0.470 with the
columns in ``reader.numeric``; docs/getting-started.md). Integers are left alone: ids and
codes (an app, an ip, an hour) are written as integers too, and categorical is right for them.
"""
from __future__ import annotations

import logging
import re

log = logging.getLogger("streamtrain.readers")

DECIMAL = re.compile(rb"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)$")
SAMPLE_BYTES = 1 << 16
MIN_ROWS = 20
SHARE = 0.9


def decimal_columns(data: bytes, delimiter: bytes, columns: list[str], candidates: list[int]) -> list[str] | None:
    """The candidate columns whose non-empty cells are decimals in at least ``SHARE`` of the
    sampled rows (the first ``SAMPLE_BYTES`` of ``data``, whole lines with the header's width);
    None when ``data`` has fewer than ``MIN_ROWS`` such rows (too few to tell)."""
    lines = data[:SAMPLE_BYTES].split(b"\n")
    if len(data) > SAMPLE_BYTES:
        lines = lines[:-1]
    rows = [ln.rstrip(b"\r").split(delimiter) for ln in lines]
    rows = [r for r in rows if len(r) == len(columns)]
    if len(rows) < MIN_ROWS:
        return None
    found = []
    for j in candidates:
        cells = [r[j].strip(b'"') for r in rows if r[j]]
        if len(cells) >= MIN_ROWS and sum(bool(DECIMAL.match(c)) for c in cells) >= SHARE * len(cells):
            found.append(columns[j])
    return found


def decimal_keys(objects: list, candidates: list[str]) -> list[str]:
    """The candidate keys whose present values are decimals (``0.5``, ``1e3``; as the JSON
    lines parser keeps numbers, their text) in at least ``SHARE`` of the objects that have
    them, at least ``MIN_ROWS`` of them."""
    found = []
    for key in candidates:
        values = [o[key] for o in objects if isinstance(o, dict) and o.get(key) is not None]
        decimals = sum(isinstance(v, str) and bool(DECIMAL.match(v.encode())) for v in values)
        if len(values) >= MIN_ROWS and decimals >= SHARE * len(values):
            found.append(key)
    return found


def warn_decimal_columns(data: bytes, delimiter: bytes, columns: list[str],
                         candidates: list[int]) -> list[str] | None:
    """``decimal_columns``, with one warning naming them when there are any."""
    found = decimal_columns(data, delimiter, columns, candidates)
    say_decimal("csv columns", found)
    return found


def say_decimal(what: str, found: list[str] | None) -> None:
    if found:
        log.warning("%s %s hold decimal numbers but are read as categorical (each distinct "
                    "value its own id, so the model learns little from them); if they are numbers, "
                    "list them in reader.numeric, e.g. --set 'reader.numeric=%s'", what, found,
                    str(found).replace("'", '"'))
