"""JSON lines: one flat JSON object per line, ``{"label": 1, "price": 3.5, "user": "u1", ...}``.

Options as csv's: ``label`` (key), ``numeric`` (keys read as dense numbers: a number, or
null / absent / ``NaN`` / a string that says missing, ``"NA"``, = 0), ``multivalue`` (keys whose value may be a list: one id per element),
``drop``; every other key is categorical (a string, number or boolean, hashed as its text as it
is written, e.g. ``7``, ``1.50``, ``true``; null or absent = missing). The categorical keys are
the ``columns`` option, else those of the first block of lines parsed, in order of first
appearance (give ``columns`` when a key may be absent from the first lines); others are
ignored. Bad lines are counted: ``decode`` (not UTF-8, not JSON, not an object, a
nested value), ``label`` (absent, not a number, not allowed), ``number`` (a numeric key that is
not a number), ``field_length`` (a value longer than ``field_length``). A label or a numeric
key may also be a boolean (true: 1) or a string holding a number (``"1"``).

Blocks of simple lines (no escapes, no exponents, no nesting, no duplicate keys) take one
compiled pass (``jsonl_kernel``); the others this module's path, which gives the same batches.
"""
from __future__ import annotations

import json
import logging

import numpy as np

from streamtrain.batch import Batch, SparseField
from streamtrain.schema import Option

from . import malformed as mf
from .batching import fields_from_columns, offsets_from_counts
from .csv_sniff import decimal_keys, say_decimal
from .csvfmt import _names, _nearest
from .formats import COMMON_OPTIONS, TRANSFORM, Parser, register
from .ids import hash_values
from .jsonl_kernel import JsonPlan, parse_clean
from .lines import Chunk
from .numbers import in_range, says_missing, signed_log1p

log = logging.getLogger("streamtrain.readers")


class _Text(str):
    """A JSON number kept as written (so a categorical number hashes as its text)."""


def _loads(text: str):
    return json.loads(text, parse_int=_Text, parse_float=_Text, parse_constant=_Text)


