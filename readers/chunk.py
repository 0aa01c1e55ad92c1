"""A chunk of whole ``\\n``-ended lines as the compiled parsers read it (criteo, csv, libsvm,
jsonl kernels): its bytes, and an unaligned 8-byte word at every offset, which the hashing reads
past a token's end (masked off). The chunk is copied with zero padding only when the buffer has
no 8 bytes after it: the file reader hands over a piece of its joined blocks as it is (no copy
held under the GIL)."""
from __future__ import annotations

import numpy as np


def views(buf, start: int = 0, end: int | None = None):
    """(buf, start, end, bytes u8[end - start], words <u8[...]) of ``buf[start:end]`` (``buf``
    and the bounds re-based when it was copied), or None when the chunk is empty or does not
    end with ``\\n``."""
    end = len(buf) if end is None else end
    if end <= start or buf[end - 1] != 10:
        return None
    if len(buf) - end < 8:
        buf, start, end = bytes(buf[start:end]) + bytes(16), 0, end - start
    arr = np.frombuffer(buf, dtype=np.uint8)[start:end]
    words = np.ndarray((len(buf) - start - 7,), dtype="<u8", buffer=buf, offset=start, strides=(1,))
    return buf, start, end, arr, words


def utf8(buf, start: int, end: int) -> bool:
    """Whether ``buf[start:end]`` is valid UTF-8 (checked only when a kernel saw a high byte)."""
    try:
        str(memoryview(buf)[start:end], "utf-8")
        return True
    except UnicodeDecodeError:
        return False


def multi_valued(mv_ids, mv_row, mv_n, rows: int) -> list:
    """A kernel's multi-valued columns as [(ids, counts per row)]: column ``k`` holds
    ``mv_n[k]`` ids, ``mv_row[k]`` the row of each."""
    return [(mv_ids[k, :mv_n[k]], np.bincount(mv_row[k, :mv_n[k]], minlength=rows)) for k in range(len(mv_n))]
