"""CSV with a header: label, numeric (dense), multi-valued and plain categorical columns.

The header comes from ``set_header(line)`` (the file reader passes each file's first line),
from the ``columns`` option (streams without a header), or else from the first line parsed.
A field may be quoted (RFC 4180, as Python's ``csv`` writes it: ``"a,b"``, a quote inside
doubled); a chunk with a quote is parsed by the vectorised path after ``csv_quotes.unquoted``
takes its quotes out. ``hash_as: {column: other}`` gives a column's values the ids they have in ``other`` (one id space for both: a graph job with
``graph.ids: shared`` sets it for its ``dst`` column).
"""
from __future__ import annotations

import csv
import difflib
import logging

import numpy as np

from streamtrain.batch import Batch, SparseField
from streamtrain.errors import ReaderError
from streamtrain.schema import Option

from . import malformed as mf
from .batching import field_from_rows, fields_from_columns, offsets_from_counts
from .csv_kernel import CsvPlan, parse_clean
from .csv_quotes import unquoted
from .csv_sniff import warn_decimal_columns
from .formats import COMMON_OPTIONS, TRANSFORM, Parser, register
from .ids import field_seed, hash_spans
from .lines import Chunk, fixed_fields, split
from .numbers import parse_spans, signed_log1p

log = logging.getLogger("streamtrain.readers")


def _names(v) -> str | None:
    if v is None or all(isinstance(x, str) for x in v):
        return None
    return f"expected a list of column names, got {v!r}"


def _aliases(v) -> str | None:
    if all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        return None
    return f"expected {{column: column}}, got {v!r}"


def _one_byte(d) -> str | None:
    if len(d.encode()) == 1 and d not in "\r\n":
        return None
    return f"expected one single-byte character, got {d!r}"


