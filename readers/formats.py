"""Line formats: the ``Parser`` interface, label rules, and the ``make_parser`` factory.

A parser turns a chunk of raw lines into one ``Batch``. Lines that cannot be used are skipped
and counted in ``parser.malformed`` by reason; a line with no bad part is never dropped.

>>> p = make_parser("libsvm", {})
>>> b = p.parse([b"1 3:0.5 7:1", b"-1 3:2", b"oops"])
>>> b.labels.tolist(), b.sparse["features"].offsets.tolist(), p.malformed.counts["label"]
([1.0, 0.0], [0, 2, 3], 1)
"""
from __future__ import annotations

import math

import numpy as np

from streamtrain.batch import Batch

from . import malformed as mf
from .lines import Chunk
from .malformed import Malformed
from .numbers import parse_spans

COMMON_OPTIONS = ("labels", "label_map", "field_length")
FIELD_LENGTH = 65536    # bytes; a longer field makes its line malformed (``field_length``)


class LabelRule:
    """Labels: parsed as numbers, mapped (``label_map``), then checked against ``labels``.

    ``labels=None`` accepts any finite number (regression); the default is ``[0, 1]``.
    """

    def __init__(self, labels=(0, 1), label_map=None):
        self.allowed = None if labels is None else np.array(sorted(float(x) for x in labels))
        self.mapping = [(float(k), float(v)) for k, v in (label_map or {}).items()]

    def parse(self, chunk: Chunk, starts, ends):
        """(labels float32, ok bool) of the label spans."""
        vals, ok, _ = parse_spans(chunk, starts, ends)
        if self.mapping:
            src = vals.copy()
            for k, v in self.mapping:
                vals[src == k] = v
        if self.allowed is not None:
            ok &= np.isin(vals, self.allowed)
        return vals.astype(np.float32), ok


class Parser:
    """Base class: ``parse(lines) -> Batch``; subclasses implement ``parse_chunk``."""

    name = ""
    OPTIONS: tuple[str, ...] = ()
    DEFAULT_LABEL_MAP: dict = {}

    def __init__(self, options: dict | None = None, malformed: Malformed | None = None):
        options = dict(options or {})
        problems = self.check_options(options)
        if problems:
            from streamtrain.errors import ConfigError
            raise ConfigError(problems)
        self.options = options
        self.malformed = malformed if malformed is not None else Malformed()
        self.labels = LabelRule(options.get("labels", (0, 1)),
                                options.get("label_map", self.DEFAULT_LABEL_MAP))
        self.field_length = options.get("field_length", FIELD_LENGTH)

    # -- interface ---------------------------------------------------------------------------
    def parse(self, lines) -> Batch:
        """Parse raw lines (bytes or str, ``\\n`` / ``\\r\\n`` endings tolerated)."""
        return self.parse_chunk(Chunk.from_lines(list(lines)))

    def parse_buffer(self, buf: bytes) -> Batch:
        """Parse whole lines already joined with ``\\n`` (what the file reader hands over)."""
        return self.parse_chunk(Chunk(buf))

    def parse_chunk(self, chunk: Chunk) -> Batch:
        raise NotImplementedError

    def set_header(self, line) -> None:
        """Formats with a header (csv) take it here; the others ignore it."""

    needs_header = False

    # -- options -----------------------------------------------------------------------------
    @classmethod
    def check_options(cls, options: dict) -> list[tuple[str, str]]:
        """Every problem in ``options`` as (key, message); empty when fine."""
        problems = []
        known = set(cls.OPTIONS) | set(COMMON_OPTIONS)
        for key in options:
            if key not in known:
                problems.append((key, f"unknown option for format '{cls.name}' "
                                      f"(known: {', '.join(sorted(known))})"))
        labels = options.get("labels", (0, 1))
        if labels is not None and (not isinstance(labels, (list, tuple)) or not labels
                                   or not all(_is_number(x) for x in labels)):
            problems.append(("labels", f"expected a non-empty list of numbers or null, got {labels!r}"))
        lmap = options.get("label_map", {})
        if not isinstance(lmap, dict) or not all(_is_number(k) and _is_number(v)
                                                 for k, v in (lmap or {}).items()):
            problems.append(("label_map", f"expected {{number: number}}, got {lmap!r}"))
        flen = options.get("field_length", FIELD_LENGTH)
        if isinstance(flen, bool) or not isinstance(flen, int) or flen < 1:
            problems.append(("field_length", f"expected a number of bytes >= 1, got {flen!r}"))
        return problems

    def _finish(self, chunk: Chunk) -> None:
        chunk.report(self.malformed)

    def _mark_rows(self, chunk: Chunk, rows, bad_mask, reason) -> None:
        if bad_mask is not None and bad_mask.any():
            chunk.mark(rows[bad_mask], reason)


def _is_number(x) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return math.isfinite(x)
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def format_classes() -> dict[str, type[Parser]]:
    from .criteo import CriteoParser
    from .csvfmt import CsvParser
    from .libsvm import LibsvmParser
    return {"criteo": CriteoParser, "csv": CsvParser, "libsvm": LibsvmParser}


FORMAT_NAMES = ("criteo", "csv", "libsvm")


def check_format_options(fmt: str, options: dict) -> list[tuple[str, str]]:
    classes = format_classes()
    if fmt not in classes:
        return [("", f"unknown format {fmt!r} (known: {', '.join(sorted(classes))})")]
    return classes[fmt].check_options(options)


def make_parser(fmt: str, options: dict | None = None, malformed: Malformed | None = None) -> Parser:
    """The parser of format ``fmt`` (``criteo`` | ``csv`` | ``libsvm``) with its options."""
    classes = format_classes()
    if fmt not in classes:
        from streamtrain.errors import ConfigError
        raise ConfigError([("format", f"unknown format {fmt!r} (known: {', '.join(sorted(classes))})")])
    return classes[fmt](options or {}, malformed)


__all__ = ["Parser", "LabelRule", "make_parser", "check_format_options", "FORMAT_NAMES", "mf"]
