"""A prediction request's body → a ``Batch`` on the model's fields, or a ``BadRequest`` naming
the record (or line) and the field that was wrong.

* JSON ``{"records": [{field: value, ...}, ...]}`` in the plug-in readers' dict form
  (``readers/records.py``): a categorical field takes a string, integer, boolean or a list of
  them (multi-valued); a numeric field a number; ``null`` or a missing key is a missing value;
  ``label`` is ignored; any other key is an error (a misspelt field would silently read as missing).
* ``text/plain``: lines in the stream's own format (``reader.format``, label column included,
  its value ignored); for ``csv`` the first line is the header.
"""
from __future__ import annotations

import functools
import operator

import numpy as np

from streamtrain.batch import Batch, SparseField
from streamtrain.compiled import njit
from streamtrain.graph import Schema
from streamtrain.readers import Malformed, make_parser
from streamtrain.readers.ids import byte_words, field_seed, hash_spans, joined
from streamtrain.readers.jsonl import text_number as jsonl_number
from streamtrain.readers.numbers import IN_RANGE, in_range, says_missing, signed_log1p

from . import json_body
from .json_body import encode as encode_json, printable, shown  # noqa: F401 (encode_json: http.py's import)


class BadRequest(ValueError):
    """400: the client sent something this model cannot read; ``where`` locates it."""

    def __init__(self, where: str, message: str, status: int = 400, kind: str = "bad_request"):
        where, message = printable(where), printable(message, 2000)     # quoted client text: valid UTF-8
        super().__init__(f"{where}: {message}" if where else message)
        self.where, self.message, self.status, self.kind = where, message, status, kind

    def body(self) -> dict:
        return {"error": self.kind, "where": self.where, "message": self.message}


class TooLarge(BadRequest):
    def __init__(self, message: str):
        super().__init__("", message, status=413, kind="too_large")


_NUMBER = {int, float, type(None)}
_CATEGORY = {str, int, bool, type(None)}
_FINITE = f"expected {IN_RANGE}"


def records_batch(payload, schema: Schema, max_records: int, hash_as: dict | None = None,
                  transform: str = "none", separators: dict | None = None, numbers_as_text: bool = False):
    """The batch of a JSON payload (already decoded), built column by column: the same ids as
    ``records_to_batch`` (the plug-in readers' path) gives for the same records, or, with
    ``hash_as`` ``{field: other}``, as the csv reader's option of that name gives them; the
    numbers as they are, or with ``transform`` ``log1p`` as sign(x)·log1p(|x|), as the
    csv, criteo and jsonl readers give them; a string in a column of ``separators``
    ``{column: separator}`` split there, as a csv reader's ``multivalue`` columns are; with
    ``numbers_as_text`` a numeric field's string holding a number, boolean or missing marker
    (``"3.5"``, ``true``, ``"NA"``) read as the jsonl reader reads it.

    Every record's values are gathered in one pass (``map(record.get, names)``); the common
    case, every categorical value one string or integer and every numeric one a number, is then
    checked and converted a whole column block at a time. Anything else takes the
    field-by-field path, which also names the first bad record and field."""
    if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
        raise BadRequest("", 'expected a JSON object {"records": [{field: value, ...}, ...]}')
    records = payload["records"]
    if len(records) > max_records:
        raise TooLarge(f"{len(records)} records in one request (serve.max_records = {max_records})")
    if not records:
        raise BadRequest("records", "empty: send at least one record")
    known = _known(schema)
    for i, rec in enumerate(records):
        if type(rec) is not dict:
            raise BadRequest(f"records[{i}]", f"expected an object of fields, got {type(rec).__name__}")
        if not rec.keys() <= known:
            key = next(k for k in rec if k not in known)
            raise BadRequest(f"records[{i}].{key}", f"unknown field (the model's fields: {_fields(schema)})")
    for name, sep in (separators or {}).items():
        for rec in records:
            if type(rec.get(name)) is str:
                rec[name] = [part for part in rec[name].split(sep) if part]
    if numbers_as_text:
        _numbers_read_as_jsonl(records, schema.dense)
    n, n_sparse = len(records), len(schema.sparse)
    names = (*schema.sparse, *schema.dense)
    cols = list(zip(*_values(records, names))) if names else []
    dense = _dense_block(cols[n_sparse:], n) if schema.dense else np.zeros((n, 0), np.float32)
    if dense is None:
        dense = _dense_columns(records, schema)
    if transform == "log1p" and dense.size:
        dense = signed_log1p(dense)
    hashed = tuple((hash_as or {}).get(f, f) for f in schema.sparse)      # the name each is hashed as
    sparse = _single_tokens(schema.sparse, cols[:n_sparse], n, hashed) if n_sparse else {}
    if sparse is None:
        parts = [_categorical(name, list(col)) for name, col in zip(schema.sparse, cols)]
        try:
            sparse = _fields_csr(schema.sparse, parts, n, hashed)
        except UnicodeEncodeError:
            _name_unencodable(schema.sparse, cols)
    return Batch(labels=np.full(n, np.nan, np.float32), sparse=sparse, dense=dense,
                 dense_names=tuple(schema.dense))


