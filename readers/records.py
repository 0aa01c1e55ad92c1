"""Record-level input (dicts) → ``Batch``: for plug-in readers and tests.

A record is ``{"label": 1, "user": "u7", "age": 31.0, "genres": ["Comedy", "Drama"], ...}``:
python floats become dense columns, strings / ints / bools become one categorical id, lists
(or tuples) become a multi-valued field; ``None`` or a missing key is a missing value. The
ids are the same as a file parser gives for the same (column, value string).
"""
from __future__ import annotations

import numpy as np

from streamtrain.batch import Batch

from .batching import field_from_rows
from .ids import hash_values


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


def records_to_batch(records, schema_hint: dict[str, str] | None = None,
                     label: str = "label") -> Batch:
    """A batch from a list of dict records (see the module docstring for the mapping).

    ``schema_hint`` fixes the kind of some columns (``"dense"``, ``"cat"``, ``"multi"``);
    the rest is inferred. The loop here is per record: this is the plug-in path, not the
    file-parsing hot path.
    """
    records = list(records)
    schema = infer_schema(records, label)
    schema.update(schema_hint or {})
    labels = np.array([float(r.get(label, np.nan)) for r in records], dtype=np.float32)
    dense_names = tuple(k for k, kind in schema.items() if kind == "dense")
    dense = np.array([[float(r.get(k) if r.get(k) is not None else 0.0) for k in dense_names]
                      for r in records], dtype=np.float32).reshape(len(records), len(dense_names))
    sparse = {}
    for name, kind in schema.items():
        if kind == "dense":
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
