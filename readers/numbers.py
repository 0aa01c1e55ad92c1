"""Vectorised parsing of numbers out of byte spans.

Integers of up to 8 bytes (sign included) are parsed with SWAR arithmetic on the 64-bit word
that holds them: no per-token Python work. Every other token (decimals, exponents, long
integers) goes through numpy's bytes-to-float cast in one call; only when that call fails are
the failing tokens found one by one (they are bad anyway).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from streamtrain.compiled import njit

from .ids import MASKS

_U = np.uint64
_ZEROS = _U(0x3030303030303030)
_F0 = _U(0xF0F0F0F0F0F0F0F0)
_SIX = _U(0x0606060606060606)
_THREES = _U(0x3333333333333333)
_LOW8 = _U(0xFF)
# what pandas.read_csv reads as missing by default (its ``na_values``; "" is an empty span anyway)
MISSING = np.array([b"#N/A", b"#N/A N/A", b"#NA", b"-1.#IND", b"-1.#QNAN", b"-NaN", b"-nan", b"1.#IND",
                    b"1.#QNAN", b"<NA>", b"N/A", b"NA", b"NULL", b"NaN", b"None", b"n/a", b"nan", b"null"])
MISSING_TEXT = frozenset(m.decode() for m in MISSING.tolist())
LONG_NUMBER = 64     # bytes: longer tokens are parsed one by one, not in the fixed-width batch
#: The smallest magnitude float32 rounds to infinity: a number is read only below it (labels and
#: numeric values are kept as float32; 1e39 would be inf there and make its whole batch
#: non-finite, every other line of it lost with it). One rule for every reader and the server.
FLOAT32_BOUND = 2.0 ** 128 - 2.0 ** 103
IN_RANGE = "a finite number within float32's range (±3.4028235e38)"


def in_range(x: float) -> bool:
    """Whether a parsed number is read (finite, and finite as float32: ``FLOAT32_BOUND``)."""
    return -FLOAT32_BOUND < x < FLOAT32_BOUND


def _swar_int(words: np.ndarray, lengths: np.ndarray):
    """(value, ok) for tokens of 1..8 bytes that are ``[+-]?[0-9]+``."""
    n8 = np.minimum(lengths, 8)
    w = words & MASKS[n8]
    first = w & _LOW8
    neg = first == _U(0x2D)
    signed = neg | (first == _U(0x2B))
    w += signed * (_U(0x30) - first)                            # the sign becomes a leading '0'
    pad = 8 - n8
    w <<= (pad * 8).astype(np.uint64)                           # right-align the digits ...
    w |= _ZEROS & MASKS[pad]                                    # ... behind leading '0's
    ok = ((w & _F0) | (((w + _SIX) & _F0) >> _U(4))) == _THREES
    ok &= (lengths - signed - 1).astype(np.uint64) < (8 - signed)
    w -= _ZEROS
    w = ((w & _U(0x0F0F0F0F0F0F0F0F)) * _U(2561)) >> _U(8)
    w = ((w & _U(0x00FF00FF00FF00FF)) * _U(6553601)) >> _U(16)
    w = ((w & _U(0x0000FFFF0000FFFF)) * _U(42949672960001)) >> _U(32)
    val = w.astype(np.float64)
    np.negative(val, out=val, where=neg)
    return val, ok


def gather_bytes(arr: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The tokens as a numpy ``S`` array (zero-padded fixed width), built without a loop."""
    width = int(lengths.max()) if lengths.size else 0
    if width == 0:
        return np.zeros(len(starts), dtype="S1")
    cols = np.arange(width)
    idx = starts[:, None] + cols
    mat = np.where(cols < lengths[:, None], arr[np.minimum(idx, len(arr) - 1)], 0).astype(np.uint8)
    return np.ascontiguousarray(mat).view(f"S{width}").ravel()


def _cast_float(tokens: np.ndarray):
    try:
        return tokens.astype(np.float64), np.ones(len(tokens), dtype=bool)
    except ValueError:
        pass
    vals = np.zeros(len(tokens), dtype=np.float64)
    ok = np.zeros(len(tokens), dtype=bool)
    for i, t in enumerate(tokens.tolist()):   # only reached when some token is not a number
        try:
            vals[i], ok[i] = float(t), True
        except ValueError:
            pass
    return vals, ok


