"""Counting the input lines a reader had to skip, by reason.

Bad records are counted, never raised (``ReaderError`` is for readers that cannot
start at all). The reasons are a small fixed set so they can become Prometheus
labels with bounded cardinality.
"""
from __future__ import annotations

import threading
from typing import Callable

DECODE = "decode"            # bytes that are not UTF-8
FIELD_COUNT = "field_count"  # wrong number of fields for the format / header
NUMBER = "number"            # a value that must be a number float32 holds (finite) is not
LABEL = "label"              # label missing, not a number, or not in the allowed set
FIELD_LENGTH = "field_length"  # a field longer than the format's ``field_length`` (not hashed)

GRAPH = "graph"              # an edge's endpoint missing or unparseable, or a self-loop (graph section)
TOO_LARGE = "too_large"      # a Kafka record larger than the consumer can fetch (skipped by reference)

REASONS = (DECODE, FIELD_COUNT, NUMBER, LABEL, FIELD_LENGTH, GRAPH, TOO_LARGE)
MEANING = {                  # what each reason says about a line, for the end-of-run summary (``describe``)
    DECODE: "bytes that are not UTF-8 (text in another encoding, as spreadsheets write latin-1 or cp1252: "
            "convert the file, e.g. iconv -f cp1252 -t utf-8), or a JSON line that is not a flat object: a nested "
            "object, or a list under a key not in multivalue (name such keys in drop or multivalue)",
    FIELD_COUNT: "another number of fields than the format or the header has",
    NUMBER: "a value that must be a finite number within float32's range (±3.4e38) is not one",
    LABEL: "a label missing, not a number, or not in the reader's labels; label_map maps other values, "
           "numbers or text, to them",
    FIELD_LENGTH: "a field longer than field_length",
    GRAPH: "an edge's endpoint missing or unparseable, or a self-loop",
    TOO_LARGE: "a Kafka record larger than the consumer can fetch",
}


def describe(counts: dict[str, int]) -> str:
    """The reasons that counted lines, each with its count and meaning.

    >>> describe({"label": 3, "number": 0})[:40]
    'label 3 (a label missing, not a number, '
    >>> describe({"label": 1, "number": 2}).count("; number 2 (")
    1
    """
    return "; ".join(f"{reason} {n} ({MEANING[reason]})" for reason, n in counts.items() if n)


class Malformed:
    """A thread-safe counter of skipped lines per reason, with an optional hook.

    >>> m = Malformed()
    >>> m.add("number"); m.add("label", 2)
    >>> m.counts["label"], m.total
    (2, 3)
    """

    def __init__(self, on_bad: Callable[[bytes, str], None] | None = None):
        self.counts: dict[str, int] = {r: 0 for r in REASONS}
        self.on_bad = on_bad
        self._lock = threading.Lock()

    def add(self, reason: str, n: int = 1) -> None:
        if reason not in self.counts:
            raise ValueError(f"unknown malformed reason {reason!r} (known: {', '.join(REASONS)})")
        with self._lock:
            self.counts[reason] += int(n)

    def report(self, line, reason: str) -> None:
        """Count one bad line and hand it to the ``on_bad`` hook (a dead-letter sink)."""
        self.add(reason)
        if self.on_bad is not None:
            self.on_bad(line, reason)

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self.counts.values())

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def __repr__(self) -> str:
        nonzero = {k: v for k, v in self.snapshot().items() if v}
        return f"Malformed(total={sum(nonzero.values())}, {nonzero})"
