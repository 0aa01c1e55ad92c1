"""The per-example engine's working block made from the arrays the store lends, one compiled call
per parameter (``prep.gather_param``, ``engine._lent_block``), against numpy's gather, cast and
fill of every slot (what it replaced): the same numbers."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.online import engine, prep
from streamtrain.online.terms import Term


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("table", [True, False])
@pytest.mark.parametrize("slots", ["nz", "n", ""])
def test_gather_param_is_numpy_take_cast_and_fill(dtype, table, slots):
    rng = np.random.default_rng(1)
    d, cap, lo, R = 3, 50, 4, 9
    src = {k: rng.normal(size=(cap, d)).astype(dtype) for k in "wnz"}
    rows = rng.permutation(cap)[:R] if table else np.zeros(0, np.int64)
    r = R if table else cap
    none = np.zeros((0, d), dtype)
    out = {k: np.full((lo + r + 2, d), 7.0) for k in "wnz"}
    grp = np.full(lo + r + 2, -1, np.int64)
    prep.gather_param(out["w"], out["n"], out["z"], grp, lo, r, 5, rows, src["w"],
                      src["n"] if "n" in slots else none, src["z"] if "z" in slots else none, True, False)
    take = (lambda a: a[rows]) if table else (lambda a: a)
    want_w = np.full_like(out["w"], 7.0)
    want_w[lo:lo + r] = take(src["w"])
    want_n = np.full_like(out["n"], 7.0)
    want_n[lo:lo + r] = take(src["n"]) if "n" in slots else 0.0     # fill_n: zeros where not kept
    want_z = np.full_like(out["z"], 7.0)
    if "z" in slots:
        want_z[lo:lo + r] = take(src["z"])                            # not kept, no fill: left alone
    assert np.array_equal(out["w"], want_w) and np.array_equal(out["n"], want_n)
    assert np.array_equal(out["z"], want_z)
    assert (grp[lo:lo + r] == 5).all() and (grp[:lo] == -1).all() and (grp[lo + r:] == -1).all()


class _Ctx:
    def __init__(self, lent, values=None, states=None):
        self.lent, self.values, self.states = lent, values or {}, states or {}

    def value(self, name):
        return self.values[name]


def test_lent_block_stacks_a_table_and_dense_parameters_as_numpy_would():
    rng = np.random.default_rng(2)
    table = rng.normal(size=(30, 1)).astype(np.float32)
    state = {"n": rng.uniform(size=(30, 1)).astype(np.float32), "z": rng.normal(size=(30, 1)).astype(np.float32)}
    rows = np.array([4, 17, 2, 29, 11])
    W = rng.normal(size=(6, 1)).astype(np.float32)                     # an fc's, Adagrad: no z
    Wn = rng.uniform(size=(6, 1)).astype(np.float32)
    b = rng.normal(size=(1,)).astype(np.float32)                       # a pulled bias, SGD: no slots
    ctx = _Ctx({"t": (rows, table, state), "W": (None, W, {"n": Wn})}, values={"b": b})
    terms = [Term("t", None, None, 5), Term("W", None, None, 6), Term("b", None, None, 1)]
    blk = engine._lent_block(engine._Arrays(), ctx, terms, {"t": 0, "W": 1, "b": 2}, 1, "linear")
    assert [p[:3] for p in blk.params] == [("t", 0, 5), ("W", 5, 11), ("b", 11, 12)]
    assert [p[3] for p in blk.params] == [(5, 1), (6, 1), (1,)]
    np.testing.assert_array_equal(blk.w[:, 0], np.concatenate([table[rows, 0], W[:, 0], b]).astype(np.float64))
    np.testing.assert_array_equal(blk.n[:, 0], np.concatenate([state["n"][rows, 0], Wn[:, 0], [0]]))
    np.testing.assert_array_equal(blk.z[:, 0], np.concatenate([state["z"][rows, 0], [0] * 7]))
    assert blk.grp.tolist() == [0] * 5 + [1] * 6 + [2]
    assert blk.w.dtype == blk.n.dtype == blk.z.dtype == np.float64 and blk.start == ()
