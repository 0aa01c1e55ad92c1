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

from streamtrain.compiled import njit
from streamtrain.hashing import SPLITMIX_GOLDEN, SPLITMIX_M1, SPLITMIX_M2, hash_str, splitmix64

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


def hash_spans(words, starts, lengths, seeds) -> np.ndarray:
    """Ids of the tokens ``buf[starts:starts+lengths]`` given ``words = byte_words(buf)``.

    ``seeds`` is one field seed (``field_seed(name)``) or an array broadcastable to ``starts``.
    Empty tokens get an id too; callers decide that empty means missing. The fold is sequential
    within a token, so it runs in a compiled loop: time linear in the bytes hashed, whatever the
    longest token.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    if starts.size == 0:
        return np.zeros(starts.shape, dtype=np.uint64)
    h = np.broadcast_to(_start_state(np.asarray(seeds, dtype=np.uint64), lengths), starts.shape)
    folded = _fold(words, starts.ravel(), lengths.ravel(), np.ascontiguousarray(h).ravel())
    return splitmix64(folded).reshape(starts.shape)


@njit(nogil=True)
def _fold(words, starts, lengths, h):
    """``fold_token`` of every token, from its start state ``h[i]``."""
    out = np.empty_like(h)
    last = len(words) - 1
    for i in range(len(starts)):
        out[i] = fold_token(words, last, starts[i], lengths[i], h[i])
    return out


@njit(nogil=True, inline="always")
def fold_token(words, last, s, n, x):
    """``x = mix(x ^ w)`` over the words of ``buf[s:s+n]``, the last one masked to the token's
    bytes (``last = len(words) - 1``)."""
    k = 0
    while k < n:
        x = fold_word(x, words[min(s + k, last)], n - k)
        k += 8
    return x


@njit(nogil=True, inline="always")
def fold_word(x, w, left):
    """One step of the fold: ``mix(x ^ w)``, ``w`` cut to its low ``left`` bytes when ``left < 8``
    (scalars only, so a kernel can fold a token it scans without passing the words array to an
    inlined function, which costs numba an atomic reference count up and down per call)."""
    if left < 8:
        w &= MASKS[left]
    x = (x ^ w) * _MIX
    return x ^ (x >> _S32)


@njit(nogil=True, inline="always")
def splitmix64_one(x):
    """``hashing.splitmix64`` of one uint64, inside compiled code."""
    z = x + SPLITMIX_GOLDEN
    z = (z ^ (z >> np.uint64(30))) * SPLITMIX_M1
    z = (z ^ (z >> np.uint64(27))) * SPLITMIX_M2
    return z ^ (z >> np.uint64(31))


@njit(nogil=True, inline="always")
def hash_token(words, last, s, n, seed):
    """The id of one token, inside compiled code: what ``hash_spans`` gives for it."""
    return splitmix64_one(fold_token(words, last, s, n, start_state(seed, n)))


@njit(nogil=True, inline="always")
def start_state(seed, n):
    """The fold's start state for a token of ``n`` bytes of the field ``seed``."""
    return splitmix64_one(seed + np.uint64(n))


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


def as_bytes_array(arr: np.ndarray) -> np.ndarray:
    """A numpy array of str / bytes / ints as a numpy ``S`` array of UTF-8 bytes."""
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
    return as_bytes_array(np.asarray([_utf8(t) for t in arr.ravel()] or np.zeros(0, "S1")))


def _utf8(token) -> bytes:
    return token if isinstance(token, bytes) else str(token).encode("utf-8")


def joined(tokens) -> tuple[bytes, np.ndarray]:
    """A list of tokens (str / bytes / ints) as one UTF-8 buffer and each token's byte length.

    Unlike a fixed-width numpy array, this costs the bytes of the tokens, not their number times
    the longest one.
    """
    tokens = tokens if isinstance(tokens, list) else list(tokens)
    if all(isinstance(t, str) for t in tokens):
        text = "".join(tokens)
        buf = text.encode("utf-8")
        if len(buf) == len(text):                  # ASCII: byte lengths are character lengths
            return buf, np.fromiter(map(len, tokens), np.int64, len(tokens))
    if not all(isinstance(t, bytes) for t in tokens):
        tokens = [_utf8(t) for t in tokens]
    return b"".join(tokens), np.fromiter(map(len, tokens), np.int64, len(tokens))


def hash_values(field: str, tokens) -> np.ndarray:
    """uint64 ids of ``tokens`` in ``field`` (same ids as the file parsers give)."""
    if isinstance(tokens, np.ndarray):
        arr = as_bytes_array(tokens).ravel()
        width = max(arr.dtype.itemsize, 1)
        buf = np.ascontiguousarray(arr).tobytes()
        lengths = np.strings.str_len(arr).astype(np.int64)
        starts = np.arange(len(arr), dtype=np.int64) * width
    else:
        buf, lengths = joined(tokens)
        starts = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
    return hash_spans(byte_words(buf + bytes(16)), starts, lengths, field_seed(field))
