"""The id pipeline's two hash tables: a batch's unique ids with their inverse (``uniq``) and
the memory store's id -> row map (``IdIndex``), against numpy / a dict, on ids that are
hashes and on ids that are not (small integers, multiples of a power of two, 0, 2^64 - 1)."""
from __future__ import annotations

import doctest

import numpy as np
import pytest

from streamtrain import uniq
from streamtrain.store import idindex, redis_prefetch
from streamtrain.store.idindex import IdIndex
from streamtrain.uniq import unique_inverse

RNG = np.random.default_rng(0)
CASES = {
    "hashes": RNG.integers(0, 2**63, 5000, dtype=np.int64).astype(np.uint64) * np.uint64(2) + np.uint64(1),
    "repeats": RNG.integers(0, 300, 20000).astype(np.uint64),
    "small_ints": np.arange(3000, dtype=np.uint64)[::-1].copy(),
    "powers_of_two_apart": (RNG.integers(0, 64, 4000).astype(np.uint64) << np.uint64(40)),
    "extremes": np.array([0, 2**64 - 1, 0, 1, 2**63, 2**64 - 1], np.uint64),
    "one": np.array([42], np.uint64),
    "none": np.zeros(0, np.uint64),
}


def first_seen(ids):
    """numpy's answer: unique ids in order of first occurrence, and the inverse."""
    _, first = np.unique(ids, return_index=True)
    order = np.sort(first)
    u = ids[order]
    lookup = {int(x): k for k, x in enumerate(u)}
    return u, np.array([lookup[int(x)] for x in ids], np.int64)


@pytest.mark.parametrize("name", CASES)
def test_unique_inverse_is_first_seen_order_and_exact(name):
    ids = CASES[name]
    u, inv = unique_inverse(ids)
    want_u, want_inv = first_seen(ids)
    assert u.dtype == np.uint64 and inv.dtype == np.int64
    np.testing.assert_array_equal(u, want_u)
    np.testing.assert_array_equal(inv, want_inv)
    np.testing.assert_array_equal(u[inv], ids)


def test_unique_inverse_takes_any_layout_and_integer_type():
    ids = np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2] % 3
    u, inv = unique_inverse(ids)
    assert u.tolist() == [0, 2, 1] and np.array_equal(u[inv], ids.reshape(-1).astype(np.uint64))


@pytest.mark.parametrize("name", CASES)
def test_idindex_rows_in_arrival_order_through_growth(name):
    index, truth = IdIndex(capacity=4), {}
    ids = CASES[name]
    for part in np.array_split(ids, 7):
        np.testing.assert_array_equal(index.lookup(part), [truth.get(int(x), -1) for x in part])
        before = len(index)
        rows = index.find_or_add(part)
        for x in part:
            truth.setdefault(int(x), len(truth))
        np.testing.assert_array_equal(rows, [truth[int(x)] for x in part])
        assert len(index) == len(truth) and set(rows[rows >= before]) == set(range(before, len(truth)))
    np.testing.assert_array_equal(index.ids, list(truth))
    keys, rows = index.items()
    assert np.all(keys[1:] > keys[:-1])
    assert dict(zip(keys.tolist(), rows.tolist())) == truth


def test_idindex_insert_gives_new_ids_the_next_rows():
    index = IdIndex()
    assert index.insert(np.array([5, 6], np.uint64)).tolist() == [0, 1]
    assert index.insert(np.array([7, 6], np.uint64)).tolist() == [2, 1]


@pytest.mark.parametrize("module", [uniq, idindex, redis_prefetch], ids=lambda m: m.__name__)
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.attempted and not result.failed
