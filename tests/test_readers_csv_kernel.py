"""The compiled CSV pass gives exactly the Batch the vectorised path gives, or steps aside."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from streamtrain.readers import Malformed, make_parser
from streamtrain.readers.lines import Chunk
from tests.readers_helpers import assert_batches_equal, data_file

HEADER = "label,user,age,score,tags,city"
OPTIONS = {"numeric": ["age", "score"], "multivalue": {"tags": "|"}}


def _parser(options=None, malformed=None, header=HEADER):
    p = make_parser("csv", OPTIONS if options is None else options, malformed)
    p.set_header(header)
    return p


def _both(buf, options=None, header=HEADER, fast_path=True):
    """Batch and malformed counts of the kernel's route, checked against the vectorised path."""
    fast_m, slow_m = Malformed(), Malformed()
    fast_p, slow = _parser(options, fast_m, header), _parser(options, slow_m, header)
    assert (fast_p.parse_compiled(buf) is not None) == fast_path
    fast = fast_p.parse_buffer(buf)
    assert_batches_equal(fast, slow.parse_chunk(Chunk(buf)))
    assert fast.labels.dtype == np.float32 and fast.dense.dtype == np.float32
    assert fast_m.snapshot() == slow_m.snapshot()
    return fast, fast_m


def test_edge_values_match():
    buf = (b"1,u1,31,0.5,a|b,paris\n0,u2,,-2.25,,\n1,,+7,.5,|x||y|,\xc3\xa9t\xc3\xa9\n"
           b"0,u4,-0,123456789012345,a,b\r\n")
    batch, m = _both(buf)
    assert batch.size == 4 and m.total == 0
    assert batch.sparse["tags"].offsets.tolist() == [0, 2, 2, 4, 5]
    assert batch.sparse["user"].offsets.tolist() == [0, 1, 2, 2, 3]       # empty = missing


@pytest.mark.parametrize("bad", [
    b'1,"u,1",3,4,a,b',          # a quoted delimiter: text, read by the vectorised path
    b'1,"u1",3,4,a,b',           # quotes: the vectorised path takes them out
    b'1,"u1,3,4,a,b',            # a quote that does not close: field count
    b"1,u1,abc,4,a,b",           # not a number
    b"1,u1,NA,4,a,b",            # a number written as missing: the vectorised path reads it as empty
    b"1,u1,1e5,4,a,b",           # an exponent: the vectorised path parses it
    b"1,u1,1234567890123456,4,a,b",  # 16 digits: beyond the exact rule
    b",u1,3,4,a,b",              # missing label
    b"2,u1,3,4,a,b",             # a label not allowed
    b"1,u1,3,4,a",               # too few fields
    b"1,u1,3,4,a,b,c",           # too many
    b"",                         # blank line
    b"1,u1,3,4,a,b\r",           # '\r\n' (taken by the kernel: the same batch)
    b"1,u\r1,3,4,a,b",           # a '\r' inside a field
    b"1,\xff,3,4,a,b",           # not UTF-8
    b"1," + b"q" * 40 + b",3,4,a,b",  # over field_length (32 below)
])
def test_anything_to_decide_goes_the_vectorised_way_with_the_same_result(bad):
    buf = b"\n".join([b"1,u1,3,4,a|b,x", bad, b"0,u2,5,6,c,y"]) + b"\n"
    options = {**OPTIONS, "field_length": 32}
    fast_m, slow_m = Malformed(), Malformed()
    fast = _parser(options, fast_m).parse_buffer(buf)
    assert_batches_equal(fast, _parser(options, slow_m).parse_chunk(Chunk(buf)))
    assert fast_m.snapshot() == slow_m.snapshot()


def test_bad_line_is_counted_by_reason_and_reported_with_its_text():
    seen = []
    m = Malformed(on_bad=lambda line, reason: seen.append((line, reason)))
    buf = b"1,u1,3,4,a,b\n1,u1,x,4,a,b\n0,u2,5,6,c,y\n"
    batch = _parser(None, m).parse_buffer(buf)
    assert batch.size == 2 and seen == [(b"1,u1,x,4,a,b", "number")]


@pytest.mark.parametrize("transform", ["log1p", "none"])
def test_real_samples_match_the_vectorised_path(transform):
    talking = gzip.open(data_file("talkingdata_train_sample_100k.csv.gz"), "rb").read().split(b"\n")
    header, lines = talking[0].decode(), [ln for ln in talking[1:] if ln]
    options = {"label": "is_attributed", "drop": ["click_time"], "numeric": ["app"],
               "numeric_transform": transform}
    for i in range(0, 20000, 5000):
        _both(b"\n".join(lines[i:i + 5000]) + b"\n", options, header)


