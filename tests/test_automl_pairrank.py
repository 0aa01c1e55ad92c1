"""Residual-ranked cross proposals on a wide stream (streamtrain/automl/pairrank.py): on a stream
of more fields than the cross layer crosses in full, the pair a cross neighbour adds first is
the one whose cells explain most of the champion's residual beyond either field alone, not one
drawn at random; the ranking is search state (checkpointed, shared through Redis)."""
from __future__ import annotations

import itertools
import json

import numpy as np

from streamtrain import checkpoint
from streamtrain import config as configmod
from streamtrain.automl.pairrank import PairRank
from streamtrain.automl.search import Search
from streamtrain.automl.space import AUTOML, Space, key
from streamtrain.automl.trainer import AutoTrainer
from streamtrain.graph import Schema
from streamtrain.job import Job
from streamtrain.schema import with_defaults
from streamtrain.store import make_store

from .automl_helpers import job_config, planted_stream, redis_trainers

FIELDS = 12             # 66 pairs; the label depends on f1 x f2 alone
PLANTED = ["f1", "f2"]


def wide_config(fields: int = FIELDS, **automl) -> dict:
    """``automl_helpers.job_config`` with a cross layer that names no pairs: on ``fields`` > 8
    (its ``max_fields``) fields the first champion crosses none."""
    cfg = job_config(**{"explore": 0.0, "rank": 2000, **automl})
    layer = next(c for c in cfg["layers"] if c["name"] == "crosses")
    del layer["pairs"]
    return configmod.validate(cfg)


def stream(seed: int = 3, fields: int = FIELDS):
    return planted_stream(seed, fields=fields)


def test_the_planted_pair_ranks_first_after_one_window():
    rank = PairRank([f"f{i}" for i in range(FIELDS)], window=4000)
    batches = stream()
    out = [rank.add(b, b.labels - 0.447) for b in itertools.islice(batches, 4)]     # the base rate's residual
    assert out[:3] == [None] * 3 and rank.count == 0           # ranked at the window's end, then empty again
    ranked = out[3]
    assert ranked[0] == PLANTED
    # its score against the next pair's, on the same window again
    again = PairRank([f"f{i}" for i in range(FIELDS)], window=10**9)
    for b in itertools.islice(stream(), 4):
        again.add(b, b.labels - 0.447)
    score = np.sort(again.scores())[::-1]
    assert score[0] > 300 and score[1] < 5, score[:3]      # 364 against 2.8
    assert (rank.s.nbytes + rank.n.nbytes) == (66 + 12) * 4096 * 16
    assert PairRank([f"f{i}" for i in range(100)]).cells == 256      # 5,050 tables: fewer cells each (BUDGET)


def test_a_wide_cross_neighbour_adds_the_ranked_pair_first_a_narrow_one_ignores_the_ranking():
    cfg = wide_config()
    space = Space(with_defaults(AUTOML, cfg["automl"]), cfg)
    fields = [f"f{i}" for i in range(FIELDS)]
    start = space.start(cfg, fields)
    assert start["crosses"] == []
    ranked = [PLANTED, ["f0", "f3"]]
    moved, _ = space.propose(start, fields, np.random.default_rng(0), set(), 0, ranked=ranked)
    assert moved["crosses"] == [PLANTED]
    # tried: the next ranked pair
    moved, _ = space.propose(start, fields, np.random.default_rng(0), {key(moved)}, 0, ranked=ranked)
    assert moved["crosses"] == [["f0", "f3"]]
    # without a ranking: one of the 66 at random (not the planted one, for this seed)
    moved, _ = space.propose(start, fields, np.random.default_rng(0), set(), 0)
    assert len(moved["crosses"]) == 1 and moved["crosses"] != [PLANTED]
    # 8 fields (the layer's max_fields): every pair crossed from the start, the ranking unused
    narrow = fields[:8]
    start = space.start(cfg, narrow)
    assert len(start["crosses"]) == 28
    runs = []
    for r in ([PLANTED], ()):
        rng = np.random.default_rng(5)
        runs.append((space.propose(start, narrow, rng, set(), 0, ranked=r), rng.bit_generator.state))
    assert runs[0] == runs[1]