@register
class CsvParser(Parser):
    kind = "csv"
    options = {
        **COMMON_OPTIONS,
        "columns": Option(None, (list, type(None)), check=_names, doc="column names (no header line)"),
        "label": Option("label", (str,), doc="the label column"),
        "numeric": Option([], (list,), check=_names, doc="dense columns"),
        "multivalue": Option({}, (dict,), doc="{column: separator} of multi-valued columns"),
        "drop": Option([], (list,), check=_names, doc="columns left out"),
        "delimiter": Option(",", (str,), check=_one_byte, doc="the column separator"),
        "numeric_transform": TRANSFORM,
        "hash_as": Option({}, (dict,), check=_aliases,
                          doc="{column: other column}: the column's values get the ids they have in the other"),
    }

    def __init__(self, options=None, malformed=None):
        super().__init__(options, malformed)
        o = self.opts
        self.delimiter = o.get("delimiter", ",").encode()
        self.label_col = o.get("label", "label")
        self.numeric = list(o.get("numeric", []))
        self.multivalue = dict(o.get("multivalue", {}))
        self.drop = set(o.get("drop", []))
        self.hash_as = dict(o.get("hash_as", {}))
        self.transform = o.get("numeric_transform", "log1p")
        self.columns: list[str] | None = None
        self.sniffed = 0
        if o.get("columns") is not None:
            self._plan(list(o["columns"]))

    @classmethod
    def check_options(cls, options):
        problems = super().check_options(options)
        d, mv = options.get("delimiter", ","), options.get("multivalue", {})
        for col, sep in (mv.items() if isinstance(mv, dict) else ()):
            if not isinstance(sep, str) or _one_byte(sep) or sep == d:
                problems.append((f"multivalue.{col}", "separator must be one single-byte "
                                 f"character other than the delimiter, got {sep!r}"))
        return problems

    @classmethod
    def test_params(cls):
        return {"options": {"numeric": ["age"], "multivalue": {"tags": "|"}},
                "lines": ["label,user,age,tags", "1,u1,31,a|b", "0,u2,x,c", "1,u3,40,"], "rows": 2}

    @property
    def needs_header(self) -> bool:
        return self.opts.get("columns") is None

    def set_header(self, line) -> None:
        if isinstance(line, bytes):
            line = line.decode("utf-8-sig", errors="replace")
        row = next(csv.reader([line.rstrip("\r\n")], delimiter=self.delimiter.decode()), [])
        cols = [c.strip().strip('"') for c in row]
        self._plan(cols)

    def _plan(self, cols: list[str]) -> None:
        cols = _distinct(cols)
        missing = [c for c in [self.label_col, *self.numeric, *self.multivalue] if c not in cols]
        if missing:
            hint = next((f"; the header looks {name}-separated: set reader.delimiter to {d!r}"
                         for d, name in ((";", "semicolon"), ("\t", "tab"), ("|", "pipe"), (",", "comma"))
                         if len(cols) == 1 and d != self.delimiter.decode() and d in cols[0]), "")
            hint = hint or _nearest(missing, cols) or _data_hint(cols)
            if not hint and self.label_col in missing:
                hint = (f"; reader.label names the label column (now {self.label_col!r}), e.g. "
                        f"--set reader.label={cols[0]}")
            raise ReaderError(f"csv columns {cols} lack {missing} (label / numeric / multivalue "
                              f"options name columns that are not in the header){hint}")
        self.columns = cols
        idx = {c: i for i, c in enumerate(cols)}
        self.label_idx = idx[self.label_col]
        self.num_idx = [idx[c] for c in self.numeric]
        self.mv = [(c, idx[c], ord(s)) for c, s in self.multivalue.items()]
        taken = {self.label_col, *self.numeric, *self.multivalue, *self.drop}
        self.cat = [c for c in cols if c not in taken]
        self.cat_idx = [idx[c] for c in self.cat]
        self.cat_seeds = np.array([field_seed(self.hash_as.get(c, c)) for c in self.cat], dtype=np.uint64)
        self.plan = CsvPlan(len(cols), self.label_idx, self.num_idx, self.cat_idx, self.cat_seeds, self.mv,
                            [field_seed(self.hash_as.get(c, c)) for c, _, _ in self.mv], self.delimiter)

    def parse(self, lines) -> Batch:
        lines = list(lines)
        if self.columns is None and lines:
            self.set_header(lines[0])
            lines = lines[1:]
        return super().parse(lines)

    def parse_compiled(self, buf: bytes, start: int = 0, end: int | None = None, lines: int = -1):
        self._need_header()
        self._sniff(buf, start, end)
        clean = parse_clean(buf, self.plan, self.field_length, start, end, lines)
        if clean is None:
            return None
        vals, dense, ids, present, multi = clean
        labels = self.labels.all_valid(vals)
        if labels is None:
            return None
        if self.transform == "log1p":
            dense = signed_log1p(dense)
        sparse = dict(zip(self.cat, fields_from_columns(ids, present))) if self.cat_idx else {}
        for (name, _, _), (mv_ids, counts) in zip(self.mv, multi):
            sparse[name] = SparseField(mv_ids, offsets_from_counts(counts))
        return Batch(labels=labels, sparse=sparse, dense=dense.astype(np.float32),
                     dense_names=tuple(self.numeric))

    def _need_header(self) -> None:
        if self.columns is None:
            raise ReaderError("csv parser has no header: give option 'columns' or call set_header()")

    def _sniff(self, buf, start: int = 0, end: int | None = None, delimiter: bytes | None = None) -> None:
        """Once, on the first rows parsed: warn about categorical columns of decimals."""
        if self.sniffed < 64:   # until a sample had enough rows to tell, or 64 tries
            stop = len(buf) if end is None else end
            told = warn_decimal_columns(bytes(buf[start:min(stop, start + (1 << 16))]), delimiter or self.delimiter,
                                        self.columns, self.cat_idx)
            self.sniffed = 64 if told is not None else self.sniffed + 1

    def parse_chunk(self, chunk: Chunk) -> Batch:
        self._need_header()
        chunk, delimiter = unquoted(chunk, self.delimiter)     # (Chunk.rewritten: marks shared)
        self._sniff(chunk.buf, delimiter=delimiter)
        spans = split(chunk, delimiter, max_length=self.field_length)
        rows, st, en = fixed_fields(chunk, spans, len(self.columns))
        labels, keep = self.labels.parse(chunk, st[:, self.label_idx], en[:, self.label_idx])
        self._mark_rows(chunk, rows, ~keep, mf.LABEL)
        vals = np.zeros((len(rows), len(self.num_idx)))
        if self.num_idx:
            vals, ok, empty = parse_spans(chunk, st[:, self.num_idx], en[:, self.num_idx])
            num_ok = (ok | empty).all(axis=1)
            self._mark_rows(chunk, rows, ~num_ok, mf.NUMBER)
            keep &= num_ok
        if not keep.all():
            labels, vals, st, en = labels[keep], vals[keep], st[keep], en[keep]
        if self.transform == "log1p":
            vals = signed_log1p(vals)
        sparse = {}
        if self.cat_idx:
            cst, clen = st[:, self.cat_idx], en[:, self.cat_idx] - st[:, self.cat_idx]
            ids = hash_spans(chunk.words, cst, clen, self.cat_seeds[None, :]).T
            present = (clen > 0).T
            sparse = dict(zip(self.cat, fields_from_columns(ids, present)))
        for name, j, sep in self.mv:
            sparse[name] = _multivalue_field(chunk, self.hash_as.get(name, name), st[:, j], en[:, j], sep)
        self._finish(chunk)
        return Batch(labels=labels, sparse=sparse, dense=vals.astype(np.float32),
                     dense_names=tuple(self.numeric))


