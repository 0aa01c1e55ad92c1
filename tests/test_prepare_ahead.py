"""``Graph.prepare``: the batch-only part of a step's feed (fields' layout, unique ids per table,
positions) worked out ahead, in the file reader's parse thread, and taken as it is by the step.
A batch prepared ahead trains bit for bit as one fed in the step."""
from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from streamtrain import config as cfgmod
from streamtrain.graph import Graph, Schema
from streamtrain.job import Job
from streamtrain.online.engine import GRID
from streamtrain.ops import LAYERS
from streamtrain.readers.compose import Prepare, buffered
from streamtrain.readers.files import PARSE_AHEAD
from streamtrain.store.memory import MemoryStore
from streamtrain.testing import random_batch
from streamtrain.trainer import Trainer
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples"
QUIET = ["metrics.enabled=false", "log.every_seconds=1000", "checkpoint.dir=null"]


def _trainer(config: dict, batch) -> Trainer:
    graph = Graph.from_config(config["layers"], Schema.of(batch))
    store = MemoryStore()
    store.declare(graph.params, config["default_optimizer"])
    return Trainer(graph, store)


@pytest.mark.parametrize("model", ["lr", "fm", "deepfm", "dcn", "wide_deep"])
def test_batches_prepared_ahead_train_bit_for_bit_as_batches_fed_in_the_step(model):
    config = json.loads((EXAMPLES / f"{model}.json").read_text())
    multi = [("b",) if s % 2 else () for s in range(6)]       # single-valued batches: the grids made ahead
    batches = [random_batch(64, fields=("a", "b", "c"), multivalue=multi[s], seed=s) for s in range(6)]
    plain, ahead = _trainer(config, batches[0]), _trainer(config, batches[0])
    assert ahead.graph.prepares_ahead
    for seed, batch in enumerate(batches):
        twin = random_batch(64, fields=("a", "b", "c"), multivalue=multi[seed], seed=seed)
        ahead.prepare(twin)
        fed = twin.prepared.of(ahead.graph)
        if ahead.engine is not None and ahead.engine.layers and not multi[seed]:   # the engine's too
            assert [k for k in fed.memo if k[0] == GRID]
            room = ahead.engine._room          # made with room for its block's other terms (once known)
            if seed and model in ("lr", "fm"):     # the grid is the block's: its other terms,
                (param, extra), = room.items()      # the numeric and bias weights, are fixed rows
                assert extra == 0 and fed.memo[(GRID, param)][1].shape[1] > 0     # beside it
        got_plain, got_ahead = plain.step(batch), ahead.step(twin)
        assert all(ahead.ctx.table_ids[t] is fed.table_ids[t] for t in fed.table_ids)   # taken, not redone
        np.testing.assert_array_equal(got_ahead.predictions, got_plain.predictions)
        assert got_ahead.loss == got_plain.loss
    for name, spec in plain.graph.params.items():
        if spec.table:
            ids = np.unique(np.concatenate([f.ids for b in batches for f in b.sparse.values()]))
            a, b = plain.store.pull([], {name: ids})[name], ahead.store.pull([], {name: ids})[name]
        else:
            a, b = plain.store.pull([name], {})[name], ahead.store.pull([name], {})[name]
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_a_batch_prepared_for_another_graph_is_fed_afresh():
    config = json.loads((EXAMPLES / "lr.json").read_text())
    batch = random_batch(32)
    one, other = _trainer(config, batch), _trainer(config, batch)
    other.graph.prepare(batch)
    stale = batch.prepared.of(other.graph)
    assert batch.prepared.of(one.graph) is None           # another graph's feed: not taken
    one.step(batch)
    # fed in its step: its own positions; the batch-only arrays (the fields' layout, the unique
    # ids) are any graph's to take (``Prepared.shared``)
    assert all(one.ctx.table_pos[k] is not stale.table_pos[k] for k in stale.table_pos)
    assert all(one.ctx.table_ids[t] is stale.table_ids[t] for t in stale.table_ids)


def test_graph_input_layers_are_not_prepared_ahead():
    assert LAYERS.get("embedding").ids_from_batch
    assert not LAYERS.get("node_input").ids_from_batch       # ids from the sampled subgraph


