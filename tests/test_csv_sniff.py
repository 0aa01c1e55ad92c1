"""A CSV column of decimals read as categorical is named in one warning (readers/csv_sniff.py)."""
from __future__ import annotations

import json
import logging

import numpy as np

from streamtrain.readers import make_parser


def _lines(n=200, seed=0):
    rng = np.random.default_rng(seed)
    out = ["click,app,d0,d1,hour"]
    for i in range(n):
        out.append(f"{i % 2},{rng.integers(0, 900)},{rng.normal():.5f},{rng.exponential():.3e},"
                   f"{14102100 + i % 24}")
    return out


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "streamtrain.readers"]


def test_decimal_columns_left_categorical_are_named_once(caplog):
    p = make_parser("csv", {"label": "click"})
    lines = _lines()
    p.set_header(lines[0])
    with caplog.at_level(logging.WARNING, logger="streamtrain.readers"):
        p.parse_buffer(b"")                     # what the file reader parses after the header
        b = p.parse_buffer(("\n".join(lines[1:]) + "\n").encode())
        p.parse_buffer(("\n".join(lines[1:]) + "\n").encode())
    msgs = _warnings(caplog)
    assert len(msgs) == 1, msgs
    assert "['d0', 'd1']" in msgs[0] and "reader.numeric" in msgs[0]
    assert "app" not in msgs[0] and "hour" not in msgs[0]       # integers: ids and codes
    assert len(b.labels) == 200 and sorted(b.sparse) == ["app", "d0", "d1", "hour"]  # read as before


def test_no_warning_when_the_decimals_are_numeric(caplog):
    p = make_parser("csv", {"label": "click", "numeric": ["d0", "d1"]})
    with caplog.at_level(logging.WARNING, logger="streamtrain.readers"):
        b = p.parse(_lines())                                   # the line-by-line path
    assert _warnings(caplog) == []
    assert b.dense.shape == (200, 2)


def test_line_by_line_path_warns_too_and_few_rows_do_not(caplog):
    with caplog.at_level(logging.WARNING, logger="streamtrain.readers"):
        make_parser("csv", {"label": "click", "numeric": ["d1"]}).parse(_lines())
        make_parser("csv", {"label": "click"}).parse(_lines(n=10))
    msgs = _warnings(caplog)
    assert len(msgs) == 1 and "['d0']" in msgs[0], msgs


def test_json_lines_keys_of_decimals_left_categorical_are_named_once(caplog):
    """The same for JSON lines: a key whose values are decimals (JSON numbers like 0.5, or
    strings holding them) is named; integers (ids) and keys in numeric are not."""
    rng = np.random.default_rng(1)
    rows = [{"label": i % 2, "app": int(rng.integers(0, 900)), "d0": round(float(rng.normal()), 5),
             "d1": f"{rng.exponential():.3e}", "d2": round(float(rng.normal()), 3)} for i in range(200)]
    text = ("\n".join(json.dumps(r) for r in rows) + "\n").encode()
    p = make_parser("jsonl", {"numeric": ["d2"]})
    with caplog.at_level(logging.WARNING, logger="streamtrain.readers"):
        b = p.parse_buffer(text)
        p.parse_buffer(text)
    msgs = _warnings(caplog)
    assert len(msgs) == 1 and msgs[0].startswith("json lines keys ['d0', 'd1'] hold decimal numbers"), msgs
    assert """--set 'reader.numeric=["d0", "d1"]'""" in msgs[0]
    assert b.size == 200 and sorted(b.sparse) == ["app", "d0", "d1"]       # read as before
