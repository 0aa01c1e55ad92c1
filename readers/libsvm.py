"""libsvm / svmlight: ``label idx:val idx:val ...`` → one sparse field ``features`` with values.

Indices are hashed as strings in the field ``features`` (so ``"7"`` and ``"07"`` differ);
values are float32. By default the label ``-1`` is mapped to ``0`` (``label_map``). A ``#``
starts a comment to the line's end; a line that is a comment alone is blank; ``qid:n`` (a
query id, svmlight's ranking files) is no feature.
"""
from __future__ import annotations

import numpy as np

from streamtrain.batch import Batch, SparseField
from streamtrain.schema import Option

from . import malformed as mf
from .batching import field_from_rows
from .formats import COMMON_OPTIONS, Parser, register
from .ids import field_seed, hash_spans
from .libsvm_kernel import parse_clean
from .lines import Chunk, split
from .numbers import parse_spans

FIELD = "features"
COLON, HASH = ord(":"), ord("#")


@register
class LibsvmParser(Parser):
    kind = "libsvm"
    options = {**COMMON_OPTIONS, "field": Option(FIELD, (str,), doc="the name of the one sparse field")}
    DEFAULT_LABEL_MAP = {-1: 0}

    def __init__(self, options=None, malformed=None):
        super().__init__(options, malformed)
        self.field = self.opts.get("field", FIELD)
        self.seed = field_seed(self.field)

    @classmethod
    def test_params(cls):
        return {"options": {"field": "f"}, "lines": ["1 3:0.5 7:1", "-1 3:2", "oops"], "rows": 2}

    def parse_compiled(self, buf: bytes, start: int = 0, end: int | None = None, lines: int = -1):
        clean = parse_clean(buf, self.seed, self.field_length, start, end, lines)
        if clean is None:
            return None
        vals, offsets, ids, values = clean
        labels = self.labels.all_valid(vals)
        if labels is None:
            return None
        field = SparseField(ids, offsets, values)
        return Batch(labels=labels, sparse={self.field: field})

    def parse_chunk(self, chunk: Chunk) -> Batch:
        chunk = _without_comments(chunk)            # (Chunk.rewritten: marks shared)
        sp = split(chunk, b" \t", drop_empty=True, max_length=self.field_length)
        self._mark_rows(chunk, np.arange(chunk.n), (sp.count == 0) & ~chunk.blank, mf.FIELD_COUNT)
        first = np.zeros(len(sp.start), dtype=bool)
        first[np.cumsum(sp.count)[sp.count > 0] - sp.count[sp.count > 0]] = True
        # label
        lab_line = sp.line[first]
        labels_all, lab_ok = self.labels.parse(chunk, sp.start[first], sp.end[first])
        self._mark_rows(chunk, lab_line, ~lab_ok, mf.LABEL)
        # features: exactly one ':' inside, non-empty index, numeric value
        fs, fe, fl = sp.start[~first], sp.end[~first], sp.line[~first]
        c = np.flatnonzero(chunk.arr == COLON)
        k = np.searchsorted(fs, c, side="right") - 1
        inside = (k >= 0) & (c < fe[np.maximum(k, 0)]) if len(fs) else np.zeros(len(c), bool)
        k, c = k[inside], c[inside]
        n_colon = np.bincount(k, minlength=len(fs))
        colon = np.full(len(fs), -1, dtype=np.int64)
        colon[k] = c
        good = (n_colon == 1) & (colon > fs)
        colon = np.where(good, colon, fe - 1)
        vals, ok, _ = parse_spans(chunk, colon + 1, fe)
        good &= ok
        self._mark_rows(chunk, fl, ~good, mf.NUMBER)
        # keep the good lines, and of their tokens the features (svmlight's "qid:n" is a query id)
        line_ok = chunk.reason == 0
        keep_lab = line_ok[lab_line]
        keep_feat = line_ok[fl] & ~_query_ids(chunk.arr, fs, colon)
        fs, colon, fl, vals = fs[keep_feat], colon[keep_feat], fl[keep_feat], vals[keep_feat]
        rows = lab_line[keep_lab]
        row_of = np.searchsorted(rows, fl)
        ids = hash_spans(chunk.words, fs, colon - fs, self.seed)
        self._finish(chunk)
        return Batch(labels=labels_all[keep_lab],
                     sparse={self.field: field_from_rows(ids, row_of, len(rows), vals)})


def _query_ids(arr: np.ndarray, fs: np.ndarray, colon: np.ndarray) -> np.ndarray:
    """Which tokens are ``qid:...`` (their three index bytes read only where there are three)."""
    qid = np.zeros(len(fs), dtype=bool)
    three = np.flatnonzero(colon - fs == 3)
    if three.size:
        s = fs[three]
        qid[three] = (arr[s] == 113) & (arr[s + 1] == 105) & (arr[s + 2] == 100)
    return qid


def _without_comments(chunk: Chunk) -> Chunk:
    """The chunk with each line's ``# ...`` taken out (svmlight's trailing info, and the comment
    lines scikit-learn's ``dump_svmlight_file`` writes first, which become blank), or the chunk
    itself when it has no ``#`` (``Chunk.rewritten``)."""
    hashes = np.flatnonzero(chunk.arr == HASH)
    if not hashes.size:
        return chunk
    line = np.searchsorted(chunk.line_end, hashes)
    first = np.r_[True, line[1:] != line[:-1]]
    starts, lines = hashes[first], line[first]
    visible = np.r_[0, np.cumsum((chunk.arr != 32) & (chunk.arr != 9))]
    alone = visible[starts] == visible[chunk.line_start[lines]]     # only blanks before the '#'
    cut = np.zeros(len(chunk.arr) + 1, dtype=np.int8)
    cut[np.where(alone, chunk.line_start[lines], starts)] = 1      # from a line's first '#' ...
    cut[chunk.text_end[lines]] -= 1                 # ... to its end ('\r\n' kept)
    keep = np.cumsum(cut[:-1]) == 0
    return chunk.rewritten(chunk.arr[keep].tobytes())