def _run(criteo_path, model, *sets):
    job = Job(cfgmod.validate(cfgmod.load(EXAMPLES / f"{model}.json", [
        *QUIET, "reader.type=file", f"reader.path={criteo_path}", "reader.format=criteo", *sets])))
    preds, prepared = [], []
    job.hooks.append(lambda j, b, r: (preds.append(np.array(r.predictions)),
                                      prepared.append(b.prepared.of(j.graph) is not None)))
    summary = job.run()
    return summary, np.concatenate(preds), prepared


@pytest.mark.parametrize("model", ["lr", "deepfm"])
def test_the_file_readers_parse_thread_prepares_batches_once_the_graph_exists(criteo_path, model, monkeypatch):
    summary, preds, prepared = _run(criteo_path, model)
    assert summary["examples"] == 7625
    # all but those parsed before the graph is built from the first batch: that one, the
    # PARSE_AHEAD the queue holds, and the one the parse thread waits to put
    assert not prepared[0] and sum(prepared) >= len(prepared) - (PARSE_AHEAD + 2)
    monkeypatch.setattr(Graph, "prepares_ahead", property(lambda self: False))
    summary_off, preds_off, prepared_off = _run(criteo_path, model)
    assert not any(prepared_off)
    np.testing.assert_array_equal(preds, preds_off)
    assert summary["logloss"] == summary_off["logloss"]


def test_a_job_whose_parse_thread_hands_back_trains_the_same(criteo_path, monkeypatch):
    """After the parse thread hands its work back (``compose.Prepare``'s ``handback``, here
    after 1 + 5 prepared batches) the trainer prepares each batch in its step: the same numbers.
    Batches of 256: 30 of them, room for the 6 after the PARSE_AHEAD + 2 read before the graph
    is built (deepfm.json's 1024 make 8: with 3 or more read before, fewer than 6 are left)."""
    from streamtrain.readers import compose
    monkeypatch.setattr(compose, "HANDBACK_AFTER", 5)
    monkeypatch.setattr(compose, "HANDBACK_CPU_S", 10.0)    # every batch is cheap enough
    summary, preds, prepared = _run(criteo_path, "deepfm", "batch_size=256")
    # prepared: 6 batches, after at most the PARSE_AHEAD + 2 read before the graph was built
    assert summary["examples"] == 7625 and sum(prepared) == 6 and not any(prepared[PARSE_AHEAD + 8:]), prepared
    summary_on, preds_on, prepared_on = _run(criteo_path, "deepfm", "batch_size=256", "reader.parse_thread=always")
    assert sum(prepared_on) >= len(prepared_on) - (PARSE_AHEAD + 2)
    np.testing.assert_array_equal(preds, preds_on)
    assert summary["logloss"] == summary_on["logloss"]


def test_a_failing_prepare_is_logged_once_and_leaves_the_items_as_they_are(caplog):
    calls = []

    def fn(item):
        calls.append(item)
        raise RuntimeError("boom")

    prepare = Prepare()
    prepare.fn = fn
    with caplog.at_level(logging.ERROR, logger="streamtrain"):
        got = list(buffered(lambda: iter(range(5)), 2, prepare)())
    assert got == [0, 1, 2, 3, 4] and calls == [0]
    assert sum("preparing batches" in r.getMessage() for r in caplog.records) == 1


def _put_present_reference(B, m, present, pos, lo, w):
    """Example k's column f: field f's next occurrence when present (row lo + pos, coefficient
    w or 1), else coefficient 0 (its row is never read)."""
    row, x = np.zeros((B, m), np.int64), np.zeros((B, m))
    i = 0
    for f in range(m):
        for k in range(B):
            if present[f * B + k]:
                row[k, f], x[k, f] = pos[i] + lo, (w[i] if len(w) else 1.0)
                i += 1
    return row, x


