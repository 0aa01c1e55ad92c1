"""Every registered store backend: its own test config validates, unknown keys are reported at
``store.<key>``, and the store it builds applies an update rule exactly (SGD, closed form),
creates rows deterministically, round-trips a snapshot and has every optional capability the
base class declares. A backend defined in this module is found through the registry."""
from __future__ import annotations

import time

import numpy as np
import pytest

from streamtrain import config as cfgmod
from streamtrain.context import Gradients
from streamtrain.params import ParamSpec
from streamtrain.store import STORES, MemoryStore, ParamStore, make_store, register, validate_store_config

KINDS = STORES.names()
DENSE = ParamSpec("fc.W", (2, 3), init="normal", scale=0.1)
TABLE = ParamSpec("emb.table", (4,), table=True, init="normal", scale=0.1)


def build(kind, request) -> ParamStore:
    """The backend's store from its test_params, pointed at the test server it needs."""
    params = dict(STORES[kind].test_params())
    if STORES[kind].server == "redis":
        params.update(urls=[request.getfixturevalue("redis_url")], namespace=request.getfixturevalue("redis_namespace"))
    return make_store({"backend": kind, **params})


@pytest.mark.parametrize("kind", KINDS)
def test_own_config_validates_and_unknown_keys_are_named(kind):
    params = STORES[kind].test_params()
    assert validate_store_config({"backend": kind, **params}) == []
    found = validate_store_config({"backend": kind, **params, "colour": "red"})
    assert [p for p, _ in found] == ["colour"], found


@pytest.mark.parametrize("kind", KINDS)
def test_sgd_push_pull_snapshot(kind, request):
    store = build(kind, request)
    try:
        store.declare({DENSE.name: DENSE, TABLE.name: TABLE}, {"type": "sgd", "lr": 0.5})
        ids = np.array([3, 11, 42], np.uint64)
        first = store.pull([DENSE.name], {TABLE.name: ids})
        again = store.pull([DENSE.name], {TABLE.name: ids})
        np.testing.assert_array_equal(first[TABLE.name], again[TABLE.name])     # created once
        g_dense = np.arange(6, dtype=np.float32).reshape(2, 3) / 10
        g_rows = np.ones((2, 4), np.float32)
        store.push(Gradients(dense={DENSE.name: g_dense},
                             tables={TABLE.name: (np.array([3, 42], np.uint64), g_rows)}))
        store.apply()
        after = store.pull([DENSE.name], {TABLE.name: ids})
        np.testing.assert_allclose(after[DENSE.name], first[DENSE.name] - 0.5 * g_dense, rtol=1e-6)
        np.testing.assert_allclose(after[TABLE.name][[0, 2]], first[TABLE.name][[0, 2]] - 0.5, rtol=1e-6)
        np.testing.assert_array_equal(after[TABLE.name][1], first[TABLE.name][1])
        snap = store.snapshot()
        fresh = MemoryStore()
        fresh.declare(store.specs, {"type": "sgd", "lr": 0.5})
        fresh.restore(snap)
        back = fresh.pull([DENSE.name], {TABLE.name: ids})
        np.testing.assert_allclose(back[TABLE.name], after[TABLE.name], rtol=1e-6)
        # the optional capabilities, with the base class's documented defaults where not given
        assert store.barrier is None or callable(store.barrier)
        assert isinstance(store.lifecycle(), dict)
        assert store.stats.rows_pulled >= 0 and store.ready()
        assert set(store.pull_states([TABLE.name])[TABLE.name]) == set()      # sgd has no slots
        assert isinstance(store.describe(), str)
        assert isinstance(store.writes_back, bool) and store.flush() >= 0 and isinstance(store.flush_due(), bool)
        assert isinstance(store.flushes_in_background, bool)
        assert not store.flushes_in_background or store.writes_back
        if store.flushes_in_background:                  # a flush in the background, then nothing left
            assert isinstance(store.flush_begin(), bool)
            assert store.flush_poll(wait=True) is None or store.flush_poll() is None
            assert not store.unflushed
        else:
            assert store.flush_begin() is False and store.flush_poll(wait=True) is None
    finally:
        store.close()


