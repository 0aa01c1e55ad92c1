"""Categorical ids: a stable, vectorised 64-bit hash of (field name, value bytes).

The id of a value is defined on its UTF-8 bytes, so every route gives the same number:

* the start state is ``splitmix64(hash_str(field) + len(value))``;
* the bytes, zero-padded to a multiple of 8, are read as little-endian uint64 words
  ``w0, w1, ...`` and folded in order: ``h = mix(h ^ w)`` with ``mix(x) = x*M; x ^= x >> 32``;
* the id is ``splitmix64(h)``.

Parsers hash tokens straight out of the line buffer (``hash_spans``); everybody else calls
``hash_values(field, tokens)`` (the Kafka reader, the synthetic reader, ``records_to_batch``).
Ints are hashed as their decimal string, so ``hash_values("f", [7]) == hash_values("f", ["7"])``.
Nothing depends on ``PYTHONHASHSEED``.

>>> import numpy as np
>>> bool(hash_values("user", ["42"])[0] == hash_values("user", [b"42"])[0] == hash_values("user", [42])[0])
True
>>> bool(hash_values("user", ["42"])[0] != hash_values("item", ["42"])[0])
True
"""
from __future__ import annotations

import numpy as np

from streamtrain.hashing import hash_str, splitmix64

_MIX = np.uint64(0x9FB21C651E98DF25)
_S32 = np.uint64(32)
# MASKS[k] keeps the low k bytes of a word (k = 0..8).
MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def field_seed(field: str) -> np.uint64:
    return np.uint64(hash_str(field))


def byte_words(padded: bytes) -> np.ndarray:
    """A uint64 view starting at *every* byte offset of ``padded`` (needs 8 spare bytes at the end).

    ``byte_words(buf)[i]`` is the little-endian word made of ``buf[i:i+8]``; no copy is made.
    """
    n = len(padded) - 7
    if n <= 0:
        return np.zeros(0, dtype=np.uint64)
    return np.ndarray((n,), dtype="<u8", buffer=padded, strides=(1,))


def word_at(words: np.ndarray, starts: np.ndarray, lengths: np.ndarray, k: int) -> np.ndarray:
    """The k-th 8-byte word of every token, zero beyond the token's end."""
    if k == 0:
        return words[starts] & MASKS[np.minimum(lengths, 8)]
    idx = np.minimum(starts + 8 * k, len(words) - 1)
    return words[idx] & MASKS[np.clip(lengths - 8 * k, 0, 8)]


def hash_spans(words, starts, lengths, seeds) -> np.ndarray:
    """Ids of the tokens ``buf[starts:starts+lengths]`` given ``words = byte_words(buf)``.

    ``seeds`` is one field seed (``field_seed(name)``) or an array broadcastable to ``starts``.
    Empty tokens get an id too; callers decide that empty means missing.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if starts.size == 0:
        return np.zeros(starts.shape, dtype=np.uint64)
    h = _start_state(np.asarray(seeds, dtype=np.uint64), lengths)
    nwords = (lengths + 7) // 8
    for k in range(int(nwords.max())):
        m = (h ^ word_at(words, starts, lengths, k)) * _MIX
        m ^= m >> _S32
        h = m if k == 0 and nwords.min() > 0 else np.where(nwords > k, m, h)
    return splitmix64(h)


def _start_state(seeds: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``splitmix64(seed + length)``, via a small lookup table when the shapes allow it."""
    top = int(lengths.max()) + 1
    if seeds.ndim == 0 and top < lengths.size:
        return splitmix64(seeds + np.arange(top, dtype=np.uint64))[lengths]
    if seeds.ndim == 2 and seeds.shape == (lengths.shape[0], 1) and lengths.ndim == 2 \
            and seeds.size * top < lengths.size:
        table = splitmix64(seeds + np.arange(top, dtype=np.uint64)[None, :])
        return np.take_along_axis(table, lengths, axis=1)
    return splitmix64(seeds + lengths.astype(np.uint64))


def as_bytes_array(tokens) -> np.ndarray:
    """Tokens (list or array of str / bytes / ints) as a numpy ``S`` array of UTF-8 bytes."""
    arr = tokens if isinstance(tokens, np.ndarray) else np.asarray(_list_of_strings(tokens))
    kind = arr.dtype.kind
    if kind == "S":
        return arr
    if kind in "iu":
        return arr.astype("S")
    if kind == "U":
        if arr.size == 0:
            return arr.astype("S1")
        try:
            return arr.astype("S")                 # fast when ASCII
        except UnicodeEncodeError:
            return np.strings.encode(arr, "utf-8")
    return as_bytes_array(np.asarray(_list_of_strings(list(arr))))


def _list_of_strings(tokens):
    tokens = list(tokens)
    if all(isinstance(t, str) for t in tokens) or all(isinstance(t, bytes) for t in tokens):
        return tokens if tokens else np.zeros(0, dtype="S1")
    return [t if isinstance(t, bytes) else str(t).encode("utf-8") for t in tokens]


def hash_values(field: str, tokens) -> np.ndarray:
    """uint64 ids of ``tokens`` in ``field`` (same ids as the file parsers give)."""
    arr = as_bytes_array(tokens).ravel()
    width = max(arr.dtype.itemsize, 1)
    padded = np.ascontiguousarray(arr).tobytes() + bytes(16)
    lengths = np.strings.str_len(arr).astype(np.int64)
    starts = np.arange(len(arr), dtype=np.int64) * width
    return hash_spans(byte_words(padded), starts, lengths, field_seed(field))
