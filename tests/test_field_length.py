"""One huge value costs its own bytes and is counted ``field_length``, not hashed (issue 15, defect 2)."""
from __future__ import annotations

import gzip
import time

import numpy as np
import pytest

from tests.readers_helpers import data_file
from streamtrain.errors import ConfigError
from streamtrain.readers import make_parser
from streamtrain.readers.formats import FORMATS

BIG = b"x" * 10_000_000


def criteo_lines(n):
    with gzip.open(data_file("criteo_kaggle_head7625.tsv.gz"), "rb") as f:
        return f.read().split(b"\n")[:n]


def _with_big(lines, field, value=BIG, sep=b"\t"):
    f = lines[100].split(sep)
    f[field] = value
    return lines[:100] + [sep.join(f)] + lines[101:]


@pytest.mark.parametrize("field", [20, 5, 0], ids=["categorical", "numeric", "label"])
def test_criteo_chunk_with_one_10mb_value_parses_fast_and_counts_it(field):
    lines = criteo_lines(768)
    p = make_parser("criteo", {})
    p.parse(lines[:10])                                   # compile (or load) the hashing kernel first
    want = make_parser("criteo", {}).parse(lines[:100] + lines[101:])
    t0 = time.process_time()               # this process's CPU time: what other processes take is not counted
    b = p.parse_buffer(b"\n".join(_with_big(lines, field)) + b"\n")
    took = time.process_time() - t0
    assert took < 0.5, f"a 768-line chunk with one 10 MB value took {took:.2f} s"
    assert b.size == 767 and p.malformed.snapshot()["field_length"] == 1 and p.malformed.total == 1
    assert np.array_equal(b.labels, want.labels)
    assert np.array_equal(b.sparse["C7"].ids, want.sparse["C7"].ids)


def test_csv_and_libsvm_count_over_long_fields():
    csv = make_parser("csv", {"label": "y", "numeric": ["n"], "field_length": 8})
    csv.set_header("y,n,c")
    b = csv.parse([b"1,2,abcdefgh", b"0,3,abcdefghi", b"1,123456789,a"])
    assert b.size == 1 and csv.malformed.snapshot()["field_length"] == 2
    svm = make_parser("libsvm", {"field_length": 8})
    b = svm.parse([b"1 3:0.5 7:1", b"0 3:0.5 123456:1", b"1 " + BIG + b":1"])
    assert b.size == 2 and svm.malformed.snapshot()["field_length"] == 1


def test_field_length_is_a_common_option_checked_with_its_key():
    for fmt in FORMATS.names():
        with pytest.raises(ConfigError, match="field_length"):
            make_parser(fmt, {"field_length": 0})
    p = make_parser("criteo", {"field_length": 3})          # a value at the limit is fine
    line = b"\t".join([b"1"] + [b"1"] * 13 + [b"abc"] * 26)
    assert p.parse([line]).size == 1
    assert p.parse([line.replace(b"abc", b"abcd", 1)]).size == 0
    assert p.malformed.snapshot()["field_length"] == 1


def test_one_long_number_among_many_decimals_costs_its_bytes():
    """A sibling: decimals are cast in one fixed-width array as wide as the longest token, so one
    60 KB number made every decimal of the chunk 60 KB wide (gigabytes for a csv chunk)."""
    csv = make_parser("csv", {"label": "y", "numeric": ["a", "b", "c", "d"], "numeric_transform": "none"})
    csv.set_header("y,a,b,c,d")
    rows = [b"1,0.5,1.25,2.5e3,-0.75"] * 2000
    rows[7] = b"0,0.5,1.25,2.5e3," + b"0" * 60_000 + b"1.5"
    t0 = time.process_time()
    b = csv.parse(rows)
    assert time.process_time() - t0 < 0.5
    assert b.size == 2000 and csv.malformed.total == 0
    assert b.dense[7, 3] == np.float32(1.5) and b.dense[0].tolist() == [0.5, 1.25, 2500.0, -0.75]