@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
@pytest.mark.parametrize("weighted", [False, True])
def test_put_present_grid(share, weighted):
    from streamtrain.online import prep
    rng = np.random.default_rng(3)
    B, m, lo = 50, 7, 11
    present = (rng.random(m * B) < share).astype(np.int64)
    n = int(present.sum())
    pos = rng.integers(0, 1000, n).astype(np.int64)
    w = rng.standard_normal(n) if weighted else np.zeros(0)
    row, x = np.full((B, m + 2), -5, np.int64), np.full((B, m + 2), -5.0)
    prep.put_present(row, x, 1, m, present, pos, lo, w)
    want_row, want_x = _put_present_reference(B, m, present, pos, lo, w)
    here = present.reshape(m, B).T.astype(bool)
    assert np.array_equal(row[:, 1:-1][here], want_row[here])
    assert np.array_equal(x[:, 1:-1], want_x)
    assert (row[:, [0, -1]] == -5).all() and (x[:, [0, -1]] == -5.0).all()     # other columns untouched


@pytest.mark.parametrize("model", ["lr", "fm", "deepfm"])
def test_rows_found_while_batches_are_prepared_serve_their_steps_bit_for_bit(model, monkeypatch):
    """The memory store finds each prepared batch's rows ahead (``MemoryStore.index_ahead``, in
    the parse thread): batches prepared several ahead of their steps train as batches fed in the
    step, and the steps look no id up again."""
    from streamtrain.store import idindex
    config = json.loads((EXAMPLES / f"{model}.json").read_text())
    batches = [random_batch(64, fields=("a", "b", "c"), seed=s) for s in range(6)]
    twins = [random_batch(64, fields=("a", "b", "c"), seed=s) for s in range(6)]
    plain, ahead = _trainer(config, batches[0]), _trainer(config, batches[0])
    for twin in twins:
        ahead.prepare(twin)
    tables = ahead.store.tables.values()
    assert all(len(t.ids.ahead) == 6 for t in tables if t.ids.ahead or len(t))
    looked_up = []
    real = idindex.IdIndex.find_or_add
    monkeypatch.setattr(idindex.IdIndex, "find_or_add", lambda self, ids: looked_up.append(len(ids)) or real(self, ids))
    for batch, twin in zip(batches, twins):
        got_plain, got_ahead = plain.step(batch), ahead.step(twin)
        np.testing.assert_array_equal(got_ahead.predictions, got_plain.predictions)
    assert sum(looked_up) == sum(len(ids) for b in batches for ids in plain.graph.prepare(b).table_ids.values())
    assert all(not t.ids.ahead for t in tables)
    ids = np.unique(np.concatenate([f.ids for b in batches for f in b.sparse.values()]))
    for name, spec in plain.graph.params.items():
        a, b = (s.store.pull([] if spec.table else [name], {name: ids} if spec.table else {})[name]
                for s in (plain, ahead))
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_index_ahead_keeps_the_last_batches_and_a_dropped_one_is_looked_up_in_its_step():
    from streamtrain.params import ParamSpec
    from streamtrain.store.memory import AHEAD_BATCHES
    store, plain = MemoryStore(), MemoryStore()
    for s in (store, plain):
        s.declare({"t": ParamSpec("t", (4,), table=True)}, {"type": "adagrad", "lr": 0.1})
    rng = np.random.default_rng(0)
    batches = [np.unique(rng.integers(0, 50, 20).astype(np.uint64)) for _ in range(AHEAD_BATCHES + 3)]
    for ids in batches:
        store.index_ahead({"t": ids})
    ahead = store.tables["t"].ids.ahead
    assert len(ahead) == AHEAD_BATCHES and id(batches[0]) not in ahead and id(batches[-1]) in ahead
    assert len(store.tables["t"]) == len(np.unique(np.concatenate(batches)))    # ids known, rows made later
    for ids in batches:                 # the first three in their step, the rest as found ahead
        np.testing.assert_array_equal(store.pull([], {"t": ids})["t"], plain.pull([], {"t": ids})["t"])
    assert not ahead
    snap = store.snapshot()
    order = np.argsort(snap.tables["t"]["ids"])
    np.testing.assert_array_equal(snap.tables["t"]["value"][order], plain.snapshot().tables["t"]["value"])


