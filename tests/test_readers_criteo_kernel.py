"""The compiled Criteo pass gives exactly the Batch the vectorised path gives, or steps aside."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from streamtrain.readers import Malformed, make_parser
from streamtrain.readers.criteo_kernel import parse_clean
from streamtrain.readers.lines import Chunk
from tests.conftest import DATA as DATA_DIR

DATA = DATA_DIR / "criteo_kaggle_head7625.tsv.gz"      # STREAMTRAIN_DATA or ../shared/data, as every test


def _same(a, b):
    assert a.dense_names == b.dense_names
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.labels.dtype == b.labels.dtype and a.dense.dtype == b.dense.dtype
    np.testing.assert_array_equal(a.dense, b.dense)
    assert np.array_equal(np.signbit(a.dense), np.signbit(b.dense))
    assert list(a.sparse) == list(b.sparse)
    for k in a.sparse:
        np.testing.assert_array_equal(a.sparse[k].ids, b.sparse[k].ids)
        np.testing.assert_array_equal(a.sparse[k].offsets, b.sparse[k].offsets)


def _both(buf, options=None):
    fast_m, slow_m = Malformed(), Malformed()
    fast = make_parser("criteo", options or {}, fast_m).parse_buffer(buf)
    slow = make_parser("criteo", options or {}, slow_m)._parse_vectorised(Chunk(buf))
    _same(fast, slow)
    chunk_m = Malformed()
    _same(make_parser("criteo", options or {}, chunk_m).parse_chunk(Chunk(buf)), slow)
    assert chunk_m.snapshot() == slow_m.snapshot()
    assert fast_m.snapshot() == slow_m.snapshot()
    return fast, fast_m


def _line(label="1", nums=None, cats=None):
    nums = ["3", "", "-2", "+7", "0", "-0", "12345678", "1"] + [""] * 5 if nums is None else nums
    cats = [f"a{i:x}b" for i in range(26)] if cats is None else cats
    return "\t".join([label] + nums + cats).encode()


@pytest.mark.skipif(not DATA.exists(), reason="criteo sample not present")
@pytest.mark.parametrize("transform", ["log1p", "none"])
def test_real_sample_matches_vectorised_path(transform):
    lines = gzip.open(DATA, "rb").read().split(b"\n")[:-1]
    for i in range(0, len(lines), 1000):
        buf = b"\n".join(lines[i:i + 1000]) + b"\n"
        assert parse_clean(buf, np.zeros(26, np.uint64), 65536) is not None
        batch, _ = _both(buf, {"numeric_transform": transform})
        assert batch.size == len(lines[i:i + 1000])


def test_edge_tokens_match():
    cats = ["", "x" * 7, "y" * 8, "z" * 9, "w" * 17] + [""] * 20 + ["last"]
    buf = b"\n".join([_line(), _line("0", cats=cats), _line("+1")]) + b"\n"
    assert parse_clean(buf, np.zeros(26, np.uint64), 65536) is not None
    _both(buf)


@pytest.mark.parametrize("bad", [
    _line(nums=["1.5"] + [""] * 12),            # a decimal: vectorised path parses it
    _line(nums=["123456789"] + [""] * 12),      # 9 bytes: longer than the compiled rule
    _line(nums=["abc"] + [""] * 12),            # not a number: marked
    _line(nums=["-"] + [""] * 12),
    _line(label=""),
    _line(label="1.0"),
    _line(cats=["a"] * 25),                     # too few fields
    _line(cats=["a"] * 27),                     # too many
    _line(cats=["é"] + ["a"] * 25),             # non-ASCII
    _line() + b"\r",                            # CRLF
    b"",                                        # blank line
    _line(cats=["q" * 40] + ["a"] * 25),        # over field_length (32 below)
])
def test_anything_to_decide_goes_the_vectorised_way(bad):
    buf = b"\n".join([_line(), bad, _line("0")]) + b"\n"
    assert parse_clean(buf, np.zeros(26, np.uint64), 32) is None
    _both(buf, {"field_length": 32})


def test_a_label_not_allowed_goes_the_vectorised_way():
    buf = b"\n".join([_line(), _line("2"), _line("0")]) + b"\n"
    assert parse_clean(buf, np.zeros(26, np.uint64), 65536) is not None
    batch, m = _both(buf)
    assert batch.size == 2 and m.snapshot().get("label") == 1


def test_lines_given_one_by_one_take_the_same_paths():
    lines = [_line(), _line("0"), b"oops", _line(label="2")]
    slow_m, fast_m = Malformed(), Malformed()
    slow = make_parser("criteo", {}, slow_m)._parse_vectorised(Chunk.from_lines(lines))
    _same(make_parser("criteo", {}, fast_m).parse(lines), slow)
    _same(make_parser("criteo").parse(lines[:2]), make_parser("criteo")._parse_vectorised(Chunk.from_lines(lines[:2])))
    assert fast_m.snapshot() == slow_m.snapshot() and slow_m.total == 2


def test_label_map_and_labels_options():
    buf = b"\n".join([_line("-1"), _line("1")]) + b"\n"
    batch, m = _both(buf, {"label_map": {-1: 0}})
    assert batch.labels.tolist() == [0.0, 1.0] and m.total == 0
    batch, m = _both(buf)                       # -1 is not a label: counted as bad
    assert batch.size == 1 and m.snapshot().get("label") == 1


@pytest.mark.parametrize("after", [b"", b"1\t", b"0\t1\t2\t3\t4\t5\t6\t7\txyz"])
def test_a_region_read_in_place_parses_as_its_own_copy(after):
    """The file reader hands a piece of a larger buffer (no copy); bytes after it, fewer or more
    than a word, change nothing, and its batches cut in one pass are the batch sliced."""
    cats = ["", "x" * 7, "y" * 8, "z" * 9, "w" * 17] + [""] * 20 + ["t"]
    piece = b"\n".join([_line(), _line("0", cats=cats), _line("+1"), _line("0")]) + b"\n"
    head = _line("1", cats=["h"] * 26) + b"\n"
    buf = head + piece + after
    seeds = make_parser("criteo").seeds
    whole = parse_clean(piece, seeds, 65536)
    region = parse_clean(buf, seeds, 65536, len(head), len(head) + len(piece))
    for a, b in zip(whole, region):
        np.testing.assert_array_equal(a, b)
    p = make_parser("criteo")
    alone = p.parse_buffer(piece)
    cut = p.parse_batches(buf, [0, 1, 3, 4], len(head), len(head) + len(piece))
    assert [b.size for b in cut] == [1, 2, 1]
    for batch, (lo, hi) in zip(cut, [(0, 1), (1, 3), (3, 4)]):
        _same(batch, alone.take(np.arange(lo, hi)))


@pytest.mark.parametrize("at", range(10))
def test_the_word_scan_finds_every_byte_at_every_offset(at):
    """The kernel looks for a field's end eight bytes at a time: a control byte that is not a
    tab or a newline is a plain byte of a token wherever it sits in a word, and a ``\\r`` or a
    byte >= 0x80 sends the chunk the vectorised way wherever it sits."""
    plain = [("k" * at + c + "m" * (9 - at)).encode() for c in ("\x0b", "\x00", "\x1f", "\x7f")]
    cats = [t.decode() for t in plain] + [f"c{i}" for i in range(22)]
    buf = b"\n".join([_line(cats=cats[:-1] + ["x" * at]), _line("0", cats=cats)]) + b"\n"
    assert parse_clean(buf, np.zeros(26, np.uint64), 65536) is not None
    _both(buf)
    for stop in ("\r", "\x80", "\xff"):           # (UTF-8: the last two start with a byte >= 0x80)
        bad = _line(cats=["k" * at + stop] + ["a"] * 25)
        assert parse_clean(b"\n".join([_line(), bad]) + b"\n", np.zeros(26, np.uint64), 65536) is None
