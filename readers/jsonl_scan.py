"""The pieces of the JSON-lines kernel (``jsonl_kernel``): what it knows of the keys
(``JsonPlan``: each key's kind, its ``"key":`` bytes as words, its hash, and the order keys
came in last), and the scans of a value that leave the common path (a number that is not a
plain integer, a literal, a string found by ``_string_end``, a key found by its hash).
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit
from streamtrain.hashing import splitmix64

from .chunk import first_byte, specials
from .ids import MASKS, field_seed, hash_token, hash_values
from .tokens import number_token

LABEL, NUMERIC, CATEGORICAL, MULTI, SKIP = 0, 1, 2, 3, 4
SHORT = 32                                       # values this long or longer: start state computed
AHEAD = 8                                        # keys tried in the plan's order before the hash
KEY_FIELD = "\x00jsonl-key"                      # the hash seed of key bytes (never a field name)


@njit(nogil=True, inline="always")
def _ws(arr, p):
    """The first position at or after ``p`` that is not a space, tab or '\\r' (a '\\n' ends)."""
    while arr[p] == 32 or arr[p] == 9 or arr[p] == 13:
        p += 1
    return p


@njit(nogil=True, inline="always")
def _string_end(arr, words, p):
    """``arr[p]`` is after an opening quote: (the position of the closing one, or -1 (an escape,
    a control byte or the line's end); the OR of the words read, whose top bits mark any byte
    >= 0x80 of the string), eight bytes at a time (``words[p]`` is ``arr[p:p+8]`` as one
    little-endian word)."""
    m = np.uint64(0)
    while True:
        w = words[p]
        m |= w
        hit = specials(w)
        if hit:
            e = p + first_byte(hit)
            return (e if arr[e] == 34 else -1), m
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
    """(start, end, the OR of a string's words (``_string_end``), else 0) of the scalar value at
    ``p`` (a string's without its quotes), or end -1."""
    c = arr[p]
    if c == 34:
        e, m = _string_end(arr, words, p + 1)
        return p + 1, e, m
    if c == 45 or 48 <= c <= 57:
        return p, _number_end(arr, p), np.uint64(0)
    return p, _literal_end(arr, p), np.uint64(0)


@njit(nogil=True, inline="always")
def _number_value(arr, words, p, label):
    """(ok, end, value) of the label's or a numeric key's value at ``p``: a number as
    ``number_token`` reads it, or null (0; not for the label)."""
    s, e, _ = _value_end(arr, words, p)
    c = arr[p]
    if e < 0 or c == 34 or c == 116 or c == 102 or (c == 110 and label):
        return False, e, 0.0
    if c == 110:
        return True, e, 0.0
    ok, v = number_token(arr, s, e - s)
    return ok, e, v


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



class JsonPlan:
    """The keys the kernel knows: label (index 0), numeric, categorical, multi-valued, and
    keys read past (``skip``: the ``drop`` option's). Each key's ``"key":`` (quotes and colon)
    is kept as little-endian words, zero-padded (``key_tok[tok_start[j]:]``, ``tok_len[j]``
    bytes, the last word's bytes ``tok_mask[j]``), which the kernel compares with the line's
    bytes a word at a time. ``order[j]`` is the key that came after key ``j`` when the kernel
    last met ``j`` (``order[K]``: the first key of a line), the key expected next; it starts as
    the plan's own order and is only ever a guess (any value is correct, one in order is fast),
    so kernels that share a plan may write it at once."""

    def __init__(self, label: str, numeric, categorical, multi, skip=()):
        keys = [label, *numeric, *categorical, *multi]
        skip = [k for k in dict.fromkeys(skip) if k not in keys]
        keys += skip
        kinds = ([LABEL] + [NUMERIC] * len(numeric) + [CATEGORICAL] * len(categorical)
                 + [MULTI] * len(multi) + [SKIP] * len(skip))
        slots = [0, *range(len(numeric)), *range(len(categorical)), *range(len(multi)), *[0] * len(skip)]
        self.kinds, self.slots = np.array(kinds, np.int64), np.array(slots, np.int64)
        raw = [k.encode("utf-8") for k in keys]
        self.key_bytes = np.frombuffer(b"".join(raw) + b"\0", np.uint8)
        self.key_len = np.array([len(r) for r in raw], np.int64)
        self.key_start = np.concatenate([[0], np.cumsum(self.key_len)[:-1]]).astype(np.int64)
        toks = [b'"' + r + b'":' for r in raw]
        self.tok_len = np.array([len(t) for t in toks], np.int64)
        self.tok_mask = MASKS[(self.tok_len - 1) % 8 + 1].copy()
        padded = [t + bytes(-len(t) % 8) for t in toks]
        self.key_tok = np.frombuffer(b"".join(padded), "<u8").astype(np.uint64)
        self.tok_start = np.concatenate([[0], np.cumsum([len(t) // 8 for t in padded])[:-1]]).astype(np.int64)
        self.order = np.array([*range(1, len(keys)), 0, 0], np.int64)
        self.key_seed = field_seed(KEY_FIELD)
        self.key_hash = hash_values(KEY_FIELD, raw)
        self.n_num = len(numeric)
        self.seeds = np.array([field_seed(c) for c in categorical], np.uint64)
        self.mv_seeds = np.array([field_seed(c) for c in multi], np.uint64)
        # the hash's start state of a categorical value of each length below SHORT, looked up
        self.starts = splitmix64(self.seeds[:, None] + np.arange(SHORT, dtype=np.uint64)[None, :])
