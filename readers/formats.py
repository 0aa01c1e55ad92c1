"""Line formats: the ``Parser`` interface, label rules, and the ``make_parser`` factory.

A parser turns a chunk of raw lines into one ``Batch``. Lines that cannot be used are skipped
and counted in ``parser.malformed`` by reason; a line with no bad part is never dropped.

>>> p = make_parser("libsvm", {})
>>> b = p.parse([b"1 3:0.5 7:1", b"-1 3:2", b"oops"])
>>> b.labels.tolist(), b.sparse["features"].offsets.tolist(), p.malformed.counts["label"]
([1.0, 0.0], [0, 2, 3], 1)
"""
from __future__ import annotations

import logging
import math

import numpy as np

from streamtrain.batch import Batch
from streamtrain.errors import ConfigError
from streamtrain.registry import Registry
from streamtrain.schema import Option, check_options, positive

from . import malformed as mf
from .lines import Chunk
from .malformed import Malformed
from .numbers import MISSING_TEXT, parse_spans

log = logging.getLogger("streamtrain.readers")
FORMATS = Registry("format", group="streamtrain.formats")
register = FORMATS.register


def _labels(v) -> str | None:
    if v is None or (isinstance(v, (list, tuple)) and v and all(_is_number(x) for x in v)):
        return None
    return f"expected a non-empty list of numbers or null, got {v!r}"


def _label_map(v) -> str | None:
    if isinstance(v, dict) and all((_is_number(k) or (isinstance(k, str) and k.strip())) and _is_number(x)
                                   for k, x in v.items()):
        return None
    return f"expected {{number or text: number}}, e.g. {{\"-1\": 0}} or {{\"yes\": 1, \"no\": 0}}, got {v!r}"


TRANSFORM = Option("log1p", (str,), ("log1p", "none"), doc="numbers as sign(x)·log1p(|x|), or as they are")
COMMON_OPTIONS = {
    "labels": Option([0, 1], check=_labels, doc="the label values accepted; null = any finite number"),
    "label_map": Option({}, check=_label_map, doc='labels replaced before the check, e.g. {"-1": 0}; a text key '
                                                  'maps a label written as text, e.g. {"yes": 1, "no": 0} (any case)'),
    "field_length": Option(65536, (int,), check=positive,
                           doc="bytes; a line with a longer field is skipped as malformed 'field_length'"),
}


POSITIVE = frozenset({"true", "yes", "y", "t", "positive", "pos", "click", "clicked"})  # (the example's 1)


