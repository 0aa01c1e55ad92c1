"""The CSV parse of a well-formed chunk as one compiled pass over its bytes (no GIL held).

``parse_clean`` splits each line at the delimiter, parses the label and the numeric columns
(``tokens.number_token``), hashes the categorical columns and splits and hashes the
multi-valued ones, line by line in one numba kernel, giving exactly what ``CsvParser``'s
vectorised path gives for the same bytes. It takes only chunks where nothing needs a decision:
every line has the header's field count, every number (label included) is one
``number_token`` reads, no field is longer than ``field_length``, there is no quote (``"``),
no blank line, no ``\\r`` other than a line's ``\\r\\n``, and bytes >= 0x80 only in a chunk
that is valid UTF-8. For anything else it answers ``None`` and the caller takes the vectorised
path, which marks and counts the bad lines as before.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit
from streamtrain.hashing import splitmix64

from .chunk import _ONES, any_high, below_or_equal, copied, first_byte, lines_and_high, load_word, multi_valued, utf8, views
from .ids import fold_word, hash_token, splitmix64_one, start_state
from .tokens import leading_digits, number_token

LABEL, NUMERIC, CATEGORICAL, MULTI, DROP = 0, 1, 2, 3, 4
_BELOW_35 = np.uint64(0x2323232323232323)
SHORT = 32          # token lengths whose fold start the kernel looks up (longer ones: computed)


@njit(nogil=True)
def _mv_capacity(arr, mv_sep, n):
    """Upper bound of the parts of each multi-valued column: lines + separator bytes."""
    cap = 0
    for k in range(len(mv_sep)):
        c = 0
        for b in arr:
            if b == mv_sep[k]:
                c += 1
        cap = max(cap, c + n)
    return cap


@njit(nogil=True)
def _parse(arr, words, delim, kinds, slots, n_num, seeds, states, mv_sep, mv_seeds, field_length, n):
    """Everything per field is written out here, not in a helper: a compiled call per field
    that takes the output arrays costs more than the field's parse. ``n`` < 0: not
    known yet (counted here, with the high-byte check)."""
    if n < 0:
        n, high = lines_and_high(arr)
    else:
        high = any_high(arr)
    n_fields = len(kinds)
    labels = np.zeros(n, np.float64)
    dense = np.zeros((n, n_num), np.float64)
    ids = np.empty((len(seeds), n), np.uint64)
    present = np.empty((len(seeds), n), np.bool_)
    cap = _mv_capacity(arr, mv_sep, n) if len(mv_sep) else 0
    mv_ids = np.empty((len(mv_sep), cap), np.uint64)
    mv_row = np.empty((len(mv_sep), cap), np.int64)
    mv_n = np.zeros(len(mv_sep), np.int64)
    out = (labels, dense, ids, present, mv_ids, mv_row, mv_n)
    last = len(words) - 1
    delims = _ONES * np.uint64(delim)
    pos = 0
    for row in range(n):
        if pos >= len(arr) or arr[pos] == 10:    # fewer lines than ``n``, or a blank line
            return False, high, out
        field = 0
        start = pos
        while True:
            hit = below_or_equal(load_word(arr, pos), _BELOW_35, delims)   # 8 bytes at a time
            if hit == 0:
                pos += 8
                continue
            pos += first_byte(hit)
            c = arr[pos]
            end = pos
            if c == 13 and pos + 1 < len(arr) and arr[pos + 1] == 10:
                pos += 1                         # '\r\n': the '\r' ends the text
                c = 10
            if c == delim or c == 10:
                length = end - start
                if length > field_length or field >= n_fields:
                    return False, high, out
                kind, slot = kinds[field], slots[field]
                if kind == CATEGORICAL:
                    x = states[slot, length] if length < SHORT else start_state(seeds[slot], length)
                    for k in range(start, end, 8):     # hash_token's fold, the words read in place
                        x = fold_word(x, load_word(arr, k), end - k)
                    ids[slot, row] = splitmix64_one(x)
                    present[slot, row] = length > 0
                elif kind == NUMERIC or kind == LABEL:
                    if length or kind == LABEL:  # a missing number is 0, a missing label is bad
                        nd, m = leading_digits(load_word(arr, start))  # up to 7 digits at once
                        if nd == length and 0 < length < 8:
                            v = float(m)
                        else:
                            ok, v = number_token(arr, start, length)
                            if not ok:
                                return False, high, out
                        if kind == LABEL:
                            labels[row] = v
                        else:
                            dense[row, slot] = v
                elif kind == MULTI:              # split at the separator; empty parts dropped
                    a = start
                    for p in range(start, end + 1):
                        if p == end or arr[p] == mv_sep[slot]:
                            if p > a:
                                mv_ids[slot, mv_n[slot]] = hash_token(words, last, a, p - a, mv_seeds[slot])
                                mv_row[slot, mv_n[slot]] = row
                                mv_n[slot] += 1
                            a = p + 1
                field += 1
                start = pos + 1
                pos += 1
                if c == 10:
                    break
            elif c == 34:                        # a quote: the vectorised path decides
                return False, high, out
            else:
                pos += 1
        if field != n_fields:
            return False, high, out
    return pos == len(arr), high, out


class CsvPlan:
    """What the kernel needs of a header: each column's kind and its slot in that kind."""

    def __init__(self, n_columns, label_idx, num_idx, cat_idx, cat_seeds, mv, mv_seeds, delimiter):
        self.kinds = np.full(n_columns, DROP, np.int64)
        self.slots = np.zeros(n_columns, np.int64)
        for kind, cols in ((NUMERIC, num_idx), (CATEGORICAL, cat_idx), (MULTI, [j for _, j, _ in mv])):
            for slot, j in enumerate(cols):
                self.kinds[j], self.slots[j] = kind, slot
        self.kinds[label_idx] = LABEL
        self.n_num = len(num_idx)
        self.seeds = np.asarray(cat_seeds, np.uint64)
        self.states = splitmix64(self.seeds[:, None] + np.arange(SHORT, dtype=np.uint64)[None, :])  # fold starts
        self.mv_sep = np.array([sep for _, _, sep in mv], np.uint8)
        self.mv_seeds = np.asarray(mv_seeds, np.uint64)
        self.delim = delimiter[0]


def parse_clean(buf, plan: CsvPlan, field_length: int, start: int = 0, end: int | None = None,
                lines: int = -1):
    """(labels f64[R], numeric f64[R, N], ids u64[C, R], present bool[C, R], [(ids, counts)]
    per multi-valued column) of a chunk of whole ``\\n``-ended lines ``buf[start:end]``, or
    None when some line needs the vectorised path (see the module docstring)."""
    buf, start, end, lines = copied(buf, start, end, lines)
    chunk = views(buf, start, end)
    if chunk is None:
        return None
    buf, start, end, arr, words = chunk
    ok, high, out = _parse(arr, words, plan.delim, plan.kinds, plan.slots, plan.n_num, plan.seeds,
                           plan.states, plan.mv_sep, plan.mv_seeds, field_length, lines)
    if not ok or (high and not utf8(buf, start, end)):
        return None
    labels, dense, ids, present, mv_ids, mv_row, mv_n = out
    return labels, dense, ids, present, multi_valued(mv_ids, mv_row, mv_n, len(labels))