def test_automl_candidates_find_no_rows_ahead_and_a_table_dropped_since_is_skipped():
    """A birth copies the champion's index (``MemoryStore.copy``): rows the parse thread had made
    by then would start with the champion's initial values, so candidates find none ahead and a
    search stays a function of its seed; their grids are made ahead. A table dropped after its batch was prepared is skipped."""
    from streamtrain.automl.candidates import Candidate
    config = json.loads((EXAMPLES / "fm.json").read_text())
    batch = random_batch(32, fields=("a", "b", "c"), seed=0)
    store = MemoryStore()
    cand = Candidate(0, 0, {}, config, Schema.of(batch), store)
    cand.trainer.prepare(batch)
    assert store.tables and not any(len(t) or t.ids.ahead for t in store.tables.values())
    from streamtrain.online.engine import GRID      # its grids depend on the batch alone: made ahead
    made = [k for k in batch.prepared.of(cand.graph).memo if isinstance(k, tuple) and k[0] == GRID]
    assert made and all(k[1].startswith(cand.prefix) for k in made)
    plain = _trainer(config, batch)
    plain.prepare(batch)
    tables = dict(batch.prepared.of(plain.graph).table_ids)
    assert all(plain.store.tables[t].ids.ahead for t in tables)
    gone, kept = list(tables)[0], list(tables)[1:]
    plain.store.drop([gone])
    twin = random_batch(32, fields=("a", "b", "c"), seed=1)
    plain.store.index_ahead(dict(plain.graph.prepare(twin).table_ids))    # the dropped one too: no KeyError
    assert gone not in plain.store.tables and all(len(plain.store.tables[t].ids.ahead) == 2 for t in kept)


def test_a_reader_thread_behind_the_trainer_finds_no_rows_and_the_step_finds_them():
    """``Trainer.ahead`` (the job's: ``compose.Prepare.ahead``, the reader's thread has batches
    waiting) says whether ``prepare`` has the store find the rows too: a parse thread behind the
    trainer leaves them, and the per-example engine's grids, to the step, which would otherwise
    wait for it. The same numbers."""
    config = json.loads((EXAMPLES / "fm.json").read_text())
    batches = [random_batch(64, fields=("a", "b", "c"), seed=s) for s in range(4)]
    twins = [random_batch(64, fields=("a", "b", "c"), seed=s) for s in range(4)]
    plain, behind = _trainer(config, batches[0]), _trainer(config, batches[0])
    flags = iter([False, True, False, True])
    behind.ahead = lambda: next(flags)
    for twin in twins:
        behind.prepare(twin)
    assert all(len(t.ids.ahead) == 2 for t in behind.store.tables.values() if t.ids.ahead)
    # ... nor the per-example engine's grids (``PerExample.prepare``): the step makes them
    grids = [any(isinstance(k, tuple) and k[0] == GRID for k in twin.prepared.of(behind.graph).memo)
             for twin in twins]
    assert grids == [False, True, False, True]
    for batch, twin in zip(batches, twins):
        np.testing.assert_array_equal(behind.step(twin).predictions, plain.step(batch).predictions)
    assert all(not t.ids.ahead for t in behind.store.tables.values())


def test_the_producer_says_before_each_item_whether_it_is_ahead_of_the_consumer():
    prepare = Prepare()
    seen = []
    prepare.fn = lambda item: seen.append(prepare.ahead)
    got = list(buffered(lambda: iter(range(3)), 2, prepare)())
    assert got == [0, 1, 2] and len(seen) == 3 and prepare.runs_also


def test_a_producer_that_does_not_say_counts_as_ahead():
    assert Prepare().ahead          # the Kafka reader's parse worker: its batches' rows are found there


@pytest.mark.parametrize("model", ["lr", "fm"])
def test_fixed_rows_beside_the_grid_train_bit_for_bit_as_the_rows_in_it(model, monkeypatch):
    """The numeric weights and the bias (every example's, at the same rows) are read by the
    kernel beside the grid (``Occurrences.fixed``): the same numbers as copied into every row."""
    from streamtrain.online import engine

    config = json.loads((EXAMPLES / f"{model}.json").read_text())
    batches = [random_batch(64, fields=("a", "b", "c"), dense=4, seed=s, multivalue=("b",) if s == 2 else ())
               for s in range(4)]
    beside, inside = _trainer(config, batches[0]), _trainer(config, batches[0])
    tails, tail = [], engine._fixed_tail
    monkeypatch.setattr(engine, "_fixed_tail", lambda *a: tails.append(tail(*a)) or tails[-1])
    got = [beside.step(b).predictions for b in batches]
    assert 2 in tails          # the numeric weights' term and the bias', in the linear block
    monkeypatch.setattr(engine, "_fixed_tail", lambda arrays, terms: 0)
    want = [inside.step(b).predictions for b in batches]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    for name, spec in beside.graph.params.items():
        if not spec.table:
            np.testing.assert_array_equal(beside.store.pull([name], {})[name], inside.store.pull([name], {})[name])