class LabelRule:
    """Labels: parsed as numbers, mapped (``label_map``), then checked against ``labels``.

    ``labels=None`` accepts any finite number (regression); the default is ``[0, 1]``.
    """

    def __init__(self, labels=(0, 1), label_map=None):
        self.allowed = None if labels is None else np.array(sorted(float(x) for x in labels))
        items = (label_map or {}).items()
        self.mapping = [(float(k), float(v)) for k, v in items if _is_number(k)]
        self.words = {str(k).strip().lower().encode(): float(v) for k, v in items if not _is_number(k)}
        self.told = False               # (the warning on numbers outside ``labels``: once)
        self.told_text = False          # (and the one on labels written as text that nothing maps)

    def parse(self, chunk: Chunk, starts, ends):
        """(labels float32, ok bool) of the label spans."""
        vals, ok, _ = parse_spans(chunk, starts, ends)
        if self.words:                  # labels written as text: a loop over the lines that are not numbers
            for i in np.flatnonzero(~ok):
                v = self.word(chunk.buf[starts[i]:ends[i]])
                if v is not None:
                    vals[i], ok[i] = v, True
        if not self.told_text and not ok.all():
            self._text(chunk.buf, starts[~ok], ends[~ok])
        return self.apply(vals, ok)

    def _text(self, buf, starts, ends) -> None:
        """Once: labels written as text that ``label_map`` does not map, named with the setting
        that would (a label left empty is missing: not said here)."""
        seen = []
        for a, b in zip(starts[:1000].tolist(), ends[:1000].tolist()):
            text = bytes(buf[a:b]).strip().strip(b'"').strip().decode("utf-8", "replace")
            if text and text not in seen and text not in MISSING_TEXT:
                seen.append(text)
                if len(seen) == 5:
                    break
        if seen:
            self.told_text = True
            if self.allowed is not None and len(self.allowed) > 2:       # a softmax's classes: 0, 1, 2, ...
                example = ", ".join(f'"{t}": {v:g}' for t, v in zip(seen, self.allowed))
            else:                                                       # a click's: a "yes" first, as 1
                two = sorted(seen[:2], key=lambda t: t.lower() not in POSITIVE)
                example = ", ".join(f'"{t}": {v}' for t, v in zip(two, (1, 0)))
            log.warning("labels %s are text that reader.label_map does not map: their lines are skipped (label); "
                        "map each class to a number, e.g. --set 'reader.label_map={%s}'",
                        ", ".join(repr(t) for t in seen), example)

    def word(self, text) -> float | None:
        """The number ``label_map`` gives a label written as text (any case, quotes and spaces
        around it ignored), or None."""
        if isinstance(text, str):
            text = text.encode()
        return self.words.get(text.strip().strip(b'"').strip().lower())

    def apply(self, vals, ok):
        """(labels float32, ok bool) of parsed label values (``vals`` is changed in place)."""
        if self.mapping:
            src = vals.copy()
            for k, v in self.mapping:
                vals[src == k] = v
        if self.allowed is not None:
            inside = np.isin(vals, self.allowed)
            if not self.told and not inside[ok].all():
                self._outside(vals[ok & ~inside])
            ok &= inside
        return vals.astype(np.float32), ok

    def _outside(self, vals) -> None:
        """Once: labels that are numbers, just not among ``labels``, say what they may mean."""
        self.told = True
        seen = ", ".join(f"{v:g}" for v in np.unique(vals)[:5])
        allowed = ", ".join(f"{v:g}" for v in self.allowed)
        regression = ("A numeric label (a rating, a price) is a regression: run the example linear, or set the "
                      "loss to mse in the first batch's units (--set layers.loss.type=mse --set layers.loss.label_offset=auto "
                      "--set layers.loss.label_scale=auto); c" if set(self.allowed) <= {0.0, 1.0} else "C")
        log.warning("labels %s are numbers outside reader.labels [%s]: their lines are skipped (label). %slasses "
                    "written otherwise are mapped with reader.label_map (e.g. {\"-1\": 0})", seen, allowed, regression)

    def all_valid(self, vals):
        """A compiled pass's labels (float32), or None when one is not allowed: the exact path
        then parses the piece again and names the bad lines."""
        labels, ok = self.apply(vals, np.ones(len(vals), dtype=bool))
        return labels if ok.all() else None


