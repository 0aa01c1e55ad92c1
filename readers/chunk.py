"""A chunk of whole ``\\n``-ended lines as the compiled parsers read it (criteo, csv, libsvm,
jsonl kernels): its bytes, and an unaligned 8-byte word at every offset, which the hashing reads
past a token's end (masked off). The chunk is copied with zero padding only when the buffer has
no 8 bytes after it: the file reader hands over a piece of its joined blocks as it is (no copy
held under the GIL). Also the pieces the kernels' hottest loops share: a byte or an unaligned
word read straight from the chunk (``byte_at``, ``load_word``), the quote / backslash / control
bytes of a word (``specials``, ``first_byte``) and one counting pass (``lines_and_high``)."""
from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from streamtrain.compiled import njit


def views(buf, start: int = 0, end: int | None = None):
    """(buf, start, end, bytes u8[end - start], words <u8[...]) of ``buf[start:end]`` (``buf``
    and the bounds re-based when it was copied), or None when the chunk is empty or does not
    end with ``\\n``."""
    end = len(buf) if end is None else end
    if end <= start or buf[end - 1] != 10:
        return None
    if len(buf) - end < 8:
        buf, start, end = bytes(buf[start:end]) + bytes(16), 0, end - start
    arr = np.frombuffer(buf, dtype=np.uint8)[start:end]
    words = np.ndarray((len(buf) - start - 7,), dtype="<u8", buffer=buf, offset=start, strides=(1,))
    return buf, start, end, arr, words


def counted_copy(buf, start: int = 0, end: int | None = None):
    """(a zero-padded copy of ``buf[start:end]`` as uint8, its ``\\n`` count) in one compiled
    pass, for a kernel that must copy a chunk with no bytes after it (``views``) and count its
    lines too: one pass over the bytes instead of two. (An OR of the bytes for a high-byte check
    in the same loop stops the compiler vectorising it: twice the time, the cost of a pass.)"""
    end = len(buf) if end is None else end
    padded = np.empty(end - start + 16, np.uint8)
    return padded, _copy_count(np.frombuffer(buf, np.uint8)[start:end], padded)


def copied(buf, start: int = 0, end: int | None = None, lines: int = -1):
    """(buf, start, end, lines) for a kernel: a chunk of whole lines with fewer than 8 bytes
    after it is copied by ``counted_copy`` (its lines counted unless given); any other is handed
    back as it is (``views`` reads it in place)."""
    end = len(buf) if end is None else end
    if len(buf) - end < 8 and end > start and buf[end - 1] == 10:
        padded, n = counted_copy(buf, start, end)
        return padded, 0, end - start, (n if lines < 0 else lines)
    return buf, start, end, lines


@njit(nogil=True)
def _copy_count(src, dst):
    n = 0
    for i in range(len(src)):
        c = src[i]
        dst[i] = c
        n += c == 10
    dst[len(src):] = 0
    return n


def utf8(buf, start: int, end: int) -> bool:
    """Whether ``buf[start:end]`` is valid UTF-8 (checked only when a kernel saw a high byte)."""
    try:
        str(memoryview(buf)[start:end], "utf-8")
        return True
    except UnicodeDecodeError:
        return False


def multi_valued(mv_ids, mv_row, mv_n, rows: int) -> list:
    """A kernel's multi-valued columns as [(ids, counts per row)]: column ``k`` holds
    ``mv_n[k]`` ids, ``mv_row[k]`` the row of each."""
    return [(mv_ids[k, :mv_n[k]], np.bincount(mv_row[k, :mv_n[k]], minlength=rows)) for k in range(len(mv_n))]


@intrinsic
def load_word(typingctx, arr, p):
    """``arr[p:p+8]`` as one little-endian uint64 (an unaligned load; the bytes past ``arr``'s end
    must be there, as ``views`` makes sure), inside compiled code: what ``words[p]`` gives,
    without the strided view's multiply and bounds wrap, for the kernels' hottest loops."""
    sig = types.uint64(arr, types.intp)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        word = builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(word, align=1)
    return sig, codegen


@intrinsic
def store_word(typingctx, arr, p, word):
    """``arr[p:p+8] = word`` (little-endian uint64, an unaligned store; ``p + 8 <= len(arr)`` is
    the caller's to make sure): ``load_word``'s counterpart."""
    sig = types.void(arr, types.intp, types.uint64)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        builder.store(args[2], builder.bitcast(builder.gep(data, [args[1]]), ir.IntType(64).as_pointer()),
                      align=1)
        return context.get_dummy_value()
    return sig, codegen


@intrinsic
def byte_at(typingctx, arr, p):
    """``arr[p]`` for ``0 <= p`` (no wrap of negative indices): a plain load, for the kernels'
    hottest loops."""
    sig = types.uint8(arr, types.intp)

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.load(builder.gep(data, [args[1]]))
    return sig, codegen


_ONES = np.uint64(0x0101010101010101)
_HIGH = np.uint64(0x8080808080808080)
_QUOTES = np.uint64(0x2222222222222222)
_SLASHES = np.uint64(0x5C5C5C5C5C5C5C5C)
_SPACES = np.uint64(0x2020202020202020)


@njit(nogil=True, inline="always")
def specials(w):
    """The bytes of the word ``w`` that are a quote, a backslash or a control byte, as their top
    bits; the lowest set bit is exact (a borrow only ever marks bytes above the first hit)."""
    q, b = w ^ _QUOTES, w ^ _SLASHES
    return (((q - _ONES) & ~q) | ((b - _ONES) & ~b) | ((w - _SPACES) & ~w)) & _HIGH


@njit(nogil=True, inline="always")
def below_or_equal(w, below, equal):
    """The bytes of the word ``w`` below ``below`` (a word of it in every byte, at most 0x80) or
    equal to ``equal`` (likewise), as their top bits; the lowest set bit is exact (``specials``'
    rule: bytes >= 0x80 are never marked as below)."""
    y = w ^ equal
    return (((w - below) & ~w) | ((y - _ONES) & ~y)) & _HIGH


@njit(nogil=True, inline="always")
def first_byte(hit):
    """The index (0..7) of the lowest byte marked in ``hit`` (not 0)."""
    t = np.int64(trailing_zeros(hit))
    return t >> 3


@njit(nogil=True)
def count_lines(arr):
    """The ``\\n`` count of ``arr``."""
    n = 0
    for c in arr:
        if c == 10:
            n += 1
    return n


@njit(nogil=True)
def any_high(arr):
    """Whether any byte is >= 0x80 (one OR over the bytes, which the compiler vectorises)."""
    m = 0
    for c in arr:
        m |= c
    return m >= 128


@njit(nogil=True)
def lines_and_high(arr):
    """(the ``\\n`` count, whether any byte is >= 0x80) in one pass the compiler vectorises."""
    n = 0
    m = 0
    for c in arr:
        m |= c
        n += c == 10
    return n, m >= 128
