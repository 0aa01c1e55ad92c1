"""The compiled passes against the reference paths on random bytes: the same batch and the same
counts of bad lines, whatever the input (a kernel either takes a block and agrees, or steps aside)."""
from __future__ import annotations

import json

from hypothesis import given, settings, strategies as st

from streamtrain.readers import Malformed, make_parser
from streamtrain.readers.lines import Chunk
from tests.readers_helpers import assert_batches_equal

CSV_BYTES = st.sampled_from([b"0", b"1", b"7", b"-", b".", b",", b"|", b'"', b"\r", b"a", b"\xc3\xa9", b"\xff", b" "])
LIBSVM_BYTES = st.sampled_from([b"0", b"1", b"9", b"-", b"+", b".", b":", b" ", b"\t", b"\r", b"x", b"e", b"\xff"])


def _same(fmt, options, buf, header=None):
    ms = Malformed(), Malformed()
    parsers = [make_parser(fmt, options, m) for m in ms]
    if header is not None:
        for p in parsers:
            p.set_header(header)
    fast = parsers[0].parse_buffer(buf)
    assert_batches_equal(fast, parsers[1].parse_chunk(Chunk(buf)))
    assert ms[0].snapshot() == ms[1].snapshot()


def _lines(byte, fields, sep):
    field = st.lists(byte, max_size=6).map(b"".join)
    line = st.lists(field, min_size=1, max_size=fields).map(sep.join)
    return st.lists(line, min_size=1, max_size=6).map(lambda ls: b"\n".join(ls) + b"\n")


@settings(max_examples=300, deadline=None)
@given(_lines(CSV_BYTES, 5, b","))
def test_csv(buf):
    _same("csv", {"numeric": ["n"], "multivalue": {"m": "|"}, "field_length": 4}, b"1" + buf[1:],
          "label,n,c,m")


@settings(max_examples=300, deadline=None)
@given(_lines(LIBSVM_BYTES, 5, b" "))
def test_libsvm(buf):
    _same("libsvm", {"field_length": 5, "labels": None}, buf)


VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=False, width=32),
                   st.text(alphabet="ab\\\"é\n\x01 ", max_size=4))
OBJECTS = st.dictionaries(st.sampled_from(["label", "n", "c", "m", "x"]),
                          st.one_of(VALUES, st.lists(VALUES, max_size=3)), max_size=5)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(OBJECTS.map(lambda d: json.dumps(d, ensure_ascii=False).encode()),
                          OBJECTS.map(lambda d: json.dumps(d, separators=(",", ":")).encode()),
                          st.sampled_from([b"{", b"[]", b"1", b'{"label": 1,}', b'{"label":1}  x', b"  "])),
                min_size=1, max_size=6))
def test_jsonl(lines):
    buf = b"\n".join(lines) + b"\n"
    _same("jsonl", {"numeric": ["n"], "multivalue": ["m"], "columns": ["c", "x"], "field_length": 3,
                    "labels": None}, buf)
