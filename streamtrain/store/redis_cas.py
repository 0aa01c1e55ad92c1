"""The redis store's compare-and-set retry loop, one for every writer of rows that may race
another trainer: a push writing through (``RedisStore.apply_now``) and a write-back flush
(``WriteBack.flush``).

Each round sends the pending rows of every item (a ``Rows``) in one chunked compare-and-set
(``RedisStore.cas_rows``), each row expecting the version (tag) last read. Rows another writer
changed meanwhile fail the check: they are read again in one round trip and the caller brings
them up to date (a push recomputes its rule on the new value; a flush merges its change into
it), and the next round writes them. After ``max_push_attempts`` rounds that still conflict,
``StoreError``: the write either lands or raises.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from streamtrain.errors import StoreError

_NONE = np.zeros(0, np.int64)


def write_rows(store, items: list, pending: list, values: Callable, done: Callable, reread: Callable,
               what: str, verb: str) -> None:
    """Write ``pending[i]`` (row numbers) of each ``items[i]`` until none conflicts.

    ``values(i, rows)`` → (expected tags, new tags, encoded values) of those rows;
    ``done(i, rows, expected, tags, failed, refused)`` after each answer (``failed``: changed by
    another writer, retried; ``refused``: not finite, never sent); ``reread(i, rows)`` → the
    rows still to write, once the failed ones are read again (``items[i]`` holds their values).
    ``what`` names the compare-and-set for errors and metrics; ``verb`` the write in the
    final error ("push", "flush")."""
    for _ in range(store.cfg.max_push_attempts):
        parts, sent = [], []
        for i, rows in enumerate(pending):
            if len(rows):
                expected, tags, encoded = values(i, rows)
                parts.append((items[i], rows, expected, encoded))
                sent.append((i, rows, expected, tags))
        if not parts:
            return
        failed, refused = store.cas_rows(parts, what)
        retry = {}
        for (i, rows, expected, tags), bad, ref in zip(sent, failed, refused):
            done(i, rows, expected, tags, bad, ref)
            if bad.any():
                retry[i] = rows[bad]
        if not retry:
            return
        store.read_rows([items[i] for i in retry], "re-read rows changed by another trainer", list(retry.values()))
        pending = [reread(i, retry[i]) if i in retry else _NONE for i in range(len(items))]
    raise StoreError(f"redis store: {verb} not applied: rows kept changing under "
                     f"{store.cfg.max_push_attempts} compare-and-set attempts")


def cas_rows(store, parts: list, what: str) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """One chunked compare-and-set over ``(rows item, row numbers, expected tags, values)``.
    Per part: the rows not written because another writer changed them (``failed``), and
    the rows never sent because a value is NaN or infinite (``refused``, redis_integrity)."""
    sent, refused = store.integrity.screen(parts)
    answers = store.io.cas([(it.keys[rows], it.groups[rows], expected, values, it.ttl, it.name,
                             None if it.ids is None else it.ids[rows])
                            for it, rows, expected, values in sent], what=what)
    failed = []
    for (it, rows, _, values), bad, ref in zip(sent, answers, refused):
        done = ~bad
        store.ahead.record(it.name, None if it.ids is None else it.ids[rows[done]], values[done])
        if ref.any():
            full = np.zeros(len(ref), bool)
            full[~ref] = bad
            bad = full
        failed.append(bad)
    return failed, refused
