"""The libsvm parse of a well-formed chunk as one compiled pass over its bytes (no GIL held).

``parse_clean`` splits each line at spaces and tabs, parses the label, and for every
``idx:val`` token hashes ``idx`` and parses ``val`` (``tokens.number_token``; ``qid:val``, a query id,
is parsed and left out), line by line in
one numba kernel, giving exactly what ``LibsvmParser``'s vectorised path gives for the same
bytes. It takes only chunks where nothing needs a decision: every line has a label that
``number_token`` reads and tokens with one ``:`` after a non-empty index and before such a
number, no token longer than ``field_length``, no blank or all-space line, no ``\\r`` other
than a line's ``\\r\\n``, and bytes >= 0x80 only in a chunk that is valid UTF-8. For anything
else it answers ``None`` and the caller takes the vectorised path, which marks and counts the
bad lines as before.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit

from .chunk import any_high, below_or_equal, copied, first_byte, lines_and_high, load_word, utf8, views
from .csv_kernel import SHORT
from .ids import fold_word, splitmix64_one, start_state
from .tokens import leading_digits, number_token

_BELOW_33 = np.uint64(0x2121212121212121)
_COLONS = np.uint64(0x3a3a3a3a3a3a3a3a)


@njit(nogil=True)
def _parse(arr, words, seed, field_length, n):
    """One pass over the bytes; each token's ``:`` is noted as the scan meets it. Everything
    per token is written out here, not in a helper (see ``csv_kernel._parse``). ``n`` < 0:
    not known yet (counted here, with the high-byte check)."""
    if n < 0:
        n, high = lines_and_high(arr)
    else:
        high = any_high(arr)
    cap = len(arr) // 4 + 1                      # a feature takes 4 bytes at least ("i:v ")
    labels = np.zeros(n, np.float64)
    offsets = np.zeros(n + 1, np.int64)
    ids = np.empty(cap, np.uint64)
    vals = np.empty(cap, np.float32)              # numpy's float64 → float32 rounding
    k = 0
    states = np.empty(SHORT, np.uint64)         # the fold's start by index length
    for j in range(SHORT):
        states[j] = start_state(seed, j)
    pos = 0
    for row in range(n):
        if pos >= len(arr):
            return False, high, labels, offsets, ids[:k], vals[:k]
        tokens = 0
        start = pos
        colon, colons = -1, 0
        while True:
            hit = below_or_equal(load_word(arr, pos), _BELOW_33, _COLONS)   # 8 bytes at a time
            if hit == 0:
                pos += 8
                continue
            pos += first_byte(hit)
            c = arr[pos]
            end = pos
            if c == 13 and pos + 1 < len(arr) and arr[pos + 1] == 10:
                pos += 1                         # '\r\n': the '\r' ends the text
                c = 10
            if c == 32 or c == 9 or c == 10:
                length = end - start
                if length > field_length:
                    return False, high, labels, offsets, ids[:k], vals[:k]
                if length:
                    if tokens == 0:
                        ok, v = number_token(arr, start, length)
                        if not ok:
                            return False, high, labels, offsets, ids[:k], vals[:k]
                        labels[row] = v
                    else:                        # idx:val, one ':' after a non-empty idx
                        if colons != 1 or colon <= start:
                            return False, high, labels, offsets, ids[:k], vals[:k]
                        n_val = end - colon - 1
                        nd, m = leading_digits(load_word(arr, colon + 1))   # up to 7 digits at once
                        if nd == n_val and 0 < n_val < 8:
                            v = float(m)
                        else:
                            ok, v = number_token(arr, colon + 1, n_val)
                            if not ok:
                                return False, high, labels, offsets, ids[:k], vals[:k]
                        n_idx = colon - start     # hash_token's fold, the words read in place
                        if n_idx != 3 or arr[start] != 113 or arr[start + 1] != 105 or arr[start + 2] != 100:
                            vals[k] = v           # (not svmlight's "qid": a query id, no feature)
                            x = states[n_idx] if n_idx < SHORT else start_state(seed, n_idx)
                            for q in range(start, colon, 8):
                                x = fold_word(x, load_word(arr, q), colon - q)
                            ids[k] = splitmix64_one(x)
                            k += 1
                    tokens += 1
                start = pos + 1
                colon, colons = -1, 0
                pos += 1
                if c == 10:
                    break
            else:
                if c == 58:
                    colon = pos
                    colons += 1
                pos += 1
        if tokens == 0:                          # a blank or all-space line
            return False, high, labels, offsets, ids[:k], vals[:k]
        offsets[row + 1] = k
    return pos == len(arr), high, labels, offsets, ids[:k], vals[:k]


def parse_clean(buf, seed, field_length: int, start: int = 0, end: int | None = None,
                lines: int = -1):
    """(labels f64[R], offsets i64[R + 1], ids u64[K], values f32[K]) of a chunk of whole
    ``\\n``-ended lines ``buf[start:end]``, or None when some line needs the vectorised path."""
    buf, start, end, lines = copied(buf, start, end, lines)
    chunk = views(buf, start, end)
    if chunk is None:
        return None
    buf, start, end, arr, words = chunk
    ok, high, labels, offsets, ids, vals = _parse(arr, words, np.uint64(seed), field_length, lines)
    if not ok or (high and not utf8(buf, start, end)):
        return None
    return labels, offsets, ids, vals
