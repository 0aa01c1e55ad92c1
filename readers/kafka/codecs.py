"""A compressed v2 record batch's records, decompressed straight from the fetch's bytes.

kafka-python's ``DefaultRecordBatch._maybe_uncompress`` copies the compressed bytes
(``tobytes``), decompresses, then copies the result again (``bytearray``); its zstd decoder
reads through a stream reader. ``uncompress(batch)`` decompresses lz4 and zstd batches in one
call from a view of the fetch buffer and leaves the result where the library's would be, so
the compiled decode reads it next (lz4's a bytearray: ``fastpath.segment_of_batch`` then joins
the lines over it in place, as ``fetchdecode`` does over a fetch, with no fresh buffer). Anything else (gzip,
snappy, a missing codec package, bytes these calls do not read as exactly one frame) goes
through the library's own ``_maybe_uncompress``, as before.

A batch compressed with a codec whose package is not installed makes kafka-python raise
``UnsupportedCodecError`` from ``poll``; ``missing(err)`` is the error the reader stops with
instead (exit 2, naming the codec, where it was met and the install that adds it).
"""
from __future__ import annotations

import re

from streamtrain.errors import MissingPackageError

LZ4, ZSTD = 3, 4                       # a v2 batch's compression type (attributes & 0x07)
PACKAGES = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}   # the compression extra's


def _lz4(view):
    import lz4.frame

    out, used = lz4.frame.decompress(view, return_bytes_read=True, return_bytearray=True)
    return out if used == len(view) else None


def _zstd(view):
    import zstandard

    d = zstandard.ZstdDecompressor().decompressobj()    # (no frame content size needed)
    out = d.decompress(view)
    return out if d.eof and not d.unused_data else None


DECOMPRESS = {LZ4: _lz4, ZSTD: _zstd}


def uncompress(batch) -> None:
    """``batch._maybe_uncompress()``, without its copies for lz4 and zstd."""
    if not batch._decompressed:
        fn = DECOMPRESS.get(batch.compression_type)
        out = None
        if fn is not None:
            try:
                out = fn(memoryview(batch._buffer)[batch._pos:])
            except Exception:                  # (ImportError, a frame these do not read)
                out = None
        if out is not None:
            batch._buffer, batch._pos, batch._decompressed = out, 0, True
            return
    batch._maybe_uncompress()


def missing(err) -> MissingPackageError:
    """kafka-python's ``UnsupportedCodecError`` (its message names the codec; the fast path's
    adds the partition and offset) as the error the reader stops with."""
    text = str(err.args[0]) if err.args else str(err)
    found = re.search(r"for (\w+) compression", text)
    codec = found.group(1) if found else "a compression codec"
    package = PACKAGES.get(codec, codec)
    return MissingPackageError(
        f"kafka reader: {text}: the topic's record batches are {codec}-compressed and {package} is not "
        f"installed: pip install 'streamtrain[compression]' (lz4, zstandard, python-snappy). What was "
        f"trained before it is committed; the reader resumes there once it is installed")
