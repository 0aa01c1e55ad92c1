"""The file reader parses on a background thread (``parse_ahead``): same batches, same order,
same offsets and malformed counts as parsing inline; closing it early stops the thread; a
parse error still reaches the consumer."""
import gzip
import threading

import pytest

from streamtrain.errors import ReaderError
from streamtrain.readers import Malformed, file_reader

from streamtrain.readers.batching import concat_batches

from .readers_helpers import assert_batches_equal, data_file


def _read(path, fmt, ahead, size=300, **kw):
    bad = Malformed()
    out = list(file_reader(path, fmt, None, size, bad, parse_ahead=ahead, **kw)())
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


def _sample_with_bad_lines(tmp_path):
    src = data_file("criteo_kaggle_head7625.tsv.gz")
    lines = gzip.open(src, "rb").read().splitlines(keepends=True)
    lines[10] = b"x\tnot-a-label\n"
    lines[5000] = b"1\t2\n"
    path = tmp_path / "c.tsv"
    path.write_bytes(b"".join(lines))
    return path


@pytest.mark.parametrize("size", [1024, 2048, 8192])
@pytest.mark.parametrize("kw", [{}, {"loop": True, "limit": 20_000}, {"block_bytes": 4096}])
def test_large_batches_threaded_and_inline_alike(size, kw, tmp_path):
    """Batches of a piece of their own (>= 1024 lines, blocks gathered until they hold one)."""
    path = _sample_with_bad_lines(tmp_path)
    inline, bad_inline = _read(path, "criteo", 0, size, **kw)
    threaded, bad_threaded = _read(path, "criteo", 2, size, **kw)
    assert [b.size for b in threaded] == [b.size for b in inline]
    assert all(b.size == size for b in inline[:-1]) and inline[-1].size
    for a, b in zip(inline, threaded):
        assert_batches_equal(a, b)
        assert a.offsets == b.offsets
    assert bad_threaded == bad_inline and bad_inline["field_count"] >= 2


@pytest.mark.parametrize("size", [300, 2048, 8192])
def test_batch_size_only_cuts_the_same_rows(size, tmp_path):
    """However the file is cut into pieces and batches, the rows and their order are the same."""
    path = _sample_with_bad_lines(tmp_path)
    ref, _ = _read(path, "criteo", 0, 1, block_bytes=4096, prefetch=0)
    got, _ = _read(path, "criteo", 2, size)
    assert_batches_equal(concat_batches(got), concat_batches(ref))
    assert got[-1].offsets == ref[-1].offsets == {"file": str(path), "line": 7625}


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