def _data_hint(cols: list[str]) -> str:
    """'; ... looks like data' when the first line has a number where a header has names."""
    numbers = [c for c in cols if c.strip().lstrip("+-").replace(".", "", 1).isdigit()]
    if numbers:
        return (f"; the first line looks like data, not a header ({numbers[0]!r} is a number): name the "
                f"columns with reader.columns (a list, in order)")
    return ""


def _nearest(missing: list[str], cols: list[str]) -> str:
    """'; did you mean ...' for the missing names with a column of nearly their name."""
    lowered = {c.lower(): c for c in cols}
    near = {m: lowered.get(m.lower()) or next(iter(difflib.get_close_matches(m, cols, 1, 0.75)), None)
            for m in missing}
    said = [f"{near[m]!r} for {m!r}" for m in missing if near[m]]
    return f"; did you mean {', '.join(said)}?" if said else ""


def _distinct(cols: list[str]) -> list[str]:
    """Column names made distinct as pandas' ``read_csv`` makes them: a repeated ``a`` is
    ``a.1``, then ``a.2`` (a name taken already is skipped); said in a warning."""
    seen, out = set(cols), []
    for i, c in enumerate(cols):
        if c in cols[:i]:
            k = 1
            while f"{c}.{k}" in seen:
                k += 1
            log.warning("csv header: column %d is named %r as an earlier one: read as %r", i + 1, c, f"{c}.{k}")
            c = f"{c}.{k}"
            seen.add(c)
        out.append(c)
    return out


def _multivalue_field(chunk: Chunk, name: str, st: np.ndarray, en: np.ndarray, sep: int):
    """Split each row's span at ``sep``; empty parts are dropped (an empty cell = no ids);
    the parts are hashed as values of column ``name``."""
    q = np.flatnonzero(chunk.arr == sep)
    if len(st) and len(q):
        r = np.searchsorted(st, q, side="right") - 1
        inside = (r >= 0) & (q < en[np.maximum(r, 0)])
        q = q[inside]
    else:
        q = q[:0]
    lefts = np.sort(np.concatenate([st, q + 1]))
    rights = np.sort(np.concatenate([q, en]))
    lengths = rights - lefts
    nonempty = lengths > 0
    lefts, lengths = lefts[nonempty], lengths[nonempty]
    row = np.searchsorted(st, lefts, side="right") - 1
    ids = hash_spans(chunk.words, lefts, lengths, field_seed(name))
    return field_from_rows(ids, row, len(st))