def trained(cfg: dict, steps: int, seed: int = 3) -> tuple[AutoTrainer, list, int | None]:
    """A search of ``steps`` batches of 1,000: the trainer, the crosses of every newborn (with
    the example it was born at) and the example from which the champion crosses the planted pair."""
    batches = stream(seed)
    first = next(batches)
    trainer = AutoTrainer(cfg, make_store({"backend": "memory"}), Schema.of(first))
    trainer.start()
    born, won, batch = [], None, first
    for i in range(steps):
        trainer.step(batch)
        born += [(1000 * (i + 1), e["assign"]["crosses"]) for e in trainer.events if e["event"] == "born"]
        if won is None and PLANTED in trainer.champion.assign["crosses"]:
            won = 1000 * (i + 1)
        batch = next(batches)
    return trainer, born, won


def test_a_search_on_a_wide_stream_crosses_the_planted_pair_once_ranked():
    trainer, born, won = trained(wide_config(), 30)
    assert trainer.pairs is not None
    # the first newborn after the first window (2,000 examples) is the crosses' turn: the planted pair
    assert born[0] == (2000, [PLANTED]), born
    assert won == 4000
    assert trainer.search.ranked == []     # crossed: no pair explains the residual beyond noise any more
    assert trainer.describe()["ranked_pairs"] == []
    # without the ranking (automl.rank 0): no ranking state, a random pair each time, never the planted one
    plain, born, won = trained(wide_config(rank=0), 30)
    assert plain.pairs is None and plain.search.ranked == []
    assert len([c for at, c in born if c]) >= 10 and won is None


def test_the_rank_state_survives_a_checkpoint(tmp_path):
    rows = []
    for b in itertools.islice(stream(), 6):
        ids = np.stack([b.sparse[f"f{i}"].ids for i in range(FIELDS)], axis=1)
        rows += [",".join([str(int(y))] + [str(int(v)) for v in row]) for y, row in zip(b.labels, ids)]
    header = ",".join(["label"] + [f"f{i}" for i in range(FIELDS)])
    (tmp_path / "wide.csv").write_text("\n".join([header] + rows) + "\n")
    cfg = wide_config(rank=4000)
    cfg["reader"] = {**cfg["reader"], "type": "file", "path": str(tmp_path / "wide.csv"), "format": "csv",
                     "label": "label"}
    cfg["checkpoint"] = {**cfg["checkpoint"], "dir": str(tmp_path / "ck"), "every_seconds": 0}
    cfg = configmod.validate(cfg)
    first = Job(cfg, max_examples=5000)    # one window ranked (4,000), the next one a quarter full
    first.run()
    pairs = first.trainer.pairs
    assert first.trainer.search.ranked[0] == PLANTED and pairs.count == 1000
    _, meta = checkpoint.read(first.last_checkpoint)
    assert meta["automl"]["ranked"] == first.trainer.search.ranked
    assert meta["automl_pairrank"]["count"] == 1000
    again = Job(cfg, restore=first.last_checkpoint)
    again._build(next(iter(again.source.batches())))
    try:
        mine = again.trainer.pairs
        np.testing.assert_array_equal(mine.s, pairs.s)
        np.testing.assert_array_equal(mine.n, pairs.n)
        assert (mine.count, mine.q) == (pairs.count, pairs.q)
        assert again.trainer.search.to_json() == json.loads(json.dumps(first.trainer.search.to_json()))
    finally:
        again.finish()
    # the search state alone round-trips its ranking
    space = Space(with_defaults(AUTOML, cfg["automl"]), cfg)
    copy = Search(with_defaults(AUTOML, cfg["automl"]), space)
    copy.load_json(json.loads(json.dumps(first.trainer.search.to_json())))
    assert copy.ranked == first.trainer.search.ranked


def test_two_trainers_share_one_ranking_through_redis(redis_url, redis_namespace):
    cfg = wide_config()
    batches = stream()
    batch = next(batches)
    trainers = redis_trainers(cfg, batch, redis_url, redis_namespace)
    try:
        seen = []
        for i in range(30):
            t, other = trainers[i % 2], trainers[1 - i % 2]
            t.step(batch)
            other.refresh()
            shared = json.loads(t.store.io.meta("GET", t.shared.state_key))
            assert t.search.ranked == other.search.ranked == shared["ranked"]
            seen.append(bool(shared["ranked"]))
            batch = next(batches)
        # each trainer's window is 2,000 of its own examples: the first one's is full at its second
        # batch (the third in all), and its ranking is both trainers' from then on
        assert seen.index(True) == 2
        assert PLANTED in trainers[0].champion.assign["crosses"]
    finally:
        for t in trainers:
            t.store.close()