def _cast_or_missing(tokens: np.ndarray):
    """(values, ok, missing) of the tokens: those ``MISSING`` names marked missing (not ok, 0),
    the others cast. The markers are looked up only when the one cast does not read every token
    as a finite number (a column of plain decimals pays nothing for them)."""
    try:
        vals = tokens.astype(np.float64)
        if np.isfinite(vals).all():
            return vals, np.ones(len(tokens), dtype=bool), np.zeros(len(tokens), dtype=bool)
    except ValueError:
        pass
    na = np.isin(tokens, MISSING)
    vals, ok = np.zeros(len(tokens)), np.zeros(len(tokens), dtype=bool)
    vals[~na], ok[~na] = _cast_float(tokens[~na])
    return vals, ok, na


def says_missing(v) -> bool:
    """A Python value that says a number is missing: None, a float NaN (pandas' missing value)
    or a string ``MISSING`` names (``"NA"``)."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and v in MISSING_TEXT)


def parse_spans(chunk, starts: np.ndarray, ends: np.ndarray):
    """Parse the byte spans of ``chunk`` as numbers.

    Returns ``(values float64, ok bool, empty bool)`` with the input's shape. Empty spans, and
    spans that say a value is missing (``MISSING``: ``NA``, ``NaN``, ``null``, ...), are
    ``ok=False, empty=True, value 0``; numbers float32 cannot hold (inf, 1e39: ``in_range``)
    are not ok.
    """
    shape = starts.shape
    starts, ends = starts.ravel(), ends.ravel()
    lengths = ends - starts
    vals, ok = _swar_int(chunk.words[starts], lengths)
    empty = lengths == 0
    rest = np.flatnonzero(~ok & ~empty)
    if rest.size:
        long = lengths[rest] > LONG_NUMBER
        short = rest[~long]          # gathered into one fixed-width array: its width must stay small
        v2, ok2, na = _cast_or_missing(gather_bytes(chunk.arr, starts[short], lengths[short]))
        vals[short], ok[short] = v2, ok2
        empty[short[na]] = True      # written as missing: empty
        for i in rest[long]:         # one at a time, in time linear in their bytes (rare, and long)
            v, o = _cast_float(np.array([chunk.buf[starts[i]:ends[i]]]))
            vals[i], ok[i] = v[0], o[0]
        ok[rest] &= np.abs(vals[rest]) < FLOAT32_BOUND       # finite as float32 (NaN: not ok)
        vals[rest] = np.where(ok[rest], vals[rest], 0.0)
    return vals.reshape(shape), ok.reshape(shape), empty.reshape(shape)


def signed_log1p(x: np.ndarray) -> np.ndarray:
    """``sign(x) * log1p(|x|)`` in float32: keeps counts in a range a linear model can use.

    float32/float64 arrays take one compiled pass (no GIL, no temporaries) whose numbers are
    numpy's: the value rounded to float32, then numpy's float32 ``log1p``, then the sign
    (``tests/test_readers_numbers.py``). Whole numbers below ``2**16`` in size (most counts) are
    looked up in a table numpy made; the pass leaves the others (their positions) to numpy
    itself, since numpy's float32 ``log1p`` is not libm's on every CPU (with AVX-512 it is its
    own vectorised one, which differs in the last bit for some values)."""
    x = np.asarray(x)
    if x.dtype in (np.float32, np.float64) and x.size:
        flat = np.ascontiguousarray(x).reshape(-1)
        out, rest = np.empty(flat.size, np.float32), np.empty(flat.size, np.int64)
        n = _signed_log1p(flat, _log1p_table(), out, rest)
        if n:
            idx = rest[:n]
            v = flat[idx].astype(np.float32, copy=False)
            out[idx] = np.copysign(np.log1p(np.abs(v)), v)
        return out.reshape(x.shape)
    x = np.asarray(x, dtype=np.float32)
    return np.copysign(np.log1p(np.abs(x)), x)


@functools.cache
def _log1p_table() -> np.ndarray:
    return np.log1p(np.arange(1 << 16, dtype=np.float32))


@njit(nogil=True, error_model="numpy")
def _signed_log1p(x, table, out, rest):
    """The table's values into ``out``; the positions of the others into ``rest``; how many."""
    top = np.float32(len(table))
    n = 0
    for i in range(len(x)):
        v = np.float32(x[i])
        a = np.abs(v)
        if a < top and a == np.floor(a):
            out[i] = np.copysign(table[np.int64(a)], v)
        else:
            rest[n] = i
            n += 1
    return n
