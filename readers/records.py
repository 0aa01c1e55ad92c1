"""Record-level input (dicts) → ``Batch``: for plug-in readers and tests.

A record is ``{"label": 1, "user": "u7", "age": 31.0, "genres": ["Comedy", "Drama"], ...}``:
python floats become dense columns, strings / ints / bools become one categorical id, lists
(or tuples) become a multi-valued field; ``None`` or a missing key is a missing value. The
ids are the same as a file parser gives for the same (column, value string). A label is a
number or a numeric string (anything else: NaN, which the plug-in reader counts as ``label``);
a dense column's value that is not a finite number within float32's range (a string, a list,
NaN, infinity) makes its record malformed: counted as ``number`` and skipped when a
``Malformed`` counter is given, else a ``ValueError`` naming the record and the column.
"""
from __future__ import annotations

import math

import numpy as np

from streamtrain.batch import Batch

from .batching import field_from_rows
from .ids import hash_values
from .malformed import NUMBER
from .numbers import IN_RANGE, in_range, says_missing


def _kind(value) -> str | None:
    if value is None:
        return None
    if isinstance(value, float):
        return "dense"
    if isinstance(value, (list, tuple)):
        return "multi"
    return "cat"


def infer_schema(records, label: str = "label") -> dict[str, str]:
    """{column: "dense" | "cat" | "multi"} from the first non-missing value of each column."""
    schema: dict[str, str] = {}
    for rec in records:
        for k, v in rec.items():
            if k != label and k not in schema and _kind(v) is not None:
                schema[k] = _kind(v)
    return schema


def _token(v) -> str:
    return ("1" if v else "0") if isinstance(v, bool) else str(v)


def _number(v) -> float:
    """A finite float (within float32's range) from a number or a numeric string; NaN otherwise."""
    try:
        x = float(v)
    except (TypeError, ValueError):
        return math.nan
    return x if in_range(x) else math.nan


def _dense_rows(records, dense_names, malformed) -> tuple[list, list]:
    """(the records whose dense values are all numbers, their dense rows): a missing value is 0;
    a record with another value is counted as ``number`` (or, with no counter, raised)."""
    keep, rows = [], []
    for i, r in enumerate(records):
        row = [0.0 if says_missing(r.get(k)) else _number(r[k]) for k in dense_names]   # (NaN: pandas')
        bad = next((k for k, x in zip(dense_names, row) if math.isnan(x)), None)
        if bad is None:
            keep.append(r)
            rows.append(row)
        elif malformed is None:
            raise ValueError(f"record {i}, column {bad!r}: expected {IN_RANGE}, "
                             f"got {r[bad]!r}")
        else:
            malformed.add(NUMBER)
    return keep, rows


def records_to_batch(records, schema_hint: dict[str, str] | None = None,
                     label: str = "label", malformed=None) -> Batch:
    """A batch from a list of dict records (see the module docstring for the mapping).

    ``schema_hint`` fixes the kind of some columns (``"dense"``, ``"cat"``, ``"multi"``, or
    ``"skip"``: left out); the rest is inferred. The loop here is per record: this is the plug-in path, not the
    file-parsing hot path.
    """
    records = list(records)
    schema = infer_schema(records, label)
    schema.update(schema_hint or {})
    dense_names = tuple(k for k, kind in schema.items() if kind == "dense")
    records, rows = _dense_rows(records, dense_names, malformed)
    labels = np.array([_number(r.get(label)) for r in records], dtype=np.float32)
    dense = np.array(rows, dtype=np.float32).reshape(len(records), len(dense_names))
    sparse = {}
    for name, kind in schema.items():
        if kind in ("dense", "skip"):
            continue
        toks, rows = [], []
        for i, r in enumerate(records):
            v = r.get(name)
            if v is None:
                continue
            vs = v if kind == "multi" and isinstance(v, (list, tuple)) else [v]
            for x in vs:
                t = _token(x)
                if t != "":
                    toks.append(t)
                    rows.append(i)
        sparse[name] = field_from_rows(hash_values(name, toks) if toks else np.zeros(0, np.uint64),
                                       np.array(rows, dtype=np.int64), len(records))
    return Batch(labels=labels, sparse=sparse, dense=dense, dense_names=dense_names)
