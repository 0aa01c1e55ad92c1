"""Where a batch's ids sit (``ops/_field_layout.py``): the fields' ids and offsets laid end to
end are a view of the parser's arrays when they lie so already (no copy per batch) and a copy
otherwise; counts and slots agree with a plain numpy reading of the offsets; an LR part's
layout makes no slots."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.ops._field_layout import end_to_end, field_counts, field_slots
from streamtrain.readers.batching import fields_from_columns


def _columns(rng, F=5, R=40, missing=0.3):
    return rng.integers(0, 1 << 60, (F, R)).astype(np.uint64), rng.random((F, R)) > missing


def test_a_parsed_batch_s_ids_and_offsets_are_laid_end_to_end_as_views():
    ids, present = _columns(np.random.default_rng(0))
    fields = fields_from_columns(ids, present)
    flat = end_to_end([f.ids for f in fields])
    offs = end_to_end([f.offsets for f in fields])
    assert flat.base is not None and not flat.flags.writeable        # a view, read-only
    assert np.shares_memory(flat, fields[0].ids) and np.shares_memory(offs, fields[-1].offsets)
    assert flat.tolist() == np.concatenate([ids[j][present[j]] for j in range(len(ids))]).tolist()
    assert offs.tolist() == np.concatenate([f.offsets for f in fields]).tolist()


@pytest.mark.parametrize("case", ["cut", "reordered", "two_arrays", "strided", "dtype"])
def test_anything_else_is_copied(case):
    ids, present = _columns(np.random.default_rng(1))
    if case == "cut":                                   # a piece of several batches: offsets per cut
        parts = fields_from_columns(ids, present, [0, 15, 40])[1]
        arrays = [f.offsets for f in parts]
    else:
        fields = fields_from_columns(ids, present)
        arrays = [f.ids for f in fields]
        if case == "reordered":
            arrays = arrays[::-1]
        elif case == "two_arrays":
            arrays = arrays[:2] + [arrays[2].copy()] + arrays[3:]
        elif case == "strided":
            arrays = [a[::2] for a in arrays]
        elif case == "dtype":
            arrays = arrays[:1] + [arrays[1].view(np.int64)] + arrays[2:]
    got = end_to_end(arrays)
    assert got.flags.writeable and not any(np.shares_memory(got, a) for a in arrays)
    assert got.tolist() == np.concatenate(arrays).tolist()


@pytest.mark.parametrize("multi", [False, True])
def test_counts_and_slots_agree_with_numpy(multi):
    rng = np.random.default_rng(2)
    F, B = 4, 30
    counts = rng.integers(0, 3 if multi else 2, (F, B))
    offsets = np.concatenate([np.zeros((F, 1), np.int64), np.cumsum(counts, axis=1)], axis=1)
    got, single = field_counts(offsets)
    assert got.tolist() == counts.ravel().tolist() and single == (counts.max() <= 1)
    if not multi:
        f, b = np.nonzero(counts)                      # field-major: each field's ids in example order
        assert field_slots(got, F).tolist() == (b * F + f).tolist()


@pytest.mark.parametrize("dim, slots", [(1, False), (4, True)])
def test_a_linear_part_makes_no_slots_and_an_fm_part_makes_them_ahead(dim, slots):
    from streamtrain.graph import Graph, Schema
    from streamtrain.testing import random_batch
    batch = random_batch(64, seed=3)
    layers = [{"name": "sparse", "type": "sparse_input"},
              {"name": "e", "type": "embedding", "inputs": ["sparse"], "dim": dim, "shared": True},
              {"name": "out", "type": "sum_pooling", "inputs": ["e"]} if dim == 1 else
              {"name": "out", "type": "fm", "inputs": ["e"], "reduce": True},
              {"name": "loss", "type": "logloss", "inputs": ["out"]}]
    feed = Graph.from_config(layers, Schema.of(batch)).prepare(batch)
    memos = [feed.memo, getattr(batch.prepared, "shared", {})]     # (the batch's, any graph's to take)
    assert any(k[0] == "embedding-slots" for m in memos for k in m if isinstance(k, tuple)) == slots