def test_a_region_read_in_place_parses_as_its_own_copy():
    piece = b"1,u1,3,4,a|b,x\n0,u2,5,6,c,y\n"
    head = b"0,h,1,1,h,h\n"
    p = _parser()
    alone = p.parse_buffer(piece)
    for after in (b"", b"1,", b"0,u2,5,6,c,yyyyyyyyyyy"):
        buf = head + piece + after
        got = p.parse_batches(buf, [0, 2], len(head), len(head) + len(piece))
        assert len(got) == 1
        assert_batches_equal(got[0], alone)


def test_other_delimiter_and_columns_option():
    p = make_parser("csv", {"columns": ["label", "a", "b"], "delimiter": "\t", "numeric": ["b"]})
    q = make_parser("csv", {"columns": ["label", "a", "b"], "delimiter": "\t", "numeric": ["b"]})
    buf = b"1\tx\t2\n0\ty\t\n"
    assert p.parse_compiled(buf) is not None
    assert_batches_equal(p.parse_buffer(buf), q.parse_chunk(Chunk(buf)))


@pytest.mark.parametrize("at", range(10))
@pytest.mark.parametrize("delimiter", [",", "\t", ";"])
def test_the_word_scan_finds_every_stop_at_every_offset(at, delimiter):
    """The kernel looks for a field's end eight bytes at a time (a byte below 35 or the
    delimiter): a space, '!', '#', a control byte or a high byte is a plain byte of a token
    wherever it sits in a word, the delimiter ends the field wherever it sits, a lone ``\\r`` is
    plain and a quote sends the chunk the vectorised way."""
    d = delimiter
    header = d.join(["label", "user", "age", "city"])
    opts = {"numeric": ["age"], "delimiter": d}
    plain = ["k" * at + c + "m" * (9 - at) for c in (" ", "!", "#", "\x0b", "\x00", "\r", "é")]
    lines = [d.join(["1", p, str(i), "x" * at]) for i, p in enumerate(plain)]
    lines.append(d.join(["0", "k" * at, "7", "c" * (at + 8)]))
    fast, _ = _both(("\n".join(lines) + "\n").encode(), opts, header)
    assert len(fast.labels) == len(lines)
    np.testing.assert_allclose(np.expm1(fast.dense[:, 0]), [*range(len(plain)), 7.0], rtol=1e-6)
    quoted = d.join(["1", "k" * at + '"q"', "3", "c"])
    _both(("\n".join([lines[0], quoted]) + "\n").encode(), opts, header, fast_path=False)


@pytest.mark.parametrize("lines", [-1, 3])
def test_a_region_with_any_bytes_around_it_lines_counted_or_given(lines):
    """``chunk.copied``: a region with fewer than 8 bytes after it is copied, counted and checked
    for high bytes in one pass, any other read in place (counted and checked there); a high byte
    after the region does not count, a non-UTF-8 one inside sends it the vectorised way."""
    good = "1,u1,3,4,a|b,\u00e9t\u00e9\n0,u2,5,6,c,y\n1,u3,,,,z\n".encode()
    bad = good.replace(b"z", b"\xff")
    alone = _parser().parse_chunk(Chunk(good))
    p = _parser()
    for before in range(9):
        for after in range(18):
            around = b"\xff" * before, b"\xff\n" * after
            buf = around[0] + good + around[1][:after]
            got = p.parse_compiled(buf, before, before + len(good), lines)
            assert_batches_equal(got, alone)
            buf = around[0] + bad + around[1][:after]
            assert p.parse_compiled(buf, before, before + len(bad), lines) is None


@pytest.mark.parametrize("at", range(8))
def test_numbers_of_every_length_and_form_at_every_offset(at):
    """The kernel reads a number of up to 7 digits as one word (``tokens.leading_digits``) and
    any other through ``number_token``: the same values as the vectorised path for integers of
    1-15 digits, signed, with leading zeros, decimals; anything else goes the vectorised way."""
    header = "label,pad,age"
    opts = {"numeric": ["age"], "numeric_transform": "none"}
    forms = [d for k in range(1, 16) for d in ("7" * k, "123456789012345"[:k])]
    forms += ["0", "00", "0007", "-0", "-12", "+5", "3.", ".5", "12.25", "1234567.5"]
    lines = [f"{i % 2},{'p' * at},{v}" for i, v in enumerate(forms)]
    fast, m = _both(("\n".join(lines) + "\n").encode(), opts, header)
    assert m.total == 0
    np.testing.assert_array_equal(fast.dense[:, 0], np.array([float(v) for v in forms], np.float32))
    for bad in ("1a", "12x4567", "1-2", "1234567a", "1234567890123456", "-", ""):
        _both(f"1,{'p' * at},{bad}\n".encode(), opts, header, fast_path=bad == "")
    for label in ("1", "0", "01", "", "1x"):
        _both(f"{label},{'p' * at},3\n".encode(), opts, header, fast_path=label in ("1", "0", "01"))
