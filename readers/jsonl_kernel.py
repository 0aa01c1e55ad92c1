"""The JSON-lines parse of a simple chunk as one compiled pass over its bytes (no GIL held).

``parse_clean`` reads each line as a flat JSON object: a key compared by its first 8 bytes
(one word) and its closing quote with the ``AHEAD`` keys of the plan after the previous one
(keys mostly come in the same order, some left out), else matched by a hash of its bytes; the
label and numeric keys' numbers parsed (an integer as its digits are scanned, others by
``tokens.number_token``), categorical strings, numbers (as written) and booleans hashed (a
string's end found 8 bytes at a time, its hash's start state looked up per length), a
multi-valued key's list split, giving exactly what ``JsonlParser``'s ``json.loads`` path
gives. It takes only chunks where nothing needs a decision: every line one
object of strings without escapes or control bytes, JSON numbers (no exponent where a number
is read), true / false / null, and lists only under multi-valued keys; no duplicate known key,
the label present, no categorical value longer than ``field_length``, no blank line, bytes
>= 0x80 only in valid UTF-8. For anything else it answers ``None`` and the caller takes the
``json.loads`` path, which marks and counts the bad lines.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit
from streamtrain.hashing import splitmix64

from .chunk import byte_at, first_byte, lines_and_high, load_word, multi_valued, specials, utf8, views
from .csv_kernel import _high
from .ids import field_seed, fold_word, hash_token, hash_values, splitmix64_one, start_state
from .tokens import MAX_DIGITS, number_token

LABEL, NUMERIC, CATEGORICAL, MULTI = 0, 1, 2, 3
SHORT = 32                                       # values this long or longer: start state computed
AHEAD = 8                                        # keys tried in order before the hash
KEY_FIELD = "\x00jsonl-key"                      # the hash seed of key bytes (never a field name)


@njit(nogil=True, inline="always")
def _ws(arr, p):
    """The first position at or after ``p`` that is not a space, tab or '\\r' (a '\\n' ends)."""
    while arr[p] == 32 or arr[p] == 9 or arr[p] == 13:
        p += 1
    return p


@njit(nogil=True, inline="always")
def _string_end(arr, words, p):
    """``arr[p]`` is after an opening quote: the position of the closing one, or -1 (an escape,
    a control byte or the line's end), eight bytes at a time (``words[p]`` is ``arr[p:p+8]`` as
    one little-endian word)."""
    while True:
        hit = specials(words[p])
        if hit:
            e = p + first_byte(hit)
            return e if arr[e] == 34 else -1
        p += 8


@njit(nogil=True, inline="always")
def _digits(arr, p):
    while 48 <= arr[p] <= 57:
        p += 1
    return p


@njit(nogil=True, inline="always")
def _number_end(arr, p):
    """The end of the JSON number starting at ``p`` (``-?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?``), or -1."""
    if arr[p] == 45:
        p += 1
    if arr[p] == 48:
        p += 1
    elif 49 <= arr[p] <= 57:
        p = _digits(arr, p)
    else:
        return -1
    if arr[p] == 46:
        q = _digits(arr, p + 1)
        if q == p + 1:
            return -1
        p = q
    if arr[p] == 101 or arr[p] == 69:
        p += 1
        if arr[p] == 43 or arr[p] == 45:
            p += 1
        q = _digits(arr, p)
        if q == p:
            return -1
        p = q
    return p


@njit(nogil=True, inline="always")
def _literal_end(arr, p):
    """The end of ``true`` / ``false`` / ``null`` at ``p``, or -1; null is told by its 'n'."""
    if arr[p] == 116 and arr[p + 1] == 114 and arr[p + 2] == 117 and arr[p + 3] == 101:
        return p + 4
    if arr[p] == 110 and arr[p + 1] == 117 and arr[p + 2] == 108 and arr[p + 3] == 108:
        return p + 4
    if (arr[p] == 102 and arr[p + 1] == 97 and arr[p + 2] == 108 and arr[p + 3] == 115
            and arr[p + 4] == 101):
        return p + 5
    return -1


@njit(nogil=True, inline="always")
def _value_end(arr, words, p):
    """(start, end) of the scalar value at ``p`` (a string's without its quotes), or end -1."""
    c = arr[p]
    if c == 34:
        return p + 1, _string_end(arr, words, p + 1)
    if c == 45 or 48 <= c <= 57:
        return p, _number_end(arr, p)
    return p, _literal_end(arr, p)


@njit(nogil=True, inline="always")
def _number_value(arr, words, p, label):
    """(ok, end, value) of the label's or a numeric key's value at ``p``: a number as
    ``number_token`` reads it, or null (0; not for the label)."""
    s, e = _value_end(arr, words, p)
    c = arr[p]
    if e < 0 or c == 34 or c == 116 or c == 102 or (c == 110 and label):
        return False, e, 0.0
    if c == 110:
        return True, e, 0.0
    ok, v = number_token(arr, s, e - s)
    return ok, e, v


@njit(nogil=True, inline="always")
def _prefix(arr, s, key_bytes, start, n):
    """How many of the first ``n`` bytes of ``arr[s:]`` equal ``key_bytes[start:start+n]``."""
    i = 0
    while i < n and arr[s + i] == key_bytes[start + i]:
        i += 1
    return i


@njit(nogil=True, inline="always")
def _key_index(arr, words, last, s, n, guess, key_seed, key_hash, key_start, key_len, key_bytes):
    """The plan's index of the key ``arr[s:s+n]``, or -1 (not a key of the plan)."""
    h = hash_token(words, last, s, n, key_seed)
    k = guess if guess < len(key_hash) and key_hash[guess] == h else -1
    if k < 0:
        for j in range(len(key_hash)):
            if key_hash[j] == h:
                k = j
                break
    if k < 0 or key_len[k] != n:
        return -1
    for i in range(n):
        if arr[s + i] != key_bytes[key_start[k] + i]:
            return -1
    return k


@njit(nogil=True)
def _parse(arr, words, kinds, slots, key_seed, key_hash, key_start, key_len, key_bytes, key_word,
           key_mask, n_num, seeds, starts, mv_seeds, field_length, n):
    """Everything per value is written out here (see ``csv_kernel._parse``); the common path
    (a key in order, a string or an integer) reads the bytes with ``byte_at`` / ``load_word``
    and calls no inlined function that takes an array: numba counts such an array's references
    up and down (two atomic operations) at every call, which cost a quarter of the time."""
    if n < 0:                                   # one pass for both when the lines are not counted
        n, high = lines_and_high(arr)
    else:
        high = _high(arr)
    labels = np.zeros(n, np.float64)
    dense = np.zeros((n, n_num), np.float64)
    ids = np.empty((len(seeds), n), np.uint64)
    present = np.zeros((len(seeds), n), np.bool_)
    cap = n
    if len(mv_seeds):                            # a list's elements: at most its commas + 1
        for c in arr:
            cap += c == 44
    mv_ids = np.empty((len(mv_seeds), cap), np.uint64)
    mv_row = np.empty((len(mv_seeds), cap), np.int64)
    mv_n = np.zeros(len(mv_seeds), np.int64)
    seen = np.full(len(kinds), -1, np.int64)
    out = (labels, dense, ids, present, mv_ids, mv_row, mv_n)
    last = len(words) - 1
    pos = 0
    for row in range(n):
        if pos >= len(arr):
            return False, high, out
        p = _ws(arr, pos)
        if byte_at(arr, p) != 123:
            return False, high, out
        p = _ws(arr, p + 1)
        k = -1
        while byte_at(arr, p) == 34:             # "key": value
            ks = p + 1
            g = k + 1                            # keys mostly come in the plan's order, some left
            k = -1                               # out: the next AHEAD keys' first words compared
            w = load_word(arr, ks)
            for j in range(g, min(g + AHEAD, len(key_len))):
                kn = key_len[j]
                if (w & key_mask[j]) == key_word[j] and byte_at(arr, ks + kn) == 34 \
                        and (kn <= 8 or _prefix(arr, ks, key_bytes, key_start[j], kn) == kn):
                    k = j
                    break
            if k >= 0:
                ke = ks + key_len[k]
            else:
                ke = _string_end(arr, words, ks)
                if ke < 0:
                    return False, high, out
                k = _key_index(arr, words, last, ks, ke - ks, g, key_seed, key_hash, key_start,
                               key_len, key_bytes)
            p = ke + 1
            if byte_at(arr, p) <= 32:            # (_ws only where there is white space)
                p = _ws(arr, p)
            if byte_at(arr, p) != 58:
                return False, high, out
            p += 1
            if byte_at(arr, p) <= 32:
                p = _ws(arr, p)
            kind = kinds[k] if k >= 0 else -1
            if k >= 0:
                if seen[k] == row:               # a duplicate key: json.loads keeps the last
                    return False, high, out
                seen[k] = row
            c = byte_at(arr, p)
            if kind == CATEGORICAL and c == 34:  # a string: its end eight bytes at a time
                s = p + 1
                e = s
                while True:
                    w = load_word(arr, e)
                    hit = specials(w)
                    if hit:
                        e += first_byte(hit)
                        break
                    e += 8
                if byte_at(arr, e) != 34 or e - s > field_length:
                    return False, high, out
                slot = slots[k]
                h = starts[slot, e - s] if e - s < SHORT else start_state(seeds[slot], e - s)
                for i in range(s, e, 8):
                    h = fold_word(h, load_word(arr, i), e - i)
                ids[slot, row] = splitmix64_one(h)
                present[slot, row] = True
                p = e + 1
            elif (kind == NUMERIC or kind == LABEL) and (c == 45 or 48 <= c <= 57):
                q = p + 1 if c == 45 else p      # an integer read as its digits are found
                m = 0
                e = q
                while 48 <= byte_at(arr, e) <= 57:
                    m = m * 10 + (byte_at(arr, e) - 48)
                    e += 1
                c = byte_at(arr, e)
                if e == q or e - q > MAX_DIGITS or (byte_at(arr, q) == 48 and e - q > 1) \
                        or c == 46 or c == 101 or c == 69:       # 0 digits, 01, 1.5, 1e5: the long way
                    ok, e, v = _number_value(arr, words, p, kind == LABEL)
                    if not ok:
                        return False, high, out
                else:
                    v = -float(m) if q > p else float(m)
                if kind == LABEL:
                    labels[row] = v
                else:
                    dense[row, slots[k]] = v
                p = e
            elif c == 91:                        # a list: only under a multi-valued key
                if kind != MULTI:
                    return False, high, out
                slot = slots[k]
                p = _ws(arr, p + 1)
                while byte_at(arr, p) != 93:
                    quoted = byte_at(arr, p) == 34
                    s, e = _value_end(arr, words, p)
                    if e < 0 or e - s > field_length:
                        return False, high, out
                    if quoted or byte_at(arr, s) != 110:  # null is no value
                        mv_ids[slot, mv_n[slot]] = hash_token(words, last, s, e - s, mv_seeds[slot])
                        mv_row[slot, mv_n[slot]] = row
                        mv_n[slot] += 1
                    p = _ws(arr, e + 1 if quoted else e)
                    if byte_at(arr, p) == 44:
                        p = _ws(arr, p + 1)
                        if byte_at(arr, p) == 93:
                            return False, high, out
                    elif byte_at(arr, p) != 93:
                        return False, high, out
                p += 1
            elif kind == NUMERIC or kind == LABEL:
                ok, p, v = _number_value(arr, words, p, kind == LABEL)
                if not ok:
                    return False, high, out
                if kind == LABEL:
                    labels[row] = v
                else:
                    dense[row, slots[k]] = v
            else:
                s, e = _value_end(arr, words, p)
                if e < 0:
                    return False, high, out
                quoted = byte_at(arr, p) == 34
                null = not quoted and byte_at(arr, s) == 110
                if kind == CATEGORICAL or kind == MULTI:
                    if e - s > field_length:
                        return False, high, out
                    if not null:
                        if kind == CATEGORICAL:
                            ids[slots[k], row] = hash_token(words, last, s, e - s, seeds[slots[k]])
                            present[slots[k], row] = True
                        else:
                            slot = slots[k]
                            mv_ids[slot, mv_n[slot]] = hash_token(words, last, s, e - s, mv_seeds[slot])
                            mv_row[slot, mv_n[slot]] = row
                            mv_n[slot] += 1
                p = e + 1 if quoted else e
            if byte_at(arr, p) <= 32:
                p = _ws(arr, p)
            if byte_at(arr, p) == 44:
                p += 1
                if byte_at(arr, p) <= 32:
                    p = _ws(arr, p)
                if byte_at(arr, p) != 34:
                    return False, high, out
            elif byte_at(arr, p) != 125:
                return False, high, out
        if byte_at(arr, p) != 125 or seen[0] != row:      # the object's end, and its label (key 0)
            return False, high, out
        p = _ws(arr, p + 1)
        if byte_at(arr, p) != 10:
            return False, high, out
        pos = p + 1
    return pos == len(arr), high, out


class JsonPlan:
    """The keys the kernel knows: label (index 0), numeric, categorical, multi-valued."""

    def __init__(self, label: str, numeric, categorical, multi):
        keys = [label, *numeric, *categorical, *multi]
        kinds = [LABEL] + [NUMERIC] * len(numeric) + [CATEGORICAL] * len(categorical) + [MULTI] * len(multi)
        slots = [0, *range(len(numeric)), *range(len(categorical)), *range(len(multi))]
        self.kinds, self.slots = np.array(kinds, np.int64), np.array(slots, np.int64)
        raw = [k.encode("utf-8") for k in keys]
        self.key_bytes = np.frombuffer(b"".join(raw) + b"\0", np.uint8)
        self.key_len = np.array([len(r) for r in raw], np.int64)
        self.key_start = np.concatenate([[0], np.cumsum(self.key_len)[:-1]]).astype(np.int64)
        head = [r[:8] for r in raw]               # each key's first 8 bytes as one word, and its mask
        self.key_word = np.array([int.from_bytes(h, "little") for h in head], np.uint64)
        self.key_mask = np.array([(1 << (8 * len(h))) - 1 for h in head], np.uint64)
        self.key_seed = field_seed(KEY_FIELD)
        self.key_hash = hash_values(KEY_FIELD, raw)
        self.n_num = len(numeric)
        self.seeds = np.array([field_seed(c) for c in categorical], np.uint64)
        self.mv_seeds = np.array([field_seed(c) for c in multi], np.uint64)
        # the hash's start state of a categorical value of each length below SHORT, looked up
        self.starts = splitmix64(self.seeds[:, None] + np.arange(SHORT, dtype=np.uint64)[None, :])


def parse_clean(buf, plan: JsonPlan, field_length: int, start: int = 0, end: int | None = None,
                lines: int = -1):
    """(labels f64[R], numeric f64[R, N], ids u64[C, R], present bool[C, R], [(ids, counts)]
    per multi-valued key) of a chunk of whole ``\\n``-ended lines ``buf[start:end]``, or None
    when some line needs the ``json.loads`` path (see the module docstring)."""
    chunk = views(buf, start, end)
    if chunk is None:
        return None
    buf, start, end, arr, words = chunk
    ok, high, out = _parse(arr, words, plan.kinds, plan.slots, plan.key_seed, plan.key_hash,
                           plan.key_start, plan.key_len, plan.key_bytes, plan.key_word, plan.key_mask,
                           plan.n_num, plan.seeds, plan.starts, plan.mv_seeds, field_length, lines)
    if not ok or (high and not utf8(buf, start, end)):
        return None
    labels, dense, ids, present, mv_ids, mv_row, mv_n = out
    return labels, dense, ids, present, multi_valued(mv_ids, mv_row, mv_n, len(labels))
