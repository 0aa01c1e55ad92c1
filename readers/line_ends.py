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
def _ends(arr):
    """One pass over the bytes: the output starts with room for lines of ~128 bytes and, when
    a block might not fit, doubles and the scan goes on where it stopped."""
    out = np.empty(len(arr) // 128 + _BLOCK, np.int64)
    k, i = _scan(arr, out, 0, 0)
    while i < len(arr):
        bigger = np.empty(2 * len(out), np.int64)
        bigger[:k] = out[:k]
        out = bigger
        k, i = _scan(arr, out, k, i)
    return out[:k]


@njit(nogil=True)
def _scan(arr, out, k, start):
    """From ``start`` (a multiple of ``_BLOCK``), blocks of ``_BLOCK`` bytes are counted first (a
    loop that vectorises) and only the few that hold a ``\n`` (lines are ~200 bytes) scanned
    byte by byte: a test and branch per byte costs several times the count. Stops where ``out``
    might not hold the next block's; returns (ends found, where it stopped)."""
    n = len(arr)
    full = n - n % _BLOCK
    for base in range(start, full, _BLOCK):
        if len(out) - k < _BLOCK:
            return k, base
        c = 0
        for j in range(_BLOCK):
            c += arr[base + j] == 10
        if c:
            for j in range(_BLOCK):
                if arr[base + j] == 10:
                    out[k] = base + j
                    k += 1
    if len(out) - k < _BLOCK:
        return k, max(start, full)
    for i in range(max(start, full), n):
        if arr[i] == 10:
            out[k] = i
            k += 1
    return k, n


def line_ends(arr: np.ndarray) -> np.ndarray:
    """Positions of the ``\\n`` bytes of a uint8 array (``np.flatnonzero(arr == 10)``)."""
    return _ends(arr)


def joined(parts: list) -> tuple[bytes, np.ndarray]:
    """Buffers, each with the positions of (some of) its ``\n`` bytes, as one buffer with those
    positions in it: the file reader's blocks and their line ends, a Kafka batch's segments and
    their message ends. One part is returned as it is."""
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return b"", np.zeros(0, np.int64)
    base = np.cumsum([0] + [len(buf) for buf, _ in parts[:-1]])
    return b"".join(buf for buf, _ in parts), np.concatenate([e + b for (_, e), b in zip(parts, base)])
