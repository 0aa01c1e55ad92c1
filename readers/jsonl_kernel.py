"""The JSON-lines parse of a simple chunk as one compiled pass over its bytes (no GIL held).

``parse_clean`` reads each line as a flat JSON object. A key is first compared with the one
that came after the previous key last time (``JsonPlan.order``: one producer writes one fixed
order) as words holding its quotes and colon, ``"C1":`` in one compare; else with the ``AHEAD``
keys of the plan after the previous one (keys mostly come in the plan's order, some left out);
else matched by a hash of its bytes (any order, unknown keys), and the order learnt. The label
and numeric keys' numbers are parsed (an integer as its digits are scanned, others by
``tokens.number_token``), categorical strings, numbers (as written) and booleans hashed (a
string's end found 8 bytes at a time, its hash's start state looked up per length), a
multi-valued key's list split, giving exactly what ``JsonlParser``'s ``json.loads`` path
gives. It takes only chunks where nothing needs a decision: every line one object of strings
without escapes or control bytes, JSON numbers (no exponent where a number is read), true /
false / null, and lists only under multi-valued keys; no duplicate known key, the label
present, no categorical value longer than ``field_length``, no blank line, bytes >= 0x80 only
in valid UTF-8 (a byte >= 0x80 can only be in a string, so the words the string scans read
tell whether to check). For anything else it answers ``None`` and the caller takes the
``json.loads`` path, which marks and counts the bad lines.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit

from .chunk import _HIGH, byte_at, copied, count_lines, first_byte, load_word, multi_valued, specials, utf8, views
from .ids import fold_word, hash_token, splitmix64_one, start_state
from .jsonl_scan import (AHEAD, CATEGORICAL, LABEL, MULTI, NUMERIC, SHORT, SKIP, JsonPlan, _key_index,
                         _number_value, _string_end, _value_end, _ws)
from .tokens import MAX_DIGITS, leading_digits

__all__ = ["AHEAD", "SHORT", "SKIP", "JsonPlan", "parse_clean"]


@njit(nogil=True, inline="always")
def _is_key(arr, p, j, key_tok, tok_start, tok_len, tok_mask):
    """Whether ``arr[p:]`` starts with key ``j``'s ``"key":`` (a word at a time)."""
    t = np.uint64(tok_start[np.uint64(j)])       # (unsigned indices: no negative-index wraparound)
    left = tok_len[np.uint64(j)]
    while left > 8:
        if load_word(arr, p) != key_tok[t]:
            return False
        p += 8
        t += np.uint64(1)
        left -= 8
    return (load_word(arr, p) & tok_mask[np.uint64(j)]) == key_tok[t]