def _values(records, names) -> list:
    """Every record's values of ``names`` (None where absent), a tuple per record."""
    try:
        return list(map(_getter(names), records))         # every record has every field: in C
    except KeyError:
        return [tuple(map(rec.get, names)) for rec in records]


@functools.lru_cache(maxsize=64)
def _getter(names: tuple):
    return operator.itemgetter(*names) if len(names) > 1 else lambda rec: (rec[names[0]],)


@functools.lru_cache(maxsize=64)
def _known_of(sparse: tuple, dense: tuple) -> frozenset:
    return frozenset((*sparse, *dense, "label"))


def _known(schema: Schema) -> frozenset:
    return _known_of(tuple(schema.sparse), tuple(schema.dense))


def _dense_block(cols, n) -> np.ndarray | None:
    """The numeric columns as float32 ``[n, len(cols)]`` (missing = 0), or None when a value
    is not a finite number (the caller names it)."""
    flat = [v for col in cols for v in col]
    types = set(map(type, flat))
    if not types <= _NUMBER:
        return None
    if type(None) in types:
        flat = [0.0 if v is None else v for v in flat]
    try:
        arr = np.array(flat, np.float64)
    except OverflowError:               # an integer beyond float64
        return None
    with np.errstate(over="ignore", invalid="ignore"):
        arr = arr.astype(np.float32)    # beyond float32's range: inf, named by the caller
    if not np.isfinite(arr).all():
        return None
    return np.ascontiguousarray(arr.reshape(len(cols), n).T)


def _dense_columns(records, schema: Schema) -> np.ndarray:
    """Column by column, naming the first record whose value is not a finite float32."""
    dense = np.zeros((len(records), len(schema.dense)), np.float32)
    for j, name in enumerate(schema.dense):
        col = [r.get(name) for r in records]
        bad = next((i for i, v in enumerate(col) if not _finite_number(v)), None)
        if bad is not None:
            raise BadRequest(f"records[{bad}].{name}", f"numeric field: {_FINITE}, got {shown(col[bad])}")
        dense[:, j] = np.array([0.0 if v is None else v for v in col], np.float64)
    return dense


def _single_tokens(names, cols, n, hashed) -> dict | None:
    """Every categorical field's CSR pair when each value is one non-empty string or integer
    (one id per record and field), else None."""
    flat = [v for col in cols for v in col]
    types = set(map(type, flat))
    spans = None
    if types == {int}:
        spans = _decimal_spans(flat)
    if spans is None:
        if types == {str}:
            tokens = flat
        elif types <= {str, int}:
            tokens = list(map(str, flat))
        else:
            return None
        if "" in tokens:
            return None
        try:
            spans = _text_spans(tokens)
        except UnicodeEncodeError:      # a lone surrogate: the field-by-field path names it
            return None
    buf, starts, lengths = spans
    ids = hash_spans(byte_words(buf + bytes(16)), starts, lengths, np.repeat(_seeds(hashed), n))
    offsets = np.arange(n + 1, dtype=np.int64)       # one id per record: every field's offsets, shared
    offsets.flags.writeable = False
    return {name: SparseField(ids[f * n:(f + 1) * n], offsets) for f, name in enumerate(names)}


