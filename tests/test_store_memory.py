"""The memory store: growing tables, deterministic rows, create-on-pull, snapshot/restore."""
import numpy as np

from streamtrain.context import Gradients
from streamtrain.params import ParamSpec, init_rows
from streamtrain.store.idindex import IdIndex
from streamtrain.store.memory import MemoryStore

SPEC = ParamSpec("emb.table", (4,), table=True, init="normal", scale=0.1)
DENSE = ParamSpec("fc.W", (3, 2), init="xavier")


def make():
    store = MemoryStore()
    store.declare({SPEC.name: SPEC, DENSE.name: DENSE}, {"type": "sgd", "lr": 0.5})
    return store


def test_idindex_matches_a_dict_through_many_merges():
    rng = np.random.default_rng(0)
    index, truth = IdIndex(), {}
    for _ in range(60):
        ids = np.unique(rng.integers(0, 50_000, 2000).astype(np.uint64))
        rows = index.lookup(ids)
        known = np.array([truth.get(int(i), -1) for i in ids])
        assert np.array_equal(rows, known)
        new = ids[rows < 0]
        for i, r in zip(new, index.insert(new)):
            truth[int(i)] = int(r)
    assert len(index) == len(truth)
    keys, rows = index.items()
    assert np.all(np.diff(keys.astype(np.float64)) > 0)
    assert dict(zip(keys.tolist(), rows.tolist())) == truth


def test_rows_are_created_by_the_deterministic_initializer():
    store = make()
    ids = np.array([3, 10, 2**63 + 5], np.uint64)
    rows = store.pull([], {SPEC.name: ids})[SPEC.name]
    assert np.array_equal(rows, init_rows(SPEC, ids))
    assert np.array_equal(init_rows(SPEC, ids[1:]), rows[1:])   # a row does not depend on its batch
    assert store.stats.rows_created == 3 and len(store.tables[SPEC.name]) == 3


def test_pull_without_create_leaves_the_table_alone():
    store = make()
    ids = np.array([1, 2], np.uint64)
    rows = store.pull([], {SPEC.name: ids}, create=False)[SPEC.name]
    assert np.array_equal(rows, init_rows(SPEC, ids))
    assert len(store.tables[SPEC.name]) == 0


def test_table_grows_past_its_capacity_and_keeps_rows_and_state():
    store = MemoryStore()
    store.declare({SPEC.name: SPEC}, {"type": "adagrad"})
    ids = np.arange(5000, dtype=np.uint64)
    store.push(Gradients(tables={SPEC.name: (ids[:10], np.ones((10, 4), np.float32))}))
    first = store.pull([], {SPEC.name: ids[:10]})[SPEC.name].copy()
    n_before = store.tables[SPEC.name].state["n"][:10].copy()
    store.pull([], {SPEC.name: ids})
    assert len(store.tables[SPEC.name]) == 5000
    assert np.array_equal(store.pull([], {SPEC.name: ids[:10]})[SPEC.name], first)
    rows, _ = store.tables[SPEC.name].rows(ids[:10], create=False)
    assert np.array_equal(store.tables[SPEC.name].state["n"][rows], n_before)


def test_dense_push_applies_the_rule_and_snapshot_restores_it():
    store = make()
    w0 = store.pull([DENSE.name], {})[DENSE.name]
    store.push(Gradients(dense={DENSE.name: np.ones((3, 2), np.float32)}))
    assert np.allclose(store.pull([DENSE.name], {})[DENSE.name], w0 - 0.5)
    ids = np.array([7, 8], np.uint64)
    store.push(Gradients(tables={SPEC.name: (ids, np.full((2, 4), 2.0, np.float32))}))
    snap = store.snapshot()
    other = make()
    other.restore(snap)
    assert np.array_equal(other.pull([DENSE.name], {})[DENSE.name], store.pull([DENSE.name], {})[DENSE.name])
    assert np.array_equal(other.pull([], {SPEC.name: ids})[SPEC.name], store.pull([], {SPEC.name: ids})[SPEC.name])


def test_ftrl_rows_start_at_zero():
    store = MemoryStore()
    store.declare({SPEC.name: SPEC}, {"type": "ftrl"})
    rows = store.pull([], {SPEC.name: np.array([1, 2], np.uint64)})[SPEC.name]
    assert not rows.any()