@njit(nogil=True)
def _parse(arr, words, kinds, slots, order, key_tok, tok_start, tok_len, tok_mask, key_seed,
           key_hash, key_start, key_len, key_bytes, n_num, seeds, starts, mv_seeds, field_length, n):
    """Everything per value is written out here (see ``csv_kernel._parse``); the common path
    (a key in order, a string or an integer) reads the bytes with ``byte_at`` / ``load_word``
    and calls no inlined function that takes an array but ``_is_key``."""
    if n < 0:
        n = count_lines(arr)
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
    n_keys = len(kinds)
    seen = np.full(n_keys, -1, np.int64)          # keys 64 and on; the others' in ``bits``
    out = (labels, dense, ids, present, mv_ids, mv_row, mv_n)
    last = len(words) - 1
    high = np.uint64(0)                           # the OR of every string's words
    pos = 0
    for row in range(n):
        if pos >= len(arr):
            return False, False, out
        p = _ws(arr, pos)
        if byte_at(arr, p) != 123:
            return False, False, out
        p += 1
        prev = n_keys                            # the previous known key (n_keys: none yet)
        bits = np.uint64(0)                      # the keys 0..63 met in this line
        while True:
            k = order[np.uint64(prev)]           # "key": as it came last time, one compare
            if _is_key(arr, p, k, key_tok, tok_start, tok_len, tok_mask):
                p += tok_len[np.uint64(k)]
            else:
                if byte_at(arr, p) <= 32:
                    p = _ws(arr, p)
                if byte_at(arr, p) != 34:        # a key ('{}' has no label either)
                    return False, False, out
                tl = 0                           # (past the colon: tl more bytes)
                if _is_key(arr, p, k, key_tok, tok_start, tok_len, tok_mask):
                    tl = tok_len[k]              # after white space
                else:
                    k = -1                       # else the next keys of the plan, then the hash
                    g = prev + 1 if prev < n_keys else 0
                    for j in range(g, min(g + AHEAD, n_keys)):
                        if _is_key(arr, p, j, key_tok, tok_start, tok_len, tok_mask):
                            k = j
                            tl = tok_len[j]
                            break
                    if k < 0:
                        ke, m = _string_end(arr, words, p + 1)
                        if ke < 0:
                            return False, False, out
                        high |= m
                        k = _key_index(arr, words, last, p + 1, ke - p - 1, g, key_seed, key_hash,
                                       key_start, key_len, key_bytes)
                        p = ke + 1
                        if byte_at(arr, p) <= 32:
                            p = _ws(arr, p)
                        if byte_at(arr, p) != 58:
                            return False, False, out
                        p += 1
                    if k >= 0:
                        order[prev] = k
                p += tl
            kind = -1
            if k >= 0:
                kind = kinds[np.uint64(k)]
                if k < 64:                       # a duplicate key: json.loads keeps the last
                    b = np.uint64(1) << np.uint64(k)
                    if bits & b:
                        return False, False, out
                    bits |= b
                else:
                    if seen[k] == row:
                        return False, False, out
                    seen[k] = row
                prev = k
            if byte_at(arr, p) <= 32:
                p = _ws(arr, p)
            c = byte_at(arr, p)
            if kind == CATEGORICAL and c == 34:  # a string: its end eight bytes at a time
                s = p + 1
                w0 = load_word(arr, s)           # the first two words kept for the hash
                w1 = np.uint64(0)
                high |= w0
                hit = specials(w0)
                if hit:
                    e = s + first_byte(hit)
                else:
                    w1 = load_word(arr, s + 8)
                    high |= w1
                    hit = specials(w1)
                    if hit:
                        e = s + 8 + first_byte(hit)
                    else:
                        e = s + 16
                        while True:
                            w = load_word(arr, e)
                            high |= w
                            hit = specials(w)
                            if hit:
                                e += first_byte(hit)
                                break
                            e += 8
                if byte_at(arr, e) != 34 or e - s > field_length:
                    return False, False, out
                slot = np.uint64(slots[np.uint64(k)])
                h = starts[slot, np.uint64(e - s)] if e - s < SHORT else start_state(seeds[slot], e - s)
                if e - s <= 8:                   # (up to two words: no loop, no trip count)
                    if e > s:
                        h = fold_word(h, w0, e - s)
                elif e - s <= 16:
                    h = fold_word(fold_word(h, w0, 8), w1, e - s - 8)
                else:
                    for i in range(s, e, 8):
                        h = fold_word(h, load_word(arr, i), e - i)
                ids[slot, np.uint64(row)] = splitmix64_one(h)
                present[slot, np.uint64(row)] = True
                p = e + 1
            elif (kind == NUMERIC or kind == LABEL) and (c == 45 or 48 <= c <= 57):
                q = p + 1 if c == 45 else p      # an integer: up to 7 digits at once
                nd, m = leading_digits(load_word(arr, q))
                e = q + nd
                if nd == 8:                      # 8 digits or more: one by one
                    e = q
                    while 48 <= byte_at(arr, e) <= 57:
                        m = m * 10 + (byte_at(arr, e) - 48)
                        e += 1
                c = byte_at(arr, e)
                if e == q or e - q > MAX_DIGITS or (byte_at(arr, q) == 48 and e - q > 1) \
                        or c == 46 or c == 101 or c == 69:       # 0 digits, 01, 1.5, 1e5: the long way
                    ok, e, v = _number_value(arr, words, p, kind == LABEL)
                    if not ok:
                        return False, False, out
                else:
                    v = -float(m) if q > p else float(m)
                if kind == LABEL:
                    labels[np.uint64(row)] = v
                else:
                    dense[np.uint64(row), np.uint64(slots[np.uint64(k)])] = v
                p = e
            elif c == 91:                        # a list: only under a multi-valued key
                if kind != MULTI:
                    return False, False, out
                slot = slots[k]
                p = _ws(arr, p + 1)
                while byte_at(arr, p) != 93:
                    quoted = byte_at(arr, p) == 34
                    s, e, m = _value_end(arr, words, p)
                    high |= m
                    if e < 0 or e - s > field_length:
                        return False, False, out
                    if quoted or byte_at(arr, s) != 110:  # null is no value
                        mv_ids[slot, mv_n[slot]] = hash_token(words, last, s, e - s, mv_seeds[slot])
                        mv_row[slot, mv_n[slot]] = row
                        mv_n[slot] += 1
                    p = _ws(arr, e + 1 if quoted else e)
                    if byte_at(arr, p) == 44:
                        p = _ws(arr, p + 1)
                        if byte_at(arr, p) == 93:
                            return False, False, out
                    elif byte_at(arr, p) != 93:
                        return False, False, out
                p += 1
            elif kind == NUMERIC or kind == LABEL:
                ok, p, v = _number_value(arr, words, p, kind == LABEL)
                if not ok:
                    return False, False, out
                if kind == LABEL:
                    labels[row] = v
                else:
                    dense[row, slots[k]] = v
            else:                                # a categorical value of another kind, or a key
                s, e, m = _value_end(arr, words, p)   # not read (unknown, SKIP)
                high |= m
                if e < 0:
                    return False, False, out
                quoted = byte_at(arr, p) == 34
                null = not quoted and byte_at(arr, s) == 110
                if kind == CATEGORICAL or kind == MULTI:
                    if e - s > field_length:
                        return False, False, out
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
            c = byte_at(arr, p)
            if c <= 32:
                p = _ws(arr, p)
                c = byte_at(arr, p)
            if c == 44:
                p += 1
            elif c == 125:
                break
            else:
                return False, False, out
        if not bits & np.uint64(1):              # the label (key 0)
            return False, False, out
        p = _ws(arr, p + 1)
        if byte_at(arr, p) != 10:
            return False, False, out
        pos = p + 1
    return pos == len(arr), (high & _HIGH) != 0, out


def parse_clean(buf, plan: JsonPlan, field_length: int, start: int = 0, end: int | None = None,
                lines: int = -1):
    """(labels f64[R], numeric f64[R, N], ids u64[C, R], present bool[C, R], [(ids, counts)]
    per multi-valued key) of a chunk of whole ``\\n``-ended lines ``buf[start:end]``, or None
    when some line needs the ``json.loads`` path (see the module docstring)."""
    buf, start, end, lines = copied(buf, start, end, lines)
    chunk = views(buf, start, end)
    if chunk is None:
        return None
    buf, start, end, arr, words = chunk
    ok, high, out = _parse(arr, words, plan.kinds, plan.slots, plan.order, plan.key_tok, plan.tok_start,
                           plan.tok_len, plan.tok_mask, plan.key_seed, plan.key_hash, plan.key_start,
                           plan.key_len, plan.key_bytes, plan.n_num, plan.seeds, plan.starts,
                           plan.mv_seeds, field_length, lines)
    if not ok or (high and not utf8(buf, start, end)):
        return None
    labels, dense, ids, present, mv_ids, mv_row, mv_n = out
    return labels, dense, ids, present, multi_valued(mv_ids, mv_row, mv_n, len(labels))