def _text_spans(tokens: list) -> tuple:
    """(UTF-8 buffer, start, byte length) of every token, joined end to end."""
    text = "".join(tokens)
    buf = text.encode("utf-8")
    if len(buf) == len(text):                       # ASCII: byte lengths are character lengths
        lengths = np.fromiter(map(len, tokens), np.int64, len(tokens))
    else:
        encoded = [t.encode("utf-8") for t in tokens]
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return buf, starts, lengths


def _decimal_spans(values: list) -> tuple | None:
    """The decimal strings of integers (what ``str`` gives) as (buffer, starts, lengths); None
    beyond int64."""
    try:
        v = np.array(values, np.int64)
    except OverflowError:
        return None
    buf, starts, lengths = _decimal_bytes(v)
    return buf.tobytes(), starts, lengths


@njit(nogil=True)
def _decimal_bytes(v):
    """Each integer's decimal digits right-aligned in its own 20 bytes (int64's longest,
    ``-9223372036854775808``); the start and length of each."""
    width = 20
    out = np.empty(len(v) * width, np.uint8)
    starts = np.empty(len(v), np.int64)
    lengths = np.empty(len(v), np.int64)
    ten, zero = np.uint64(10), np.uint64(48)
    for i in range(len(v)):
        x = v[i]
        m = np.uint64(-(x + 1)) + np.uint64(1) if x < 0 else np.uint64(x)     # |x|, int64's minimum too
        end = (i + 1) * width
        pos = end
        while True:
            pos -= 1
            out[pos] = m % ten + zero
            m //= ten
            if m == 0:
                break
        if x < 0:
            pos -= 1
            out[pos] = 45                                                      # "-"
        starts[i] = pos
        lengths[i] = end - pos
    return out, starts, lengths


def _fields_csr(names, parts, n, hashed) -> dict:
    """Every categorical field's CSR pair from its (rows, tokens), hashed (as the fields
    ``hashed``) and counted in one pass."""
    if not names:
        return {}
    lens = [len(tokens) for _, tokens in parts]
    ids = hash_fields(hashed, [tokens for _, tokens in parts])
    rows = np.concatenate([r for r, _ in parts]) if sum(lens) else np.zeros(0, np.int64)
    which = np.repeat(np.arange(len(names)), lens)
    offsets = np.zeros((len(names), n + 1), np.int64)
    np.cumsum(np.bincount(which * n + rows, minlength=len(names) * n).reshape(len(names), n),
              axis=1, out=offsets[:, 1:])
    ends = np.cumsum(lens).tolist()
    return {name: SparseField(ids[end - k:end], offsets[f]) for f, (name, k, end) in enumerate(zip(names, lens, ends))}


def _numbers_read_as_jsonl(records: list, names) -> None:
    """A numeric field's string or boolean as the jsonl reader reads it (a missing marker: None;
    one that is no number is left for the check that names it)."""
    for name in names:
        for rec in records:
            v = rec.get(name)
            if type(v) is str and says_missing(v):
                rec[name] = None
            elif type(v) in (str, bool) and (x := jsonl_number(v)) is not None:
                rec[name] = x


def _finite_number(v) -> bool:
    """None, or an int or float that float32 holds as a finite number (any size of int: Python
    compares ints and floats exactly)."""
    return v is None or (type(v) in (int, float) and in_range(v))


def _name_unencodable(names, cols) -> None:
    """Only on the error path: the first categorical string that is not valid Unicode (a lone
    surrogate, which JSON's escapes can carry and UTF-8 cannot)."""
    for name, col in zip(names, cols):
        for i, v in enumerate(col):
            for x in (v if type(v) is list else (v,)):
                try:
                    x.encode("utf-8") if type(x) is str else None
                except UnicodeEncodeError:
                    raise BadRequest(f"records[{i}].{name}", f"categorical field: {shown(x)} is not valid "
                                                             "Unicode text (a lone surrogate)") from None
    raise BadRequest("records", "a categorical value is not valid Unicode text")


@functools.lru_cache(maxsize=64)
def _seeds(names: tuple) -> np.ndarray:
    return np.array([field_seed(n) for n in names], np.uint64)


