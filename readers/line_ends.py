"""Finding the line ends of a block in compiled code that does not hold the GIL.

The file reader's parse thread scans every block for ``\\n`` to cut it into batches; done with
numpy (a comparison and ``flatnonzero``) most of that scan holds the GIL the training thread is
waiting for at the same moment.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit

_BLOCK = 64


@njit(nogil=True)
def _count(arr):
    """Branch-free: a sum of comparisons, which vectorises (a test and branch per byte costs
    several times as much)."""
    n = 0
    for i in range(len(arr)):
        n += arr[i] == 10
    return n


@njit(nogil=True)
def _ends(arr):
    """Blocks of ``_BLOCK`` bytes are counted first (a loop that vectorises) and only the few
    that hold a ``\n`` (lines are ~200 bytes) scanned byte by byte: a test and branch per byte
    costs several times the count."""
    out = np.empty(_count(arr), np.int64)
    k = 0
    n = len(arr)
    full = n - n % _BLOCK
    for base in range(0, full, _BLOCK):
        c = 0
        for j in range(_BLOCK):
            c += arr[base + j] == 10
        if c:
            for j in range(_BLOCK):
                if arr[base + j] == 10:
                    out[k] = base + j
                    k += 1
    for i in range(full, n):
        if arr[i] == 10:
            out[k] = i
            k += 1
    return out


def count_lines(buf: bytes) -> int:
    """The number of ``\\n`` in ``buf``."""
    return int(_count(np.frombuffer(buf, dtype=np.uint8))) if buf else 0


def line_ends(arr: np.ndarray) -> np.ndarray:
    """Positions of the ``\\n`` bytes of a uint8 array (``np.flatnonzero(arr == 10)``)."""
    return _ends(arr)
