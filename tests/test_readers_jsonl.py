"""JSON lines: the json.loads path's rules, and the compiled pass giving exactly its batches."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain.readers import Malformed, hash_values, make_parser
from streamtrain.readers.lines import Chunk
from tests.readers_helpers import assert_batches_equal

OPTIONS = {"numeric": ["age", "score"], "multivalue": ["tags"], "columns": ["user", "city", "flag"]}
GOOD = [
    b'{"label": 1, "user": "u1", "age": 31, "score": 0.5, "tags": ["a", "b"], "city": "paris"}',
    b'{"label":0,"user":"u2","score":-2.25,"tags":[],"city":null,"extra":"x"}',
    b'{"city": 75001, "label": 1, "flag": true, "tags": "solo", "user": "\xc3\xa9t\xc3\xa9"}',
    b'  {"label": 0.0, "user": "", "age": null, "flag": false, "tags": ["x", null, 7, 1.50]} \r',
]


def _both(buf, options=None, fast_path=True):
    fast_m, slow_m = Malformed(), Malformed()
    fast_p = make_parser("jsonl", OPTIONS if options is None else options, fast_m)
    slow_p = make_parser("jsonl", OPTIONS if options is None else options, slow_m)
    slow = slow_p.parse_chunk(Chunk(buf))
    fast = fast_p.parse_buffer(buf)
    assert (fast_p.parse_compiled(buf) is not None) == fast_path
    assert_batches_equal(fast, slow)
    assert fast.labels.dtype == np.float32 and fast.dense.dtype == np.float32
    assert fast_m.snapshot() == slow_m.snapshot()
    return fast, fast_m


def test_values_as_written_and_the_kernel_agrees():
    batch, m = _both(b"\n".join(GOOD) + b"\n")
    assert batch.size == 4 and m.total == 0
    assert list(batch.sparse) == ["user", "city", "flag", "tags"]
    assert batch.sparse["tags"].offsets.tolist() == [0, 2, 2, 3, 6]
    assert batch.sparse["city"].offsets.tolist() == [0, 1, 1, 2, 2]       # null / absent = missing
    # a number is hashed as it is written; a boolean as its literal
    assert batch.sparse["city"].ids[1] == hash_values("city", ["75001"])[0]
    assert batch.sparse["tags"].ids[-1] == hash_values("tags", ["1.50"])[0]
    assert batch.sparse["flag"].ids.tolist() == hash_values("flag", ["true", "false"]).tolist()
    assert batch.dense.shape == (4, 2) and batch.dense[1, 0] == 0.0


@pytest.mark.parametrize("bad,reason", [
    (b'{"label": 1, "user": "u\\u00e9"}', None),          # an escape: the json.loads path, a good line
    (b'{"label": 1, "age": 1e3}', None),                   # an exponent where a number is read
    (b'{"label": 1, "user": "a", "user": "b"}', None),     # a duplicate key: the last wins
    (b'{"label": 1, "other": {"x": [1]}}', None),           # a nested value under a key not read
    (b'{"label": 1, "city": [1, 2]}', "decode"),           # a list under a key that is not multi-valued
    (b'{"label": 1, "tags": [[1]]}', "decode"),            # nested
    (b'{"label": 1, "user": "a",}', "decode"),             # not JSON
    (b'[1, 2]', "decode"),                                 # not an object
    (b'{"label": 1} x', "decode"),
    (b'{"user": "a"}', "label"),                           # no label
    (b'{"label": "1"}', None),                             # a label written as a string: its number
    (b'{"label": true}', None),                            # ... or as a boolean
    (b'{"label": "yes"}', "label"),                        # a label that is not a number
    (b'{"label": 2}', "label"),                            # a label not allowed
    (b'{"label": 1, "age": 1234567890123456}', None),     # 16 digits: past an exact double's
    (b'{"label": 1, "age": -01}', "decode"),
    (b'{"label": 1, "age": -}', "decode"),
    (b'{"label": 1, "age": "31"}', None),                 # a number written as a string
    (b'{"label": 1, "age": true}', None),                 # a boolean: 1
    (b'{"label": 1, "age": "x"}', "number"),
    (b'{"label": 1, "user": "' + b"q" * 40 + b'"}', "field_length"),
    (b'{"label": 1, "user": "\xff"}', "decode"),           # not UTF-8
    (b"   ", "decode"),
])
def test_anything_to_decide_takes_the_json_path_with_the_same_result(bad, reason):
    buf = b"\n".join([GOOD[0], bad, GOOD[1]]) + b"\n"
    options = {**OPTIONS, "field_length": 32}
    batch, m = _both(buf, options, fast_path=False)
    assert batch.size == (3 if reason is None else 2)
    assert {k: v for k, v in m.snapshot().items() if v} == ({} if reason is None else {reason: 1})


def test_bad_lines_reach_the_dead_letter_hook_with_their_text():
    seen = []
    p = make_parser("jsonl", OPTIONS, Malformed(on_bad=lambda line, why: seen.append((line, why))))
    p.parse_buffer(b'{"label": 1}\n{"label": 1, "age": "x"}\n')
    assert seen == [(b'{"label": 1, "age": "x"}', "number")]


def test_keys_come_from_the_first_block_without_columns():
    lines = [json.dumps({"label": 1, "a": "x"}), json.dumps({"label": 0, "b": 3, "a": "y"})]
    p = make_parser("jsonl", {})
    batch = p.parse([ln.encode() for ln in lines])
    assert list(batch.sparse) == ["a", "b"] and batch.sparse["b"].offsets.tolist() == [0, 0, 1]
    later = p.parse_buffer(b'{"label": 1, "b": 4, "c": "ignored"}\n')
    assert list(later.sparse) == ["a", "b"] and p.parse_compiled(b'{"label": 1, "b": 4}\n') is not None


@pytest.mark.parametrize("transform", ["log1p", "none"])
def test_the_criteo_sample_as_json_lines_matches(transform):
    from tests.conftest import DATA
    import gzip
    path = DATA / "criteo_kaggle_head7625.tsv.gz"
    if not path.exists():
        pytest.skip("criteo sample not present")
    dense, sparse = [f"I{i}" for i in range(1, 14)], [f"C{i}" for i in range(1, 27)]
    rows = [r.split(b"\t") for r in gzip.open(path, "rb").read().split(b"\n")[:3000]]
    lines = []
    for r in rows:
        d = {"label": int(r[0]), **{k: int(v) for k, v in zip(dense, r[1:14]) if v}}
        d.update((k, v.decode()) for k, v in zip(sparse, r[14:]) if v)
        lines.append(json.dumps(d).encode())
    options = {"numeric": dense, "columns": sparse, "numeric_transform": transform}
    for i in range(0, len(lines), 1000):
        _both(b"\n".join(lines[i:i + 1000]) + b"\n", options)


def test_a_region_read_in_place_parses_as_its_own_copy():
    piece = b"\n".join(GOOD) + b"\n"
    head = b'{"label": 0, "user": "h"}\n'
    p = make_parser("jsonl", OPTIONS)
    alone = p.parse_buffer(piece)
    for after in (b"", b'{"l', b'{"label": 1, "user": "zzzzzzzzzzzzzzzzz"}'):
        got = p.parse_batches(head + piece + after, [0, 4], len(head), len(head) + len(piece))
        assert_batches_equal(got[0], alone)


def test_keys_in_any_order_left_out_or_unknown_and_strings_of_every_length():
    """The kernel's ways: a key among the next ones of the plan by its first word, else by its
    hash (shuffled lines, more than AHEAD keys left out, unknown keys, keys that share their
    first 8 bytes or are a prefix of another), strings of 0 to 39 bytes (across the word size
    and the start-state table's end) with some UTF-8, integers of every sign and size, compact
    and spaced separators: the same batch as json.loads, all on the compiled path."""
    from streamtrain.readers.jsonl_kernel import AHEAD, SHORT
    rng = np.random.default_rng(7)
    cat = [f"c{i}" for i in range(2 * AHEAD)] + ["long_key_one", "long_key_two", "long_key_three"]
    num = ["n1", "n10", "n2"]
    keys = [*num, *cat, "unknown", "long_key_on", "c1x"]
    lines = [b'{"label":1,"n1":-0,"n2":123456789012345,"n10":-7,"c0":""}']
    for r in range(400):
        items = [("label", int(rng.integers(0, 2)))]
        for k in keys:
            if rng.random() < (0.05 if r % 4 == 0 else 0.7):
                if k in num:
                    items.append((k, int(rng.integers(-10 ** 9, 10 ** 9)) // 10 ** int(rng.integers(0, 9))))
                else:
                    text = "".join(rng.choice(list("abcxyz09 é"), int(rng.integers(0, SHORT + 8))))
                    items.append((k, text))
        if r % 3 == 0:
            rng.shuffle(items)
        sep = (",", ":") if r % 2 else (", ", ": ")
        lines.append(json.dumps(dict(items), separators=sep, ensure_ascii=False).encode())
    options = {"numeric": num, "columns": cat, "field_length": 64}
    batch, m = _both(b"\n".join(lines) + b"\n", options)
    assert batch.size == len(lines) and m.total == 0
    assert np.signbit(batch.dense[0, 0]) and batch.dense[0, 0] == 0                  # -0 kept
    np.testing.assert_allclose(batch.dense[0, 1:], [-np.log1p(7), np.log1p(123456789012345)], rtol=1e-6)
