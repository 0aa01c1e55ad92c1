"""The memory store's tables pulled with the very same id array share one id index (one lookup
per batch for an LR part and an FM/deep part over the same fields). Sharing changes no number:
every pull and push gives what separate indexes give."""
from __future__ import annotations

import numpy as np

from streamtrain.context import Gradients
from streamtrain.params import ParamSpec
from streamtrain.store.memory import MemoryStore

WIDE = ParamSpec("wide.table", (1,), table=True, init="normal", scale=0.1)
EMB = ParamSpec("emb.table", (4,), table=True, init="normal", scale=0.1)
OPT = {"type": "adagrad", "lr": 0.1}


def _store():
    store = MemoryStore()
    store.declare({WIDE.name: WIDE, EMB.name: EMB}, OPT)
    return store


def _step(store, ids_w, ids_e, seed):
    """Pull both tables, push a gradient: the ids arrays given (the same object or not)."""
    got = store.pull([], {WIDE.name: ids_w, EMB.name: ids_e})
    rng = np.random.default_rng(seed)
    grads = Gradients(tables={WIDE.name: (ids_w, rng.standard_normal((len(ids_w), 1)).astype(np.float32)),
                              EMB.name: (ids_e, rng.standard_normal((len(ids_e), 4)).astype(np.float32))})
    store.push(grads)
    return got


def test_tables_pulled_with_one_id_array_share_an_index_and_give_the_same_numbers():
    shared, separate = _store(), _store()
    rng = np.random.default_rng(0)
    for step in range(6):
        ids = np.unique(rng.integers(0, 50, 30).astype(np.uint64))
        a = _step(shared, ids, ids, step)                     # the same array: shared
        b = _step(separate, ids, ids.copy(), step)            # equal but not the same: not shared
        for name in a:
            np.testing.assert_array_equal(a[name], b[name])
    assert shared.tables[WIDE.name].ids is shared.tables[EMB.name].ids
    assert separate.tables[WIDE.name].ids is not separate.tables[EMB.name].ids
    one, two = shared.snapshot(), separate.snapshot()
    for name in one.tables:
        for k in one.tables[name]:
            np.testing.assert_array_equal(one.tables[name][k], two.tables[name][k])


def test_a_table_fills_the_rows_its_twin_added_alone():
    store = _store()
    ids = np.arange(5, dtype=np.uint64)
    _step(store, ids, ids, 0)
    alone = np.arange(3, 9, dtype=np.uint64)
    store.pull([], {WIDE.name: alone})                        # only one of the two: new ids 5..8
    emb = store.pull([], {EMB.name: alone})[EMB.name]        # the other has their rows, initialised
    fresh = _store()
    expect = fresh.pull([], {EMB.name: np.arange(5, 9, dtype=np.uint64)})[EMB.name]
    np.testing.assert_array_equal(emb[2:], expect)            # deterministic initial rows, per (table, id)
    assert len(store.tables[EMB.name]) == 9 and store.snapshot().tables[EMB.name]["value"].shape == (9, 4)


def test_indexes_with_different_ids_stay_apart_and_restored_twins_share_again():
    store = _store()
    _step(store, np.arange(4, dtype=np.uint64), np.arange(2, 6, dtype=np.uint64), 0)
    ids = np.arange(8, dtype=np.uint64)
    _step(store, ids, ids, 1)                                 # different ids before: never shared
    assert store.tables[WIDE.name].ids is not store.tables[EMB.name].ids
    twins = _store()
    _step(twins, ids, ids, 1)
    restored = _store()
    restored.restore(twins.snapshot())
    _step(restored, ids, ids, 2)                              # the same ids in the same order: shared
    assert restored.tables[WIDE.name].ids is restored.tables[EMB.name].ids


TWIN = ParamSpec("a1_wide.table", (1,), table=True, init="normal", scale=0.1)


def test_tables_pulled_one_after_the_other_with_one_id_array_share_an_index_once_equal(monkeypatch):
    """An AutoML job's candidates over the same fields pull their tables one after the other with
    the batch's one id array (``Prepared.shared``): once the second has found that array's rows
    (the same ids in the same order as the first's), the two share one index, and each batch's
    ids are looked up once. A table with another history stays apart. The same numbers."""
    from streamtrain.store import idindex
    stores = [MemoryStore() for _ in range(3)]
    for s in stores:
        s.declare({WIDE.name: WIDE, TWIN.name: TWIN, EMB.name: EMB}, OPT)
    together, apart, cold = stores
    cold.pull([], {EMB.name: np.arange(100, 110, dtype=np.uint64)})     # another history first
    looked_up = []
    real = idindex.IdIndex.find_or_add
    monkeypatch.setattr(idindex.IdIndex, "find_or_add", lambda self, ids: looked_up.append(self) or real(self, ids))
    rng = np.random.default_rng(1)
    for step in range(5):
        ids = np.unique(rng.integers(0, 60, 30).astype(np.uint64))
        n = len(looked_up)
        got = {}
        for name in (WIDE.name, TWIN.name):
            got[name] = together.pull([], {name: ids})[name]
            np.testing.assert_array_equal(got[name], apart.pull([], {name: ids.copy()})[name])
            g = Gradients(tables={name: (ids, np.full((len(ids), 1), 0.5 + step, np.float32))})
            together.push(g)
            apart.push(g)
        cold.pull([], {EMB.name: ids})
        cold.pull([], {WIDE.name: ids})
        mine = [ix for ix in looked_up[n:] if any(ix is t.index for t in together.tables.values())]
        if step:
            assert len(mine) == 1                     # after the first batch: once for both
    assert together.tables[WIDE.name].ids is together.tables[TWIN.name].ids
    assert cold.tables[WIDE.name].ids is not cold.tables[EMB.name].ids      # 10 other ids first: apart
    one, two = together.snapshot(), apart.snapshot()
    for name in one.tables:
        for k in one.tables[name]:
            np.testing.assert_array_equal(one.tables[name][k], two.tables[name][k])
