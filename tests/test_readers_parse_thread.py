"""The file reader parses on a background thread (``parse_ahead``): same batches, same order,
same offsets and malformed counts as parsing inline; closing it early stops the thread; a
parse error still reaches the consumer."""
import gzip
import threading

import pytest

from streamtrain.errors import ReaderError
from streamtrain.readers import Malformed, file_reader

from .readers_helpers import assert_batches_equal, data_file


def _read(path, fmt, ahead, **kw):
    bad = Malformed()
    out = list(file_reader(path, fmt, None, 300, bad, parse_ahead=ahead, **kw)())
    return out, dict(bad.counts)


def _parse_threads():
    return [t for t in threading.enumerate() if t.name == "streamtrain-buffered" and t.is_alive()]


@pytest.mark.parametrize("kw", [{}, {"loop": True, "limit": 20_000}])
def test_threaded_parse_gives_the_inline_batches(kw, tmp_path):
    src = data_file("criteo_kaggle_head7625.tsv.gz")
    lines = gzip.open(src, "rb").read().splitlines(keepends=True)
    lines[10] = b"x\tnot-a-label\n"                         # a malformed line is counted either way
    path = tmp_path / "c.tsv"
    path.write_bytes(b"".join(lines))
    inline, bad_inline = _read(path, "criteo", 0, **kw)
    threaded, bad_threaded = _read(path, "criteo", 2, **kw)
    assert [b.size for b in threaded] == [b.size for b in inline] and len(inline) > 10
    for a, b in zip(inline, threaded):
        assert_batches_equal(a, b)
        assert a.offsets == b.offsets
    assert bad_threaded == bad_inline and bad_inline["field_count"] == (3 if kw else 1)   # once a pass


def test_closing_early_stops_the_parse_thread():
    src = data_file("criteo_kaggle_head7625.tsv.gz")
    before = len(_parse_threads())
    it = iter(file_reader(src, "criteo", None, 100, Malformed(), loop=True, parse_ahead=2)())
    next(it), next(it)
    assert len(_parse_threads()) > before
    it.close()                                            # what a job's stop does
    assert len(_parse_threads()) == before


def test_an_error_in_the_parse_thread_reaches_the_consumer(tmp_path):
    path = tmp_path / "broken.tsv.gz"
    path.write_bytes(gzip.compress(b"1\t2\n" * 1000)[:-20] + b"garbage-not-gzip-tail")
    with pytest.raises(ReaderError, match="corrupt gzip"):
        list(file_reader(path, "criteo", None, 100, Malformed(), parse_ahead=2)())
