"""Shared helpers for the readers tests: where the real data lives, and batch comparison."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest


def data_dir() -> Path:
    from tests.conftest import DATA         # one rule for where the public logs are
    return DATA


def data_file(name: str) -> Path:
    p = data_dir() / name
    if not p.exists():
        pytest.skip(f"data file {p} not found (set STREAMTRAIN_DATA)")
    return p


def concat(batches):
    from streamtrain.readers.batching import concat_batches
    return concat_batches(list(batches))


def assert_batches_equal(a, b) -> None:
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.dense, b.dense)
    assert a.dense_names == b.dense_names
    assert list(a.sparse) == list(b.sparse)
    for k in a.sparse:
        fa, fb = a.sparse[k], b.sparse[k]
        np.testing.assert_array_equal(fa.ids, fb.ids, err_msg=k)
        np.testing.assert_array_equal(fa.offsets, fb.offsets, err_msg=k)
        if fa.values is None or fb.values is None:
            assert fa.values is None and fb.values is None, k
        else:
            np.testing.assert_array_equal(fa.values, fb.values, err_msg=k)
