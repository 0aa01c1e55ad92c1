"""The compiled libsvm pass gives exactly the Batch the vectorised path gives, or steps aside."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.readers import Malformed, make_parser
from streamtrain.readers.lines import Chunk
from tests.readers_helpers import assert_batches_equal

GOOD = [b"1 3:0.5 7:1", b"-1\t3:2  9:-0.25 ", b"0", b"1 a:1 b:+.5 c:12345678901 d:-0", b"1 3:1\r"]


def _both(buf, options=None, fast_path=True):
    fast_m, slow_m = Malformed(), Malformed()
    fast_p = make_parser("libsvm", options or {}, fast_m)
    assert (fast_p.parse_compiled(buf) is not None) == fast_path
    fast = fast_p.parse_buffer(buf)
    assert_batches_equal(fast, make_parser("libsvm", options or {}, slow_m).parse_chunk(Chunk(buf)))
    assert fast_m.snapshot() == slow_m.snapshot()
    return fast, fast_m


def test_edge_values_match():
    batch, m = _both(b"\n".join(GOOD) + b"\n")
    assert batch.size == 5 and m.total == 0
    assert batch.sparse["features"].offsets.tolist() == [0, 2, 4, 4, 8, 9]
    assert batch.labels.tolist() == [1, 0, 0, 1, 1]                      # -1 → 0


@pytest.mark.parametrize("bad", [
    b"1 3:0.5:1",        # two colons
    b"1 :0.5",           # empty index
    b"1 3:",             # empty value
    b"1 3:x",            # not a number
    b"1 3:1e-5",         # an exponent: the vectorised path parses it
    b"x 3:1",            # a bad label
    b":",                # a colon and no feature (the vectorised path used to raise IndexError)
    b"2 3:1",            # a label not allowed
    b"1 3",              # no colon
    b"   ",              # spaces only
    b"",                 # blank
    b"1 3:1\r 4:1",      # a '\r' inside a token
    b"1 \xff:1",         # not UTF-8
    b"1 \xc3\xa9:1",     # UTF-8: taken by the vectorised path's rules as well
    b"1 " + b"q" * 40 + b":1",  # over field_length (32 below)
])
def test_anything_to_decide_gives_the_vectorised_result(bad):
    buf = b"\n".join([GOOD[0], bad, GOOD[1]]) + b"\n"
    fast_m, slow_m = Malformed(), Malformed()
    fast = make_parser("libsvm", {"field_length": 32}, fast_m).parse_buffer(buf)
    assert_batches_equal(fast, make_parser("libsvm", {"field_length": 32}, slow_m).parse_chunk(Chunk(buf)))
    assert fast_m.snapshot() == slow_m.snapshot()


def test_options_and_a_region_read_in_place():
    piece = b"\n".join(GOOD) + b"\n"
    head = b"1 h:1\n"
    p = make_parser("libsvm", {"field": "f", "labels": None, "label_map": {}})
    alone = p.parse_buffer(piece)
    assert alone.labels.tolist()[1] == -1 and list(alone.sparse) == ["f"]
    for after in (b"", b"1 ", b"0 1:1 2:2 3:3 4:4"):
        got = p.parse_batches(head + piece + after, [0, 5], len(head), len(head) + len(piece))
        assert_batches_equal(got[0], alone)


def test_a_chunk_of_lines_without_features_but_a_colon_is_counted_not_raised():
    m = Malformed()
    batch = make_parser("libsvm", {}, m).parse_chunk(Chunk(b":\n"))
    assert batch.size == 0 and m.snapshot()["label"] == 1


@pytest.mark.parametrize("at", range(10))
def test_the_word_scan_finds_every_stop_at_every_offset(at):
    """The kernel looks for a token's end eight bytes at a time (a byte below 33 or ':'): a
    separator, a ':' and a line's end are found wherever they sit in a word, a control byte
    inside an index is a plain byte of it, a second ':' sends the chunk the vectorised way."""
    idx = ["k" * at + c + "m" * (9 - at) for c in ("!", "\x0b", "\x00", "é", "z")]
    lines = [f"1 {i}:{v}\t{'q' * (at + 1)}:2" for v, i in enumerate(idx)] + [f"0{' ' * at} {'w' * (at + 8)}:3"]
    fast, m = _both(("\n".join(lines) + "\n").encode())
    assert m.total == 0 and fast.labels.tolist() == [1] * len(idx) + [0]
    assert fast.sparse["features"].offsets.tolist() == [*range(0, 2 * len(idx) + 1, 2), 2 * len(idx) + 1]
    _both(("\n".join([lines[0], f"1 {'k' * at}:1:2"]) + "\n").encode(), fast_path=False)


@pytest.mark.parametrize("lines", [-1, 5])
def test_a_region_with_any_bytes_around_it_lines_counted_or_given(lines):
    """``chunk.copied``: a region with fewer than 8 bytes after it is copied, counted and checked
    for high bytes in one pass, any other read in place (counted and checked there); a high byte
    after the region does not count, a non-UTF-8 one inside sends it the vectorised way."""
    good = b"\n".join(GOOD[:4] + ["1 \u00e9:1".encode()]) + b"\n"
    bad = good.replace(b"d:-0", b"\xff:-0")
    alone = make_parser("libsvm", {}).parse_chunk(Chunk(good))
    p = make_parser("libsvm", {})
    for before in range(9):
        for after in range(18):
            around = b"\xff" * before, (b"\xff\n" * after)[:after]
            got = p.parse_compiled(around[0] + good + around[1], before, before + len(good), lines)
            assert_batches_equal(got, alone)
            assert p.parse_compiled(around[0] + bad + around[1], before, before + len(bad), lines) is None


@pytest.mark.parametrize("at", range(8))
def test_values_of_every_length_and_form_at_every_offset(at):
    """A value of up to 7 digits is read as one word (``tokens.leading_digits``), any other by
    ``number_token``: the vectorised path's values for integers of 1-15 digits, signed, with
    leading zeros and decimals; a value that is not a number goes the vectorised way."""
    forms = [d for k in range(1, 16) for d in ("7" * k, "123456789012345"[:k])]
    forms += ["0", "00", "0007", "-0", "-12", "+5", "3.", ".5", "12.25", "1234567.5"]
    lines = [f"1 {'k' * at}{i}:{v}" for i, v in enumerate(forms)]
    fast, m = _both(("\n".join(lines) + "\n").encode())
    assert m.total == 0
    assert fast.sparse["features"].values.tolist() == [float(np.float32(v)) for v in forms]
    for bad in ("1a", "12x4567", "1-2", "1234567a", "1234567890123456", "-"):
        _both(f"1 {'k' * at}i:{bad}\n".encode(), fast_path=False)
