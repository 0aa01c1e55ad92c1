"""glibc's malloc told to keep large buffers in the heap (``keep_large_buffers``), for every job.

A Kafka fetch response is one buffer of up to ``fetch_max_bytes`` (16 MiB by default), and
kafka-python copies it several times on its way to the reader (the frame, the response's
records field, each record batch), each copy a fresh buffer of megabytes. glibc serves every
allocation above its mmap threshold (128 KiB at first; it rises with the sizes freed, but the
top of a thread's heap is trimmed again once 2× that is free) with a new ``mmap``, so each copy
page-faults the whole buffer in (a fault and a zeroed page per 4 KiB) and ``munmap`` / trims
give it back: measured, that was about half the Kafka client's CPU at one line per message
(0.83 → 0.45 CPU-s per million Criteo lines fetched and decoded with the settings below, 3
interleaved rounds each; docs/kafka.md). Training does the same with its own per-batch arrays
of megabytes (an LR batch of 8192 rows: the parsed columns, the unique ids' hash table, the
per-example grids of 2.6 MB each, ...): a file job page-faulted 50-185k times per million rows
without the settings (the count varies with how glibc's threshold happened to rise), ~47k
with them (most of it start-up). Set here with ``mallopt`` (as ``MALLOC_MMAP_THRESHOLD_`` and
``MALLOC_TRIM_THRESHOLD_`` would at process start):

* ``M_MMAP_THRESHOLD`` = 32 MiB (glibc's largest on 64-bit): a fetch-sized buffer comes from the
  heap, reused after it is freed;
* ``M_TRIM_THRESHOLD`` = ``TRIM_BYTES``: up to that much free memory stays at a heap's top
  instead of going back to the system (the price: a process's resident size stays up to that
  much above its live data after a burst).

Only on glibc (``gnu_get_libc_version`` found), and never when the user chose malloc settings
(``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, or ``malloc`` in ``GLIBC_TUNABLES``):
then nothing changes and one log line says why.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger("streamtrain")

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3          # glibc's malloc.h
MMAP_BYTES = 32 << 20
TRIM_BYTES = 256 << 20
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
_applied = False


def _user_chose() -> str | None:
    for var in USER_SETTINGS:
        if var in os.environ:
            return var
    if "malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        return "GLIBC_TUNABLES"
    return None


def keep_large_buffers() -> bool:
    """Apply the settings above (idempotent); True when they are in place."""
    global _applied
    if _applied:
        return True
    chosen = _user_chose()
    if chosen is not None:
        log.info("malloc settings left as %s sets them", chosen)
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        _ = libc.gnu_get_libc_version                       # AttributeError: not glibc
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_BYTES) == 1 and libc.mallopt(M_TRIM_THRESHOLD, TRIM_BYTES) == 1
    except (OSError, AttributeError) as err:
        log.info("malloc settings left as they are (not glibc: %s)", err)
        return False
    if not ok:
        log.info("malloc settings left as they are (mallopt refused them)")
        return False
    _applied = True
    return True
