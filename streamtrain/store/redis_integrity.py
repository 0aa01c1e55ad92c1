"""What the redis store refuses to write, and rows that vanished from Redis.

* **Non-finite values never reach Redis.** ``screen`` takes every row a compare-and-set is
  about to send out of it when a weight or an optimizer slot is NaN or infinite: written, such a
  value would reach every trainer and prediction server that reads the row, and stay there. The
  row keeps its stored value; the rows are counted (``stats.nonfinite_rows``, the metric
  ``streamtrain_store_nonfinite_rows_total``) and logged (ERROR). The caller decides what its
  own copy does (the write-back cache drops it and reads the stored row again).
  A row read from Redis with such a value (written before this guard) reads as its initial
  value, counted the same; its tag is kept, so its next write replaces it.
* **Vanished rows.** A row this trainer read or wrote that Redis no longer holds (``FLUSHALL``,
  a restart without persistence, eviction under ``maxmemory``) is counted (``stats.rows_vanished``,
  ``streamtrain_store_rows_vanished_total``) and logged (WARNING); the write-back cache writes
  it again from its local copy (redis_writeback).

Both log at most one line per ``EVERY_S`` seconds, with the counts since the previous line.
"""
from __future__ import annotations

import logging
import threading
import time

import numpy as np

log = logging.getLogger("streamtrain.store.redis")
EVERY_S = 10.0


class Report:
    """Counts by parameter, logged at most every ``EVERY_S`` seconds (thread-safe: the
    write-back flush thread reports too)."""

    def __init__(self, level: int, text: str):
        self.level, self.text = level, text
        self.pending: dict[str, int] = {}
        self.next_at = 0.0
        self._lock = threading.Lock()

    def add(self, counts: dict[str, int]) -> None:
        """``{parameter: rows}`` more to report."""
        counts = {name: int(n) for name, n in counts.items() if n > 0}
        if not counts:
            return
        with self._lock:
            for name, n in counts.items():
                self.pending[name] = self.pending.get(name, 0) + n
            now = time.monotonic()
            if now < self.next_at:
                return
            self.next_at = now + EVERY_S
            counts, self.pending = self.pending, {}
        where = ", ".join(f"{n} of '{name}'" for name, n in sorted(counts.items()))
        log.log(self.level, "redis store: %d rows (%s) %s", sum(counts.values()), where, self.text)


class Integrity:
    """One store's guard (``store.integrity``): ``screen`` a compare-and-set's rows, report
    ``vanished`` ones; both counted in the store's ``stats``."""

    def __init__(self, stats):
        self.stats = stats
        self._lock = threading.Lock()
        self.nonfinite = Report(logging.ERROR, "not written: a weight or optimizer slot is NaN or infinite "
                                               "(the stored row is kept)")
        self.held = Report(logging.ERROR, "held a NaN or infinite value in Redis: read as their initial value "
                                          "(replaced at their next write)")
        self.lost = Report(logging.WARNING, "vanished from Redis (FLUSHALL? a restart without persistence? "
                                            "eviction under maxmemory?): written again from this trainer's copy")

    def screen(self, parts: list) -> tuple[list, list[np.ndarray]]:
        """``parts`` of a compare-and-set (``(rows item, row numbers, expected tags, values)``)
        without the rows whose values are not finite, and per part the mask of those taken out."""
        kept, refused, counts = [], [], {}
        for part in parts:
            it, rows, expected, values = part
            bad = ~it.layout.finite(values)
            refused.append(bad)
            if not bad.any():
                kept.append(part)
                continue
            counts[it.name] = counts.get(it.name, 0) + int(bad.sum())
            ok = ~bad
            kept.append((it, rows[ok], expected[ok], values[ok]))
        if counts:
            with self._lock:
                self.stats.nonfinite_rows += sum(counts.values())
            self.nonfinite.add(counts)
        return kept, refused

    def corrupt(self, name: str, n: int) -> None:
        """``n`` rows of ``name`` read from Redis hold a NaN or an infinity: count and log them."""
        with self._lock:
            self.stats.nonfinite_rows += int(n)
        self.held.add({name: n})

    def vanished(self, name: str, n: int) -> None:
        """``n`` rows of ``name`` this trainer held are gone from Redis: count and log them."""
        if n:
            with self._lock:
                self.stats.rows_vanished += int(n)
            self.lost.add({name: n})