class Parser:
    """Base class: ``parse(lines) -> Batch``; subclasses implement ``parse_chunk``."""

    kind = ""
    options: dict[str, Option] = COMMON_OPTIONS    # a format adds its own: {**COMMON_OPTIONS, ...}
    DEFAULT_LABEL_MAP: dict = {}

    def __init__(self, options: dict | None = None, malformed: Malformed | None = None):
        options = dict(options or {})
        problems = self.check_options(options)
        if problems:
            raise ConfigError(problems)
        self.opts = options
        self.malformed = malformed if malformed is not None else Malformed()
        self.labels = LabelRule(options.get("labels", (0, 1)),
                                options.get("label_map", self.DEFAULT_LABEL_MAP))
        self.field_length = options.get("field_length", COMMON_OPTIONS["field_length"].default)

    # -- interface ---------------------------------------------------------------------------
    def start_problem(self, block: bytes) -> str | None:
        """Why a file whose first lines are ``block`` cannot be in this format at all (None:
        it may be; its lines are judged one by one)."""
        return None

    def parse(self, lines) -> Batch:
        """Parse raw lines (bytes or str, ``\\n`` / ``\\r\\n`` endings tolerated)."""
        return self.parse_chunk(Chunk.from_lines(list(lines)))

    def parse_buffer(self, buf: bytes) -> Batch:
        """Parse whole lines already joined with ``\\n`` (what the file reader hands over):
        through the format's compiled pass (``parse_compiled``) when it takes them, else the
        vectorised ``parse_chunk``; both give the same Batch."""
        fast = self.parse_compiled(buf) if buf else None
        return fast if fast is not None else self.parse_chunk(Chunk(buf))

    def parse_batches(self, buf: bytes, cuts: list[int], start: int = 0,
                      end: int | None = None) -> list[Batch]:
        """The lines of ``buf[start:end]`` as batches cut after lines ``cuts[1:-1]`` (``cuts``
        runs from 0 to the line count), for when a format can build them in one pass; the
        default answers one batch of all the rows, which the file reader then re-cuts (the
        same rows either way)."""
        fast = self.parse_compiled(buf, start, end, cuts[-1])
        return [fast if fast is not None else self.parse_chunk(Chunk(buf[start:end]))]

    def parse_compiled(self, buf: bytes, start: int = 0, end: int | None = None, lines: int = -1) -> Batch | None:
        """The lines of ``buf[start:end]`` (``lines`` of them, -1: not counted) in one compiled
        pass, or None when some line needs ``parse_chunk`` (bad, quoted, escaped …) or the format
        has no such pass (the default)."""
        return None

    def parse_chunk(self, chunk: Chunk) -> Batch:
        raise NotImplementedError

    def set_header(self, line) -> None:
        """Formats with a header (csv) take it here; the others ignore it."""

    needs_header = False

    # -- options -----------------------------------------------------------------------------
    @classmethod
    def check_options(cls, options: dict) -> list[tuple[str, str]]:
        """Every problem in ``options`` as (key, message); empty when fine."""
        return check_options(cls.options, options, what=f"format '{cls.kind}'")

    @classmethod
    def test_params(cls) -> dict:
        """Options and sample lines for the conformance suite: ``{"options", "lines", "rows"}``
        (``rows``: how many of ``lines`` are good)."""
        raise NotImplementedError(f"format '{cls.kind}' has no test_params()")

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


def check_format_options(fmt: str, options: dict) -> list[tuple[str, str]]:
    """The problems of format ``fmt``'s ``options`` (an unknown format at ``format``)."""
    if fmt not in FORMATS:
        return [("format", FORMATS.unknown(fmt))]
    return FORMATS[fmt].check_options(options)


def format_problems(cfg: dict, reserved, default: str | None = None) -> list[tuple[str, str]]:
    """Problems of the format part of a reader config: ``format`` and its options, given
    inline (every key not in ``reserved``) or under ``options``, each reported where it is."""
    fmt = cfg.get("format", default)
    if fmt not in FORMATS:
        return [("format", FORMATS.unknown(fmt))]
    options, where = split_format_options(cfg, reserved)
    out = []
    for key, msg in FORMATS[fmt].check_options(options):
        head = key.split(".")[0]
        out.append((where.get(head, head) + key[len(head):], msg))
    return out


def split_format_options(cfg: dict, reserved) -> tuple[dict, dict]:
    """(format options, the key each came from): inline keys not in ``reserved`` merged with
    the ``options`` object."""
    inline = {k: v for k, v in cfg.items() if k not in reserved}
    nested = cfg.get("options") if isinstance(cfg.get("options"), dict) else {}
    where = {k: k for k in inline}
    where.update({k: f"options.{k}" for k in nested})
    return {**inline, **nested}, where


def make_parser(fmt: str, options: dict | None = None, malformed: Malformed | None = None) -> Parser:
    """The parser of format ``fmt`` (``criteo`` | ``csv`` | ``libsvm`` | a plug-in) with its options."""
    return FORMATS.get(fmt, where="format")(options or {}, malformed)


__all__ = ["FORMATS", "register", "Parser", "LabelRule", "make_parser", "check_format_options",
           "format_problems", "split_format_options", "mf"]
