"""The JSON-lines kernel's fast ways against the json.loads path: a key met as the one that came
after the previous key last time (``JsonPlan.order``), compared as its ``"key":`` words, with the
plan's next keys and the hash behind it; integers read a word at a time; strings scanned and hashed
from the same words. Whatever the keys' order, lengths and offsets, the batches are those of the
json.loads path, and anything the kernel does not take goes there with the same counts."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain.readers import Malformed, make_parser
from streamtrain.readers.lines import Chunk
from tests.readers_helpers import assert_batches_equal

NUM, CAT = ["n1", "n2", "n3"], ["c1", "c2", "c3", "c4"]
OPTIONS = {"numeric": NUM, "columns": CAT, "field_length": 64}


def _same(parser, buf, compiled=True, options=OPTIONS):
    """``parser`` (which keeps what it learnt) and a fresh json.loads path give the same batch
    and counts; ``compiled``: whether the kernel took the block."""
    slow_m = Malformed()
    slow = make_parser("jsonl", options, slow_m).parse_chunk(Chunk(buf))
    assert (parser.parse_compiled(buf) is not None) == compiled
    before = parser.malformed.snapshot()
    fast = parser.parse_buffer(buf)
    assert_batches_equal(fast, slow)
    after = parser.malformed.snapshot()
    assert {k: after[k] - before.get(k, 0) for k in after} == slow_m.snapshot()
    return fast


def _line(items, sep=(",", ":")):
    return json.dumps(dict(items), separators=sep, ensure_ascii=False).encode()


def _rows(rng, count, order, missing=0.0, extra=()):
    lines = []
    for _ in range(count):
        items = []
        for k in order:
            if k != "label" and rng.random() < missing:
                continue
            if k == "label":
                items.append((k, int(rng.integers(0, 2))))
            elif k in NUM:
                items.append((k, int(rng.integers(-10 ** 6, 10 ** 6))))
            else:
                items.append((k, "v%d" % rng.integers(0, 10 ** int(rng.integers(0, 12)))))
        for i, k in enumerate(extra):
            items.insert(min(i + 1, len(items)), (k, "x"))
        lines.append(_line(items))
    return lines


def test_the_order_is_learnt_and_a_change_of_order_is_followed():
    """A producer's fixed order unlike the plan's, then another order, keys left out, unknown
    keys: all on the compiled path, and the plan's order becomes the producer's."""
    rng = np.random.default_rng(1)
    p = make_parser("jsonl", OPTIONS)
    theirs = ["c3", "n2", "label", "c1", "n3", "c4", "n1", "c2"]
    lines = _rows(rng, 50, theirs)
    _same(p, b"\n".join(lines) + b"\n")
    keys = ["label", *NUM, *CAT]
    order = [keys.index(k) for k in theirs]
    plan = p.plan
    assert plan.order[len(keys)] == order[0]
    assert [plan.order[a] for a in order[:-1]] == order[1:]
    for chunk in (_rows(rng, 30, list(reversed(theirs))),                 # another order
                  _rows(rng, 30, theirs, missing=0.4),                    # keys left out
                  _rows(rng, 30, theirs, extra=("zz", "unknown_key")),    # keys not in the plan
                  _rows(rng, 5, theirs) + _rows(rng, 5, sorted(theirs)) + _rows(rng, 5, theirs)):
        _same(p, b"\n".join(chunk) + b"\n")


@pytest.mark.parametrize("sep", [(",", ":"), (", ", ": "), (" ,  ", " :\t")])
def test_white_space_anywhere_between_the_tokens(sep):
    rng = np.random.default_rng(2)
    p = make_parser("jsonl", OPTIONS)
    lines = [_line([("label", 1), ("n1", 5), ("c1", "a"), ("c2", "bb")], sep) for _ in range(3)]
    lines += [b' \t{ "label" :0 ,"c1":"x" , "n2":  -12 }\t\r', b'{"c2":"y",  "label":1}']
    _same(p, b"\n".join(lines + _rows(rng, 10, ["label", *NUM, *CAT])) + b"\n")


def test_keys_of_every_length_at_every_offset():
    """Keys of 0 to 20 bytes (their ``"key":`` in one, two or three words; keys that are a
    prefix of another), each starting at every offset of a word (white space before it)."""
    keys = ["", "a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh", "abcdefghijkl",
            "abcdefghijklm", "abcdefghijklmnopqrst", "é", "ké_y"]
    options = {"numeric": ["abc"], "columns": [k for k in keys if k != "abc"], "field_length": 64}
    p = make_parser("jsonl", options)
    lines = []
    for pad in range(9):
        items = ", ".join(" " * ((pad + i) % 9) + json.dumps(k, ensure_ascii=False) + ":"
                          + ("7" if k == "abc" else json.dumps(k + "v" * pad, ensure_ascii=False))
                          for i, k in enumerate(keys))
        lines.append(b'{"label": 1, ' + items.encode() + b"}")
        lines.append(_line([("label", 0)] + [(k, "w") for k in reversed(keys) if k != "abc"]))
    batch = _same(p, b"\n".join(lines) + b"\n", options=options)
    assert batch.size == len(lines) and all(batch.sparse[k].ids.size == len(lines) for k in keys if k != "abc")


def test_integers_of_every_length_sign_and_end():
    """0 to 17 digits (one word, the digit-by-digit way, past an exact double's), signs, leading
    zeros (not JSON), and every byte that may end one."""
    p = make_parser("jsonl", {"numeric": ["n"], "columns": ["c"]})
    good = []
    for digits in range(1, 16):
        for sign in ("", "-"):
            v = sign + "9876543210987654"[:digits].lstrip("0")
            for end in ("}", ",\"c\":\"x\"}", " }", ".5}", ".25}"):
                if digits + len(end) > 17:           # at most 15 digits in all
                    continue
                good.append(f'{{"label":1,"n":{v}{end}'.encode())
    good += [b'{"label":0,"n":0}', b'{"label":0,"n":-0}', b'{"label":0,"n":0.0}', b'{"label":1,"n":10}']
    _same(p, b"\n".join(good) + b"\n", options={"numeric": ["n"], "columns": ["c"]})
    for bad in (b'{"label":1,"n":01}', b'{"label":1,"n":-}', b'{"label":1,"n":1e3}',
                b'{"label":1,"n":12345678901234567}', b'{"label":1,"n":1.}', b'{"label":01}'):
        _same(p, b"\n".join([good[0], bad, good[1]]) + b"\n", compiled=False,
              options={"numeric": ["n"], "columns": ["c"]})


def test_strings_of_every_length_and_high_bytes_at_every_place():
    """Strings of 0 to 40 bytes (the scan's first two words kept for the hash, then the loop),
    UTF-8 at every position; a byte that is not UTF-8 anywhere (value, key met by its hash,
    unknown key's value, a list's element) sends the block to json.loads, which counts it."""
    options = {"columns": ["c"], "multivalue": ["m"], "field_length": 64}
    p = make_parser("jsonl", options)
    lines = [_line([("label", 1), ("c", "x" * n), ("m", ["y" * n])]) for n in range(41)]
    lines += [_line([("label", 0), ("c", "a" * i + "é" + "b" * (17 - i))]) for i in range(18)]
    _same(p, b"\n".join(lines) + b"\n", options=options)
    for bad in (b'{"label":1,"c":"ab\xffcd"}', b'{"label":1,"c":"abcdefgh\xff"}', b'{"label":1,"k\xff":"a"}',
                b'{"label":1,"other":"a\xff"}', b'{"label":1,"m":["a","\xff"]}', b'{"label":1,"c":"\xc3"}'):
        _same(p, b"\n".join([lines[3], bad, lines[4]]) + b"\n", compiled=False, options=options)


@pytest.mark.parametrize("line,compiled", [
    (b'{"label":1,"c\\u0031":"a"}', False),            # an escaped key that is the expected one
    (b'{"label":1,"c1":"a\\"b"}', False),              # an escaped value
    (b'{"label":1,"c1":"a","c1":"b"}', False),         # the expected key twice
    (b'{"label":1,"zz":{"c1":"a"},"c1":"b"}', False),  # a nested value under an unknown key
    (b'{"label":1,"c1":["a"]}', False),                # a list where a string is expected
    (b'{"label":1,"c1":{"x":1}}', False),              # nested
    (b'{"label":1,"c1":"a"', False),                   # cut short
    (b'{"label":1,"c1" "a"}', False),                  # no colon
    (b'{"label":1,"c1":"a",}', False),
    (b'{"c1":"a"}', False),                            # no label
    (b'{"label":1,"c1":true,"c2":null,"c3":12.50,"c4":false}', True),
    (b'{"label":1,"n1":null,"n2":-3.25,"n3":0}', True),
])
def test_a_line_unlike_the_learnt_order_gives_the_json_path_result(line, compiled):
    rng = np.random.default_rng(3)
    p = make_parser("jsonl", OPTIONS)
    lines = _rows(rng, 20, ["label", *NUM, *CAT])
    _same(p, b"\n".join(lines) + b"\n")
    _same(p, b"\n".join(lines[:5] + [line] + lines[5:]) + b"\n", compiled=compiled)


def test_dropped_keys_are_read_past_and_more_than_64_keys():
    keys = [f"k{i}" for i in range(70)]
    options = {"columns": keys, "drop": ["ts"], "field_length": 64}
    p = make_parser("jsonl", options)
    lines = [_line([("label", 1), ("ts", 123)] + [(k, f"{k}{r}") for k in keys[r % 3:]]) for r in range(30)]
    batch = _same(p, b"\n".join(lines) + b"\n", options=options)
    assert "ts" not in batch.sparse and batch.sparse["k69"].ids.size == 30
    twice = _line([("label", 1)] + [(k, "a") for k in keys]).replace(b"}", b',"k66":"b"}')
    _same(p, b"\n".join(lines[:3] + [twice]) + b"\n", compiled=False, options=options)


def test_a_region_read_in_place_with_any_bytes_after_it():
    """The chunk read where it lies in a bigger buffer, any number of bytes after it (the words
    read past a line's end)."""
    rng = np.random.default_rng(4)
    p = make_parser("jsonl", OPTIONS)
    lines = _rows(rng, 12, ["label", *NUM, *CAT], missing=0.3)
    piece = b"\n".join(lines) + b"\n"
    alone = make_parser("jsonl", OPTIONS).parse_chunk(Chunk(piece))
    for before in range(9):
        for after in range(18):
            buf = b"{" * before + piece + b'"\xff\\'[:3] * after
            got = p.parse_batches(buf, [0, len(lines)], before, before + len(piece))
            assert_batches_equal(got[0], alone)


def test_boolean_and_numeric_string_labels_and_numbers_read_as_their_numbers():
    """An export writes "clicked": true or "clicked": "1", "n1": "3.5": every such line was
    skipped as a label (or number) error; they read as the numbers they hold."""
    plain = [{"label": 1, "n1": 3.5, "c1": "a"}, {"label": 0, "n1": 2, "c1": "b"}]
    written = [{"label": True, "n1": "3.5", "c1": "a"}, {"label": "0", "n1": "2", "c1": "b"}]
    batches = []
    for rows in (plain, written):
        m = Malformed()
        batches.append(make_parser("jsonl", OPTIONS, m).parse_buffer(b"\n".join(_line(r.items()) for r in rows) + b"\n"))
        assert m.total == 0
    assert_batches_equal(*batches)
    m = Malformed()
    make_parser("jsonl", OPTIONS, m).parse_buffer(b'{"label": "yes", "c1": "a"}\n{"label": 1, "n1": "x"}\n')
    assert m.snapshot()["label"] == 1 and m.snapshot()["number"] == 1
