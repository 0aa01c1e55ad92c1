"""Quoted CSV fields (RFC 4180): a chunk's quotes taken out in one compiled pass.

A field that starts with ``"`` runs to the next ``"`` that is not doubled; inside it the
delimiter is text and ``""`` is one ``"``; after its closing quote comes the delimiter or the
line's end. ``unquoted`` rewrites every line of a chunk so that its fields are split by a byte
that occurs nowhere in the chunk (``\\x1f``, the unit separator, unless that is taken) and its
values carry no quotes; the parser then splits the rewritten chunk as it splits any other, so
``"a,b"`` and ``a`` hash as the values ``a,b`` and ``a`` (as Python's ``csv`` module reads them).
A quote inside an unquoted field is text (``5"`` is ``5"``), as in ``csv``. A line whose quote
never closes, or whose closing quote is followed by anything but the delimiter, is marked
``field_count``. A quoted field cannot hold a line break: lines are split first.
"""
from __future__ import annotations

import numpy as np

from streamtrain.compiled import njit

from . import malformed as mf
from .lines import Chunk

QUOTE = ord('"')
SUBSTITUTES = b"\x1f\x1e\x1d\x1c\x01\x02\x03\x04"


@njit(nogil=True)
def _unquote(arr, starts, text_ends, line_ends, skip, delim, sub, quote):
    """Each line's fields split by ``sub``, quotes taken out; (bytes, bad lines)."""
    out = np.empty(len(arr), np.uint8)          # never longer than the input
    bad = np.zeros(len(starts), np.bool_)
    o = 0
    for i in range(len(starts)):
        s, e = starts[i], text_ends[i]
        if skip[i]:                             # already bad: kept as it is
            for j in range(s, e):
                out[o] = arr[j]
                o += 1
        else:
            j, field_start, quoted = s, True, False
            while j < e:
                b = arr[j]
                if quoted:
                    if b != quote:
                        out[o] = b
                        o += 1
                    elif j + 1 < e and arr[j + 1] == quote:
                        out[o] = quote
                        o += 1
                        j += 1
                    else:
                        quoted = False
                        if j + 1 < e and arr[j + 1] != delim:
                            bad[i] = True
                elif b == delim:
                    out[o] = sub
                    o += 1
                    field_start = True
                    j += 1
                    continue
                elif b == quote and field_start:
                    quoted = True
                else:
                    out[o] = b
                    o += 1
                field_start = False
                j += 1
            if quoted:
                bad[i] = True
        for j in range(e, line_ends[i] + 1):    # the line's '\r\n' or '\n'
            out[o] = arr[j]
            o += 1
    return out[:o], bad


def unquoted(chunk: Chunk, delimiter: bytes) -> tuple[Chunk, bytes]:
    """(the chunk rewritten, its new delimiter), or (``chunk``, ``delimiter``) when it holds no
    quote or every candidate delimiter byte occurs in it (``Chunk.rewritten``: marks shared, bad
    lines reported as written)."""
    if b'"' not in chunk.buf:
        return chunk, delimiter
    sub = next((bytes([c]) for c in SUBSTITUTES if bytes([c]) not in chunk.buf), None)
    if sub is None:
        return chunk, delimiter
    out, bad = _unquote(chunk.arr, chunk.line_start, chunk.text_end, chunk.line_end, chunk.reason != 0,
                        delimiter[0], sub[0], QUOTE)
    work = chunk.rewritten(out.tobytes())
    work.mark(np.flatnonzero(bad), mf.FIELD_COUNT)
    return work, sub