def hash_fields(names, token_lists) -> np.ndarray:
    """``hash_values`` of every field's tokens in one pass (a seed per token). The tokens are
    joined into one buffer, so the cost is their bytes, whatever the longest one."""
    tokens = [t for part in token_lists for t in part]
    buf, lengths = joined(tokens)
    starts = np.zeros(len(lengths), np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    seeds = np.repeat(_seeds(tuple(names)), [len(t) for t in token_lists])
    return hash_spans(byte_words(buf + bytes(16)), starts, lengths, seeds)


def _categorical(name: str, col: list) -> tuple[np.ndarray, list]:
    """One categorical column's (row of each token, tokens): a scalar gives one token (its
    decimal string for an integer, "1"/"0" for a boolean), a list several, None and "" none."""
    types = set(map(type, col))
    if types <= _CATEGORY and bool not in types:      # the common case: one string or integer each
        if type(None) in types:
            rows = [i for i, v in enumerate(col) if v is not None]
            col = [col[i] for i in rows]
        else:
            rows = range(len(col))
        tokens = col if types <= {str, type(None)} else list(map(str, col))
    else:
        rows, tokens = [], []
        for i, v in enumerate(col):
            for x in (v if type(v) is list else () if v is None else (v,)):
                if type(x) not in _CATEGORY or x is None:
                    raise BadRequest(f"records[{i}].{name}", "categorical field: expected a string, integer, "
                                                             f"boolean or a list of them, got {shown(x)}")
                rows.append(i)
                tokens.append(("1" if x else "0") if type(x) is bool else str(x))
    if "" in tokens:
        keep = [k for k, t in enumerate(tokens) if t != ""]
        rows, tokens = [rows[k] for k in keep], [tokens[k] for k in keep]
    return np.asarray(rows, np.int64), tokens


def lines_batch(body: bytes, fmt: str, options: dict, schema: Schema, max_records: int):
    """The batch of raw lines in the stream's format; the first bad line is named."""
    lines = [ln for ln in body.split(b"\n") if ln.strip()]
    parser = make_parser(fmt, options)
    first, header = 0, None
    if parser.needs_header:
        if not lines:
            raise BadRequest("line 1", f"format '{fmt}': the first line must be the header")
        header = lines[0].rstrip(b"\r")
        parser.set_header(header)
        first = 1
    lines = lines[first:]
    if len(lines) > max_records:
        raise TooLarge(f"{len(lines)} lines in one request (serve.max_records = {max_records})")
    if not lines:
        raise BadRequest("", "no lines: send at least one record")
    batch = parser.parse(lines)
    if batch.size != len(lines):
        _name_bad_line(lines, fmt, options, header)
    missing = set(schema.sparse) - set(batch.sparse) | set(schema.dense) - set(batch.dense_names)
    if missing:
        raise BadRequest("header" if first else "line 1",
                         f"the model's fields {sorted(missing)} are not in these lines")
    return on_schema(batch, schema)


def _name_bad_line(lines, fmt, options, header) -> None:
    """Only on the error path: parse line by line to say which one and why."""
    first = int(header is not None)
    for i, line in enumerate(lines):
        reasons = []
        one = make_parser(fmt, options, Malformed(on_bad=lambda _line, why, reasons=reasons: reasons.append(why)))
        if header is not None:
            one.set_header(header)
        if one.parse([line]).size == 0:
            why = reasons[0] if reasons else "unreadable"
            raise BadRequest(f"line {i + 1 + first}", f"not a valid '{fmt}' record ({why}): {line[:120]!r}")
    raise BadRequest("", "some lines could not be read")


def on_schema(batch, schema: Schema):
    """The batch with exactly the model's fields, in the model's order (extra columns dropped,
    absent categorical fields empty)."""
    empty = SparseField(np.zeros(0, np.uint64), np.zeros(batch.size + 1, np.int64))
    batch.sparse = {k: batch.sparse.get(k, empty) for k in schema.sparse}
    idx = [batch.dense_names.index(k) for k in schema.dense]
    batch.dense = np.ascontiguousarray(batch.dense[:, idx], np.float32).reshape(batch.size, len(idx))
    batch.dense_names = tuple(schema.dense)
    batch.labels = np.full(batch.size, np.nan, np.float32)
    return batch


def decode_json(body: bytes):
    """The request's JSON, or a ``BadRequest`` (``json_body.decode``)."""
    return json_body.decode(body, BadRequest)


def _fields(schema: Schema) -> str:
    names = [*schema.sparse, *schema.dense]
    return ", ".join(names[:40]) + (", ..." if len(names) > 40 else "")
