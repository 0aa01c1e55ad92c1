"""RESP encoding of many arguments at once (numpy), for the store's big commands.

hiredis' ``pack_command`` formats every argument on its own, with the GIL held: the keys of a
push (a few thousand per batch, in MGETs and compare-and-set scripts) took ~18 % of the trainer's
Python time (BENCHMARKS.md, issue 11, "Redis store push"). Row keys come as numpy ``S`` arrays
of one width per table, so ``run_of`` encodes a whole array as ``$<width>\\r\\n<key>\\r\\n`` rows
in one numpy copy. A ``Run`` is such a block of arguments already encoded; ``pack`` writes a
command that mixes plain arguments and runs.

>>> pack(("MGET", run_of(np.array([b"ab", b"cd"])), 7))
b'*4\\r\\n$4\\r\\nMGET\\r\\n$2\\r\\nab\\r\\n$2\\r\\ncd\\r\\n$1\\r\\n7\\r\\n'
>>> run_of(np.array([b"abc", b"d"])).count      # elements shorter than the width: one by one
2
"""
from __future__ import annotations

import numpy as np


class Run(bytes):
    """``count`` command arguments, already RESP-encoded one after the other."""
    count: int

    def __new__(cls, data: bytes, count: int) -> "Run":
        obj = super().__new__(cls, data)
        obj.count = count
        return obj


def pack_arg(arg) -> bytes:
    """One argument as RESP."""
    if isinstance(arg, str):
        arg = arg.encode()
    elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
        arg = repr(arg).encode()            # as redis-py encodes numbers
    elif not isinstance(arg, bytes):
        arg = bytes(arg)
    return b"$%d\r\n%s\r\n" % (len(arg), arg)


def run_of(values: np.ndarray) -> Run:
    """The elements of a numpy ``S`` array as one run of arguments, in order."""
    values = np.ascontiguousarray(values)
    n, width = len(values), values.dtype.itemsize
    raw = values.view(np.uint8).reshape(n, width)
    if n and width and raw[:, -1].all():            # every element uses the full width (row keys)
        head = np.frombuffer(b"$%d\r\n" % width, np.uint8)
        mat = np.empty((n, len(head) + width + 2), np.uint8)
        mat[:, :len(head)] = head
        mat[:, len(head):len(head) + width] = raw
        mat[:, -2:] = (13, 10)
        return Run(mat.tobytes(), n)
    return Run(b"".join(pack_arg(v) for v in values.tolist()), n)     # numpy drops trailing NULs here


def pack(command) -> bytes:
    """One command whose arguments are str, bytes, numbers or ``Run`` blocks, as RESP."""
    parts, count = [], 0
    for arg in command:
        if isinstance(arg, Run):
            parts.append(arg)
            count += arg.count
        else:
            parts.append(pack_arg(arg))
            count += 1
    return b"*%d\r\n" % count + b"".join(parts)


def has_runs(command) -> bool:
    return any(isinstance(a, Run) for a in command)
