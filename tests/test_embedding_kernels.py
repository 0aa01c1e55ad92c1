"""The compiled gather / scatter-add of a single-valued embedding lookup against numpy's
``take`` and ``bincount`` (the arithmetic they replace): the same numbers."""
import numpy as np
import pytest

from streamtrain.ops._embedding_kernels import gather_rows, scatter_rows


def _case(weighted, dtype=np.float32, total=7, dim=3, slots=40, seed=0):
    rng = np.random.default_rng(seed)
    index = rng.integers(0, total + 1, slots)             # ``total``: a missing value
    table = rng.normal(size=(total, dim)).astype(dtype)
    g = rng.normal(size=(slots, dim)).astype(dtype)
    w = rng.uniform(0.5, 2, slots).astype(dtype) if weighted else np.zeros(0, dtype)
    return index, table, g, w


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gather_is_take_with_a_zero_row(weighted, dtype):
    index, table, _, w = _case(weighted, dtype)
    out = np.empty((len(index), table.shape[1]), dtype)
    gather_rows(table, index, w, out)
    want = np.take(np.concatenate([table, np.zeros((1, table.shape[1]), dtype)]), index, axis=0)
    if weighted:
        want *= w[:, None]
    assert np.array_equal(out, want)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_scatter_is_bincount(weighted, dtype):
    index, table, g, w = _case(weighted, dtype)
    total, dim = table.shape
    grad, sq = np.empty((total, dim), dtype), np.empty((total, dim), dtype)
    scatter_rows(index, g, w, total, grad, sq)
    gw = g * w[:, None] if weighted else g
    flat = (index[:, None] * dim + np.arange(dim)).reshape(-1)
    want = np.bincount(flat, gw.reshape(-1), (total + 1) * dim).reshape(-1, dim)[:total]
    want_sq = np.bincount(flat, (gw * gw).reshape(-1), (total + 1) * dim).reshape(-1, dim)[:total]
    assert np.array_equal(grad, want.astype(dtype))
    assert np.array_equal(sq, want_sq.astype(dtype))
    no_sq = np.empty((0, dim), dtype)
    scatter_rows(index, g, w, total, grad, no_sq)            # without squares: the same gradient
    assert np.array_equal(grad, want.astype(dtype))
