"""``Parsed`` (no broker): a batch the format's compiled pass takes whole is parsed there, from
the segments joined once, and gives exactly what the ``Chunk`` path gives — rows, timestamps
and sources — at one and at several lines a message, over several partitions and topics; a
batch with a bad or blank line goes through the ``Chunk`` path, which marks it."""
from __future__ import annotations

import random

import numpy as np
import pytest

from streamtrain.readers.formats import make_parser
from streamtrain.readers.kafka.batching import Parsed
from streamtrain.readers.kafka.segment import Segment


def _criteo_line(rng: random.Random) -> bytes:
    dense = [str(rng.randint(-5, 5000)) if rng.random() > 0.2 else "" for _ in range(13)]
    cats = [f"{rng.getrandbits(32):08x}" if rng.random() > 0.1 else "" for _ in range(26)]
    return "\t".join([str(rng.randint(0, 1)), *dense, *cats]).encode()


class _ChunkOnly:
    """The parser without its compiled pass: ``Parsed``'s reference path."""

    def __init__(self, parser):
        self.parser = parser

    def parse_compiled(self, *args, **kw):
        return None

    def parse_chunk(self, chunk):
        return self.parser.parse_chunk(chunk)


def _segments(lines, lines_per_message, parts=(("a", 0), ("a", 1), ("b", 0))):
    out, per = [], len(lines) // len(parts)
    for i, (topic, part) in enumerate(parts):
        mine = lines[i * per:(i + 1) * per]
        values = [b"\n".join(mine[j:j + lines_per_message]) for j in range(0, len(mine), lines_per_message)]
        offsets = np.arange(len(values)) + 100 * i + 7
        out.append(Segment.from_values(topic, part, values, offsets, 1_700_000_000_000 + 10 * offsets + i))
    return out


def _same(a: Parsed, b: Parsed) -> None:
    ra, rb = a.rows(True), b.rows(True)
    assert a.batch.size == b.batch.size
    assert np.array_equal(a.batch.labels, b.batch.labels)
    assert np.array_equal(a.batch.dense, b.batch.dense)
    assert np.array_equal(a.batch.timestamps, b.batch.timestamps)
    assert a.batch.sparse.keys() == b.batch.sparse.keys()
    for name, field in a.batch.sparse.items():
        assert np.array_equal(field.ids, b.batch.sparse[name].ids)
        assert np.array_equal(field.offsets, b.batch.sparse[name].offsets)
    for x, y in zip(ra, rb, strict=True):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("lines_per_message", [1, 7, 100])
def test_the_compiled_pass_gives_what_the_chunk_path_gives(lines_per_message):
    rng = random.Random(lines_per_message)
    lines = [_criteo_line(rng) for _ in range(900)]
    parser = make_parser("criteo", {})
    fast = Parsed(parser, _segments(lines, lines_per_message))
    assert fast.chunk is None and not fast.has_bad and list(fast.bad_lines()) == []
    ref = Parsed(_ChunkOnly(parser), _segments(lines, lines_per_message))
    assert ref.chunk is not None
    _same(fast, ref)


def test_a_bad_line_takes_the_chunk_path_and_keeps_its_source():
    rng = random.Random(3)
    lines = [_criteo_line(rng) for _ in range(300)]
    lines[150] = b"oops"
    parser = make_parser("criteo", {})
    parsed = Parsed(parser, _segments(lines, 10))
    assert parsed.chunk is not None and parsed.has_bad
    assert parsed.batch.size == 299
    (line, reason, where), = parsed.bad_lines()
    assert (line, reason, where) == (b"oops", "field_count", ("a", 1, 7 + 100 + 5))
    _same(parsed, Parsed(_ChunkOnly(parser), _segments(lines, 10)))


def test_a_blank_line_is_no_row_either_way():
    lines = [b"1 3:1.5 7:2", b"0 1:1", b"", b"1 2:0.5"] * 30
    parser = make_parser("libsvm", {})
    parsed = Parsed(parser, _segments(lines, 4))
    assert parsed.batch.size == 90 and not parsed.has_bad
    _same(parsed, Parsed(_ChunkOnly(parser), _segments(lines, 4)))
