"""The shadow: the first champion with a set's ``shadow`` terms learns from the first example
in a slot beyond ``live`` (Search._shadow), and takes no turn nor slot from the others."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.automl.search import SHADOW_EPOCH, Search
from streamtrain.automl.space import AUTOML, Space
from streamtrain.automl.trainer import AutoTrainer
from streamtrain.errors import ConfigError
from streamtrain.graph import Schema
from streamtrain.schema import with_defaults
from streamtrain.store import make_store

from .automl_helpers import planted_stream, small_job


def shadow_job(shadow=("fm",), **automl) -> dict:
    """``small_job`` with + FM a ``later`` term (as ``auto.json``'s ``emb_out``) and the shadow's."""
    cfg = small_job(replay=0, **automl)
    cfg["automl"]["space"][0].update(later=["fm"], shadow=list(shadow))
    return configmod.validate(cfg)


def begun(cfg) -> Search:
    section = with_defaults(AUTOML, cfg["automl"])
    s = Search(section, Space(section, cfg))
    s.begin(cfg, ["f0", "f1"])
    return s


def feed(s: Search, offsets: dict[int, float], batches: int, seed: int = 0) -> list[dict]:
    """Up to ``batches`` of 100 paired losses, slot i's the first champion's plus ``offsets[i]``
    and noise, until the first promotion."""
    rng, events = np.random.default_rng(seed), []
    for _ in range(batches):
        loss = rng.random(100)
        s.observe({i: loss + offsets.get(i, 0.0) + rng.normal(0, 0.01, 100) for i in s.live_slots()})
        events += s.decide()
        if any(e["event"] == "promoted" for e in events):
            break
    return events


def test_the_shadow_is_born_beyond_live_and_changes_no_other_birth():
    """Slots 0-3 hold what they would without a shadow (same assignments, same epochs: the same
    parameter names); slot 4 holds the first champion with + FM, under its own epoch."""
    plain, shadowed = begun(shadow_job(shadow=())), begun(shadow_job())
    assert len(plain.slots) == 4 and len(shadowed.slots) == 5
    assert shadowed.slots[:4] == plain.slots and shadowed.next_epoch == plain.next_epoch == 4
    assert shadowed.shadow_slot == 4 and shadowed.slots[4]["epoch"] == SHADOW_EPOCH
    assert shadowed.slots[4]["assign"] == dict(shadowed.slots[0]["assign"], terms=["fm"])
    assert not shadowed.space.same_model(shadowed.slots[4]["assign"], shadowed.slots[0]["assign"])


def test_a_retired_shadow_leaves_live_candidates():
    s = begun(shadow_job(patience=10 ** 6, margin=0.0))
    events = feed(s, {4: 0.05}, 40)
    assert [(e["slot"], e["reason"]) for e in events if e["event"] == "retired"] == [(4, "worse")]
    assert not any(e["event"] == "born" for e in events)        # its slot is not filled again
    assert s.shadow_slot is None and sorted(s.live_slots()) == [0, 1, 2, 3]
    s.observe({i: np.full(100, 0.5) for i in s.live_slots()})
    assert s.decide() == [] and s.slots[4] is None


def test_a_promoted_shadow_is_a_champion_and_slots_fill_below_live_only():
    """Promoted, the shadow's slot is a slot like the others: five are held, so a retirement
    frees compute (four are held) and only the next one is followed by a birth."""
    s = begun(shadow_job(patience=10 ** 6, margin=0.0))
    events = feed(s, {4: -0.05}, 40)
    promoted = [e for e in events if e["event"] == "promoted"]
    assert [e["slot"] for e in promoted] == [4] and s.champion == 4 and s.shadow_slot is None
    assert len(s.live_slots()) == 5
    first, second = [i for i in s.live_slots() if i != 4][:2]
    assert [e["event"] for e in s._retire(first, "worse")] == ["retired"]
    assert s._fill() == [] and len(s.live_slots()) == 4
    s._retire(second, "worse")
    born = s._fill()
    assert [e["event"] for e in born] == ["born"] and len(s.live_slots()) == 4
    assert born[0]["slot"] == min(first, second)


def test_the_shadow_answers_only_once_promoted():
    """A shadow better on average than the champion and every challenger, but not yet
    confidently so, does not answer (its predictions are used once it is promoted)."""
    s = begun(shadow_job(patience=10 ** 6, margin=0.0))
    events = feed(s, {4: -0.002}, 3)
    h = s.champion
    assert not any(e["event"] in ("promoted", "retired") for e in events)
    assert s.s[4, h] < min(s.s[i, h] for i in s.live_slots() if i not in (4, h)) and s.s[4, h] < 0
    assert s.served != 4
    s.shadow_slot = None                # as if it were any challenger: it would answer
    s._lead()
    assert s.served == 4


def test_the_shadow_is_saved_and_restored():
    s = begun(shadow_job())
    doc = json.loads(json.dumps(s.to_json()))
    assert doc["shadow_slot"] == 4 and len(doc["slots"]) == 5
    t = begun(shadow_job())
    t.shadow_slot = None
    t.load_json(doc)
    assert t.shadow_slot == 4 and t.slots == s.slots
    with pytest.raises(ValueError, match="one more"):
        begun(shadow_job()).load_json(begun(shadow_job(shadow=())).to_json())


def test_shadow_terms_must_be_optional():
    cfg = small_job()
    cfg["automl"]["space"][0]["shadow"] = ["wide_sum"]
    with pytest.raises(ConfigError) as err:
        configmod.validate(cfg)
    assert any(p == "automl.space[0].shadow" and "not among optional" in m for p, m in err.value.problems)


def test_the_trainer_steps_the_shadow_with_the_others():
    """Five candidates learn every batch; the shadow's parameters carry its own prefix."""
    cfg = shadow_job(grace=10 ** 6)
    stream = planted_stream(0)
    first = next(stream)
    t = AutoTrainer(cfg, make_store({"backend": "memory"}), Schema.of(first))
    t.start()
    batch = first
    for _ in range(3):
        t.step(batch)
        batch = next(stream)
    assert sorted(t.candidates) == [0, 1, 2, 3, 4]
    assert t.search.slots[4]["examples"] == 3000 == t.search.slots[0]["examples"]
    assert any(n.startswith(f"a4g{SHADOW_EPOCH}_fm") or n.startswith(f"a4g{SHADOW_EPOCH}_emb") for n in t.params)


def test_two_trainers_share_the_shadow_through_redis(redis_url, redis_namespace):
    """The shadow's slot is part of the shared search: both trainers build it and step it."""
    from streamtrain.automl.shared import SharedSearch
    cfg = shadow_job(grace=10 ** 6)
    stream = planted_stream(2)
    first = next(stream)
    trainers = []
    for _ in range(2):
        store = make_store({"backend": "redis", "urls": [redis_url], "namespace": redis_namespace,
                            "write_back_s": 0})
        t = AutoTrainer(cfg, store, Schema.of(first), shared=SharedSearch(store))
        t.start()
        trainers.append(t)
    a, b = trainers
    batch = first
    for i in range(4):
        trainers[i % 2].step(batch)
        batch = next(stream)
    a.refresh()
    b.refresh()
    assert a.search.to_json() == b.search.to_json() and a.search.shadow_slot == 4
    assert sorted(a.candidates) == sorted(b.candidates) == [0, 1, 2, 3, 4]
    assert a.search.slots[4]["examples"] == 4000 == a.search.slots[0]["examples"]