def _applied(store, offsets: list[dict], ids_from: int = 0) -> None:
    """Push one SGD step per batch, then say the batch read up to its offsets was pushed."""
    for n, off in enumerate(offsets, ids_from):
        ids = np.array([n, n + 1], np.uint64)
        store.pull([], {TABLE.name: ids})
        store.push(Gradients(tables={TABLE.name: (ids, np.ones((2, 4), np.float32))}))
        due = store.applied(off)
        assert due is bool(store.writes_back and not store.flushes_in_background and store.flush_due())


DURABILITY = [(kind, False) for kind in KINDS] + [      # and each write-back turned off
    (kind, True) for kind in KINDS if "write_back_s" in STORES[kind].options]


@pytest.mark.parametrize("kind, through", DURABILITY, ids=[k + ("-through" if t else "") for k, t in DURABILITY])
def test_offsets_are_durable_once_every_push_before_them_is_written(kind, through, request):
    """The durability contract (store/durable.py): the offsets given to ``applied`` after each
    push come back from ``durable_offsets`` once each, in order; at once from a store that
    writes through, from one that writes back only after a flush (or a background flush) wrote
    their rows. ``undurable`` says whether some are still held."""
    store = build(kind, request) if not through else make_store(
        {"backend": kind, **STORES[kind].test_params(), "write_back_s": 0,
         "urls": [request.getfixturevalue("redis_url")], "namespace": request.getfixturevalue("redis_namespace")})
    try:
        store.declare({TABLE.name: TABLE}, {"type": "sgd", "lr": 0.5})
        store.auto_flush = False                   # as the job sets it: flushes come from here
        offsets = [{("topic", 0): n} for n in (10, 20, 30)]
        _applied(store, offsets)
        early = list(store.durable_offsets())
        if not store.writes_back:
            assert early == offsets and not store.undurable and list(store.durable_offsets()) == []
            return
        assert early == offsets[:len(early)]       # (a flush could have come due meanwhile)
        assert store.undurable or early == offsets
        store.flush()
        assert early + list(store.durable_offsets()) == offsets and not store.undurable
        if store.flushes_in_background:            # due: the next one begins once all are handed out
            more = [{("topic", 0): 40}, {("topic", 0): 50}]
            store.flush_due = lambda: True
            _applied(store, more, ids_from=3)
            got, deadline = [], time.monotonic() + 30
            while len(got) < len(more) and time.monotonic() < deadline:
                got += store.durable_offsets()
                time.sleep(0.01)
            assert got == more and not store.undurable
    finally:
        store.close()


def test_a_backend_defined_here_is_discovered(request):
    """Adding a backend is one class: the store section and make_store find it."""
    from streamtrain.schema import Option

    @register
    class Scratch(MemoryStore):
        """The memory store under another name, with an option of its own."""

        kind = "test_scratch"
        options = {"dtype": Option("float32", (str,), ("float32", "float64"))}

        @classmethod
        def from_config(cls, cfg):
            return cls(dtype=np.dtype(cfg.get("dtype", "float32")))

        @classmethod
        def test_params(cls):
            return {"dtype": "float64"}

    try:
        test_own_config_validates_and_unknown_keys_are_named("test_scratch")
        test_sgd_push_pull_snapshot("test_scratch", request)
        assert make_store({"backend": "test_scratch", "dtype": "float64"}).dtype == np.float64
        found = cfgmod.problems(cfgmod.with_defaults(cfgmod.SCHEMA, {
            "store": {"backend": "test_scratch", "dtype": "int8"},
            "layers": [{"name": "x", "type": "dense_input"}, {"name": "l", "type": "mse", "inputs": ["x"]}]}))
        assert found == [("store.dtype", "expected one of float32, float64, got 'int8'")]
    finally:
        STORES.unregister("test_scratch")
    assert validate_store_config({"backend": "test_scratch"})[0][1].startswith("unknown store backend")
