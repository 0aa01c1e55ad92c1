"""Criteo DAC: headerless TSV of label, I1..I13 (integers), C1..C26 (categorical)."""
from __future__ import annotations

import numpy as np

from streamtrain.batch import Batch

from . import malformed as mf
from .batching import fields_from_columns
from .formats import COMMON_OPTIONS, TRANSFORM, Parser, register
from .criteo_kernel import parse_clean
from .ids import field_seed, hash_spans
from .lines import Chunk, fixed_fields, split
from .numbers import parse_spans, signed_log1p

DENSE = tuple(f"I{i}" for i in range(1, 14))
SPARSE = tuple(f"C{i}" for i in range(1, 27))
N_FIELDS = 1 + len(DENSE) + len(SPARSE)


@register
class CriteoParser(Parser):
    """Dense ``I1..I13`` as ``sign(x)*log1p(|x|)`` (missing = 0); sparse fields ``C1..C26``."""

    kind = "criteo"
    options = {**COMMON_OPTIONS, "numeric_transform": TRANSFORM}

    def __init__(self, options=None, malformed=None):
        super().__init__(options, malformed)
        self.transform = self.opts.get("numeric_transform", "log1p")
        self.seeds = np.array([field_seed(c) for c in SPARSE], dtype=np.uint64)

    @classmethod
    def test_params(cls):
        good = "1\t" + "\t".join(["3", "", "-2"] + ["1"] * 10) + "\t" + "\t".join(["a1b2"] * 26)
        return {"options": {"numeric_transform": "none"}, "lines": [good, "2\t" + good[2:], "oops"], "rows": 1}

    def parse_buffer(self, buf: bytes) -> Batch:
        """A chunk with nothing to mark goes through one compiled pass (``criteo_kernel``),
        which holds the GIL only to set up and to build the Batch; any other through the
        vectorised path. Both give the same Batch."""
        fast = self._parse_clean(buf)
        return fast if fast is not None else self._parse_vectorised(Chunk(buf))

    def parse_chunk(self, chunk: Chunk) -> Batch:
        fast = None if chunk.reason.any() else self._parse_clean(chunk.buf)
        return fast if fast is not None else self._parse_vectorised(chunk)

    def parse_batches(self, buf: bytes, cuts: list[int], start: int = 0,
                      end: int | None = None) -> list[Batch]:
        """A clean chunk's batches come straight from the compiled pass and one compiled cut
        of the fields (views of shared arrays), not from slicing every field of one batch;
        the chunk is read in place in ``buf``."""
        clean = self._clean_columns(buf, start, end, cuts[-1])
        if clean is None:
            return [self._parse_vectorised(Chunk(buf[start:end]))]
        labels, vals, ids, present = clean
        dense = self._dense(vals)
        return [Batch(labels=labels[a:b], sparse=dict(zip(SPARSE, fields)), dense=dense[a:b],
                      dense_names=DENSE)
                for a, b, fields in zip(cuts[:-1], cuts[1:], fields_from_columns(ids, present, cuts))]

    def _parse_clean(self, buf: bytes) -> Batch | None:
        return self.parse_compiled(buf)

    def parse_compiled(self, buf: bytes, start: int = 0, end: int | None = None, lines: int = -1) -> Batch | None:
        clean = self._clean_columns(buf, start, end, lines)
        return None if clean is None else self._batch(*clean)

    def _clean_columns(self, buf: bytes, start: int = 0, end: int | None = None, lines: int = -1):
        clean = parse_clean(buf, self.seeds, self.field_length, start, end, lines)
        if clean is None:
            return None
        vals, dense, ids, present = clean
        labels = self.labels.all_valid(vals)
        return None if labels is None else (labels, dense, ids, present)

    def _dense(self, vals) -> np.ndarray:
        return (signed_log1p(vals) if self.transform == "log1p" else vals).astype(np.float32)

    def _batch(self, labels, vals, ids, present) -> Batch:
        sparse = dict(zip(SPARSE, fields_from_columns(ids, present)))
        return Batch(labels=labels, sparse=sparse, dense=self._dense(vals), dense_names=DENSE)

    def _parse_vectorised(self, chunk: Chunk) -> Batch:
        rows, st, en = fixed_fields(chunk, split(chunk, b"\t", max_length=self.field_length), N_FIELDS)
        labels, lab_ok = self.labels.parse(chunk, st[:, 0], en[:, 0])
        vals, ok, empty = parse_spans(chunk, st[:, 1:14], en[:, 1:14])
        num_ok = (ok | empty).all(axis=1)
        keep = lab_ok & num_ok
        if not keep.all():
            self._mark_rows(chunk, rows, ~lab_ok, mf.LABEL)
            self._mark_rows(chunk, rows, ~num_ok, mf.NUMBER)
            labels, vals, st, en = labels[keep], vals[keep], st[keep], en[keep]
        cst = np.ascontiguousarray(st[:, 14:].T)                  # [26, R]: one row per field
        clen = np.ascontiguousarray(en[:, 14:].T) - cst
        ids = hash_spans(chunk.words, cst, clen, self.seeds[:, None])
        self._finish(chunk)
        return self._batch(labels, vals, ids, clen > 0)
