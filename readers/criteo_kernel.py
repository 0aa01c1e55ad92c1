"""The Criteo parse of a well-formed chunk as one compiled pass over its bytes (no GIL held).

``parse_clean(buf, seeds, field_length)`` splits, checks, parses the label and ``I1..I13`` and
hashes ``C1..C26`` line by line in one numba kernel, and gives exactly what the vectorised path
(``lines.split`` + ``numbers.parse_spans`` + ``ids.hash_spans``) gives for the same bytes. It
only takes chunks where nothing needs a decision: every line has 40 fields, every number is
``[+-]?[0-9]{1,7}`` style (at most 8 bytes with its sign), the label is such a number, no
field is longer than ``field_length``, and there is no ``\\r``, no blank line and no byte
>= 0x80. For anything else it answers ``None`` and the caller takes the vectorised path,
which marks and counts the bad lines as before.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit

from .chunk import _HIGH, _SPACES, first_byte, load_word, views
from .ids import fold_word, splitmix64_one, start_state

N_DENSE, N_SPARSE = 13, 26
N_FIELDS = 1 + N_DENSE + N_SPARSE
SHORT = 32          # token lengths whose fold start the kernel looks up (longer ones: computed)


@njit(nogil=True)
def _int_token(arr, s, n):
    """(ok, value) of ``arr[s:s+n]`` as ``[+-]?[0-9]+`` of at most 8 bytes (numbers._swar_int's rule)."""
    if n < 1 or n > 8:
        return False, 0.0
    neg = arr[s] == 45
    k = 1 if (neg or arr[s] == 43) else 0
    if k == n:
        return False, 0.0
    v = 0
    for p in range(s + k, s + n):
        d = arr[p] - 48
        if d < 0 or d > 9:
            return False, 0.0
        v = v * 10 + d
    x = float(v)
    return True, (-x if neg else x)


@njit(nogil=True, inline="always")
def _field_end(arr, pos):
    """The position of the first ``\\t`` or ``\\n`` from ``pos``, or -1 when a ``\\r`` or a byte
    >= 0x80 comes first: eight bytes at a time (``load_word``; the chunk ends with ``\\n`` and
    ``views`` leaves 8 bytes after it), stopping only at a control byte or a high one (the
    lowest marked byte is exact); any other control byte is a plain byte of the token."""
    while True:
        w = load_word(arr, pos)
        hit = (((w - _SPACES) & ~w) | w) & _HIGH
        if hit == 0:
            pos += 8
            continue
        pos += first_byte(hit)
        c = arr[pos]
        if c == 9 or c == 10:
            return pos
        if c == 13 or c >= 128:
            return -1
        pos += 1


@njit(nogil=True)
def _parse(arr, seeds, field_length, n):
    if n < 0:                                   # the caller does not know the line count
        n = 0
        for c in arr:
            if c == 10:
                n += 1
    labels = np.empty(n, np.float64)
    dense = np.zeros((n, N_DENSE), np.float64)
    ids = np.empty((N_SPARSE, n), np.uint64)
    present = np.empty((N_SPARSE, n), np.bool_)
    states = np.empty((N_SPARSE, SHORT), np.uint64)    # each field's fold start by token length
    for j in range(N_SPARSE):
        for k in range(SHORT):
            states[j, k] = start_state(seeds[j], k)
    pos = 0
    for row in range(n):
        if pos >= len(arr):                     # fewer lines than ``n``: not ours to guess
            return False, labels, dense, ids, present
        field = 0
        while True:
            start = pos
            pos = _field_end(arr, pos)
            if pos < 0:                         # a '\r' or a byte >= 0x80
                return False, labels, dense, ids, present
            c = arr[pos]
            length = pos - start
            if length > field_length or field >= N_FIELDS:
                return False, labels, dense, ids, present
            if field <= N_DENSE:
                if length or field == 0:
                    ok, v = _int_token(arr, start, length)
                    if not ok:
                        return False, labels, dense, ids, present
                    if field == 0:
                        labels[row] = v
                    else:
                        dense[row, field - 1] = v
            else:
                j = field - 1 - N_DENSE
                x = states[j, length] if length < SHORT else start_state(seeds[j], length)
                for k in range(start, pos, 8):     # hash_token's fold, the words read in place
                    x = fold_word(x, load_word(arr, k), pos - k)
                ids[j, row] = splitmix64_one(x)
                present[j, row] = length > 0
            field += 1
            pos += 1
            if c == 10:
                break
        if field != N_FIELDS:
            return False, labels, dense, ids, present
    return pos == len(arr), labels, dense, ids, present


def parse_clean(buf: bytes, seeds: np.ndarray, field_length: int, start: int = 0,
                end: int | None = None, lines: int = -1):
    """(labels f64[R], dense values f64[R, 13], ids u64[26, R], present bool[26, R]) of a
    chunk of whole ``\n``-ended lines, ``buf[start:end]``, or None when some line needs the
    vectorised path. ``lines``, when the caller knows it (the file reader found the line ends),
    is how many ``\n`` the chunk holds, so it is not counted again. The hashing reads 8-byte
    words past a token's end (masked off), so the chunk is copied with zero padding only when
    ``buf`` has no 8 bytes after it: the file reader hands over a piece of its joined blocks as
    it is (no copy held under the GIL)."""
    chunk = views(buf, start, end)
    if chunk is None:
        return None
    buf, start, end, arr, _ = chunk
    ok, labels, dense, ids, present = _parse(arr, seeds, field_length, lines)
    return (labels, dense, ids, present) if ok else None