def text_number(v) -> float | None:
    """A label's or a numeric key's value: a JSON number, a boolean (true: 1) or a string that
    holds a number (``"1"``, ``"0.5"``, as exports write them); None for anything else."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, str):
        try:
            x = float(v)
        except ValueError:
            return None
        return x if in_range(x) else None
    return None


def _tokens(v, multi: bool):
    """The texts of a categorical value, or None when its shape is not allowed."""
    if v is None:
        return []
    if isinstance(v, bool):
        return ["true" if v else "false"]
    if isinstance(v, str):
        return [str(v)]
    if multi and isinstance(v, list):
        out = []
        for x in v:
            got = _tokens(x, False)
            if got is None:
                return None
            out += got
        return out
    return None


@register
class JsonlParser(Parser):
    kind = "jsonl"
    options = {
        **COMMON_OPTIONS,
        "columns": Option(None, (list, type(None)), check=_names,
                          doc="the categorical keys (default: the first object's)"),
        "label": Option("label", (str,), doc="the label key"),
        "numeric": Option([], (list,), check=_names, doc="dense keys"),
        "multivalue": Option([], (list,), check=_names, doc="keys whose value may be a list"),
        "drop": Option([], (list,), check=_names, doc="keys left out"),
        "numeric_transform": TRANSFORM,
    }

    def __init__(self, options=None, malformed=None):
        super().__init__(options, malformed)
        o = self.opts
        self.label_key = o.get("label", "label")
        self.numeric = list(o.get("numeric", []))
        self.multi = list(o.get("multivalue", []))
        self.drop = set(o.get("drop", []))
        self.transform = o.get("numeric_transform", "log1p")
        self.cat: list[str] | None = None
        if o.get("columns") is not None:
            self._plan(list(o["columns"]))

    @classmethod
    def test_params(cls):
        return {"options": {"numeric": ["age"], "multivalue": ["tags"]},
                "lines": ['{"label": 1, "user": "u1", "age": 31, "tags": ["a", "b"]}',
                          '{"label": 0, "user": "u2", "age": "x"}', '{"label": 1, "user": 7}', "oops"],
                "rows": 2}

    def _plan(self, keys: list[str]) -> None:
        taken = {self.label_key, *self.numeric, *self.multi, *self.drop}
        self.cat = [k for k in keys if k not in taken]
        self.plan = JsonPlan(self.label_key, self.numeric, self.cat, self.multi, skip=sorted(self.drop))

    def _infer(self, chunk: Chunk) -> None:
        keys: dict = {}
        objects = []
        for i in range(chunk.n):
            try:
                obj = _loads(chunk.line(i).decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                continue
            if isinstance(obj, dict):
                keys.update(dict.fromkeys(obj))
                objects.append(obj)
        self._check_keys(list(keys))
        self._plan(list(keys))
        say_decimal("json lines keys", decimal_keys(objects[:2000], self.cat))     # (a sample, as for csv)

    def _check_keys(self, keys: list[str]) -> None:
        """The first lines' keys against the options: a label, numeric or multivalue key none of
        them has is named in a warning, with a near key (a line without its label is a bad line;
        a stream whose every line is ends the run saying so)."""
        if keys and self.label_key not in keys:
            log.warning("json lines: the label key %r (reader.label) is in none of the first lines, whose keys "
                        "are %s: those lines are bad (label)%s", self.label_key, keys,
                        _nearest([self.label_key], keys))
        absent = [k for k in [*self.numeric, *self.multi] if k not in keys] if keys else []
        if absent:
            log.warning("json lines: keys %s (reader.numeric / multivalue) are in none of the first lines, whose "
                        "keys are %s: read as missing until they come%s", absent, keys, _nearest(absent, keys))

    def start_problem(self, block: bytes) -> str | None:
        if block.lstrip()[:1] == b"[":
            return ("it holds a JSON array ('[' first), not JSON lines (one object a line): write one "
                    "object per line, e.g. jq -c '.[]' in.json > in.jsonl")
        return None

    def parse_compiled(self, buf: bytes, start: int = 0, end: int | None = None, lines: int = -1):
        if self.cat is None:                # no keys seen yet: json.loads finds them
            return None
        clean = parse_clean(buf, self.plan, self.field_length, start, end, lines)
        if clean is None:
            return None
        vals, dense, ids, present, multi = clean
        labels = self.labels.all_valid(vals)
        if labels is None:
            return None
        sparse = dict(zip(self.cat, fields_from_columns(ids, present))) if self.cat else {}
        for name, (mv_ids, counts) in zip(self.multi, multi):
            sparse[name] = SparseField(mv_ids, offsets_from_counts(counts))
        return self._batch(labels, dense, sparse)

    def _batch(self, labels, dense, sparse) -> Batch:
        if self.transform == "log1p":
            dense = signed_log1p(dense)
        return Batch(labels=labels, sparse=sparse, dense=np.asarray(dense).astype(np.float32),
                     dense_names=tuple(self.numeric))

    def parse_chunk(self, chunk: Chunk) -> Batch:
        """The reference path: ``json.loads`` per line (numbers kept as written)."""
        if self.cat is None:
            self._infer(chunk)
        labels, dense = [], []
        toks = {k: [] for k in [*self.cat, *self.multi]}
        for i in chunk.good():
            got = self._line(chunk, i)
            if isinstance(got, str):
                chunk.mark(np.array([i]), got)
                continue
            label, nums, values = got
            labels.append(label[0])
            dense.append(nums)
            for k, v in values.items():
                toks[k].append(v)
        self._finish(chunk)
        sparse = {name: self._field(name, col) for name, col in toks.items()}
        d = np.array(dense, dtype=np.float64).reshape(len(labels), len(self.numeric))
        return self._batch(np.array(labels, dtype=np.float32), d, sparse)

    def _field(self, name: str, col: list) -> SparseField:
        counts = np.array([len(t) for t in col], dtype=np.int64)
        flat = [t for ts in col for t in ts]
        ids = hash_values(name, flat) if flat else np.zeros(0, np.uint64)
        return SparseField(np.asarray(ids, dtype=np.uint64), offsets_from_counts(counts))

    def _line(self, chunk: Chunk, i: int):
        """(label, numbers, {key: texts}) of line ``i``, or the reason it is bad."""
        try:
            obj = _loads(chunk.line(i).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return mf.DECODE
        if not isinstance(obj, dict):
            return mf.DECODE
        value = obj.get(self.label_key)
        label = text_number(value)
        if label is None and isinstance(value, str) and not isinstance(value, _Text):
            label = self.labels.word(value)           # label_map's text keys ({"yes": 1})
        if label is None:
            return mf.LABEL
        label, ok = self.labels.apply(np.array([label]), np.ones(1, dtype=bool))
        if not ok[0]:
            return mf.LABEL
        nums = []
        for k in self.numeric:
            v = obj.get(k)
            x = 0.0 if says_missing(v) else text_number(v)
            if x is None:
                return mf.NUMBER
            nums.append(x)
        values = {}
        for k in [*self.cat, *self.multi]:
            got = _tokens(obj.get(k), k in self.multi)
            if got is None:
                return mf.DECODE
            if any(len(t.encode("utf-8")) > self.field_length for t in got):
                return mf.FIELD_LENGTH
            values[k] = got
        return label, nums, values