@pytest.mark.parametrize("ahead", [False, True])
def test_a_grid_of_unweighted_terms_is_rows_alone_and_trains_as_one_with_coefficients(ahead, monkeypatch):
    """lr.json's linear block: its grid terms (the categorical fields' weights) are unweighted, so
    the grid is rows alone, padding (a missing field: 10 % here) -1, and the kernel reads no
    coefficient (``engine._unit``). Bit for bit what a grid with coefficients gives, made ahead
    or in the step."""
    from streamtrain.online import engine
    config = json.loads((EXAMPLES / "lr.json").read_text())
    batches = [random_batch(64, fields=("a", "b", "c"), missing=0.3, seed=s) for s in range(6)]
    twins = [random_batch(64, fields=("a", "b", "c"), missing=0.3, seed=s) for s in range(6)]
    bare, full = _trainer(config, batches[0]), _trainer(config, batches[0])
    unit = engine._unit
    for i, (batch, twin) in enumerate(zip(batches, twins)):
        if ahead:
            bare.prepare(batch)
        monkeypatch.setattr(engine, "_unit", lambda terms, fm: False)
        if ahead:
            full.prepare(twin)
        got_full = full.step(twin)
        monkeypatch.setattr(engine, "_unit", unit)
        got_bare = bare.step(batch)
        np.testing.assert_array_equal(got_bare.predictions, got_full.predictions)
        assert bare.engine._bare and not full.engine._bare
        if ahead and i:                  # (once the block is known: made as it is)
            made = batch.prepared.of(bare.graph).memo
            (param,) = bare.engine._bare
            assert made[(GRID, param)][2] is None and (made[(GRID, param)][1] == -1).any()
    for name, spec in bare.graph.params.items():
        ids = np.unique(np.concatenate([f.ids for b in batches for f in b.sparse.values()]))
        a, b = (t.store.pull([] if spec.table else [name], {name: ids} if spec.table else {})[name]
                for t in (bare, full))
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_automl_candidates_over_the_same_fields_take_one_layout_and_one_index():
    """Two candidates of one search over the same fields: the second's prepare takes the first's
    fields' layout, unique ids and grid of rows (``Prepared.shared``), so the memory store finds their tables
    pulled with one id array and, from the second batch on, looks it up once for both. The
    same numbers as candidates on stores of their own."""
    from streamtrain.automl.candidates import Candidate
    config = json.loads((EXAMPLES / "lr.json").read_text())
    batches = [random_batch(64, fields=("a", "b", "c"), seed=s) for s in range(4)]
    store, one, two = MemoryStore(), MemoryStore(), MemoryStore()
    cands = [Candidate(s, 0, {}, config, Schema.of(batches[0]), store) for s in (0, 1)]
    alone = [Candidate(s, 0, {}, config, Schema.of(batches[0]), st) for s, st in ((0, one), (1, two))]
    for i, batch in enumerate(batches):
        twin = random_batch(64, fields=("a", "b", "c"), seed=i)
        for c in cands:
            c.trainer.prepare(batch)
        feeds = [batch.prepared.of(c.graph) for c in cands]
        (t0,), (t1,) = ([t for t in f.table_ids if t.endswith("wide.table")] for f in feeds)
        assert feeds[0].table_ids[t0] is feeds[1].table_ids[t1]
        assert feeds[0].memo[(GRID, t0)][1] is feeds[1].memo[(GRID, t1)][1]      # one grid of rows
        got = [c.step(batch).predictions for c in cands]
        want = [c.step(twin).predictions for c in alone]
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert store.tables[t0].ids is store.tables[t1].ids
