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

import json

import numpy as np

from streamtrain.batch import SparseField
from streamtrain.graph import Schema
from streamtrain.readers import Malformed, make_parser, records_to_batch


class BadRequest(ValueError):
    """400: the client sent something this model cannot read; ``where`` locates it."""

    def __init__(self, where: str, message: str, status: int = 400, kind: str = "bad_request"):
        super().__init__(f"{where}: {message}" if where else message)
        self.where, self.message, self.status, self.kind = where, message, status, kind

    def body(self) -> dict:
        return {"error": self.kind, "where": self.where, "message": self.message}


class TooLarge(BadRequest):
    def __init__(self, message: str):
        super().__init__("", message, status=413, kind="too_large")


_SCALAR = (str, int, bool)


def records_batch(payload, schema: Schema, max_records: int):
    """The batch of a JSON payload (already decoded)."""
    if not isinstance(payload, dict) or not isinstance(payload.get("records"), list):
        raise BadRequest("", 'expected a JSON object {"records": [{field: value, ...}, ...]}')
    records = payload["records"]
    if len(records) > max_records:
        raise TooLarge(f"{len(records)} records in one request (serve.max_records = {max_records})")
    if not records:
        raise BadRequest("records", "empty: send at least one record")
    sparse, dense = set(schema.sparse), set(schema.dense)
    clean = []
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise BadRequest(f"records[{i}]", f"expected an object of fields, got {type(rec).__name__}")
        out = {}
        for key, v in rec.items():
            where = f"records[{i}].{key}"
            if key == "label" or v is None:
                continue
            if key in dense:
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                    raise BadRequest(where, f"numeric field: expected a finite number, got {v!r}")
                out[key] = float(v)
            elif key in sparse:
                vs = v if isinstance(v, list) else [v]
                bad = [x for x in vs if not isinstance(x, _SCALAR)]
                if bad:
                    raise BadRequest(where, "categorical field: expected a string, integer, boolean "
                                            f"or a list of them, got {bad[0]!r}")
                out[key] = v
            else:
                raise BadRequest(where, f"unknown field (the model's fields: {_fields(schema)})")
        clean.append(out)
    hint = {**{k: "multi" for k in schema.sparse}, **{k: "dense" for k in schema.dense}}
    return on_schema(records_to_batch(clean, hint), schema)


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
        _name_bad_line(lines, parser, fmt, header)
    missing = set(schema.sparse) - set(batch.sparse) | set(schema.dense) - set(batch.dense_names)
    if missing:
        raise BadRequest("header" if first else "line 1",
                         f"the model's fields {sorted(missing)} are not in these lines")
    return on_schema(batch, schema)


def _name_bad_line(lines, parser, fmt, header) -> None:
    """Only on the error path: parse line by line to say which one and why."""
    first = int(header is not None)
    for i, line in enumerate(lines):
        reasons = []
        one = type(parser)(parser.options, Malformed(on_bad=lambda _line, why: reasons.append(why)))
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
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise BadRequest("body", f"not valid JSON: {err}") from None


def _fields(schema: Schema) -> str:
    names = [*schema.sparse, *schema.dense]
    return ", ".join(names[:40]) + (", ..." if len(names) > 40 else "")
