"""The shadow: the first champion with a set's ``shadow`` terms, born in the first slot a
retirement frees (Search._shadow), learns every example so far from the replay buffer; it is
one of the ``live`` candidates (the budget) and holds its slot for a lease (Search._lease)."""
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

from .automl_helpers import planted_stream, redis_trainers, small_job


def shadow_job(shadow=("fm",), **automl) -> dict:
    """``small_job`` with + FM a ``later`` term (as ``auto.json``'s ``emb_out``) and the shadow's."""
    cfg = small_job(**{"replay": 0, **automl})
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


def free_first(s: Search, slot: int = 3) -> list[dict]:
    """Retire ``slot`` as worse after one batch, as the first decision would, and fill."""
    s.observe({i: np.full(100, 0.5) for i in s.live_slots()})
    events = s._retire(slot, "worse")
    return events + s._fill()


def test_the_shadow_takes_the_first_freed_slot():
    """The first challengers are those of a search without a shadow; the first slot freed gets
    the shadow (the first champion with + FM, its own epoch)."""
    plain, shadowed = begun(shadow_job(shadow=())), begun(shadow_job())
    assert len(plain.slots) == len(shadowed.slots) == 4 and shadowed.slots == plain.slots
    assert shadowed.shadow_slot is None and shadowed.shadow_due
    born = [e for e in free_first(shadowed) if e["event"] == "born"]
    assert [(e["slot"], e["epoch"]) for e in born] == [(3, SHADOW_EPOCH)] and shadowed.shadow_slot == 3
    assert shadowed.slots[3]["assign"] == dict(shadowed.slots[0]["assign"], terms=["fm"])
    assert not shadowed.space.same_model(shadowed.slots[3]["assign"], shadowed.slots[0]["assign"])


def test_no_shadow_once_the_champion_has_other_terms():
    """The shadow is the start's model with its terms: a champion that moved on to another term
    (+ deep) before a slot was freed gets its own neighbours there, and no shadow later."""
    s = begun(shadow_job())
    s.slots[0]["assign"] = dict(s.slots[0]["assign"], terms=["deep_out"])
    born = [e for e in free_first(s) if e["event"] == "born"]
    assert len(born) == 1 and born[0]["epoch"] != SHADOW_EPOCH
    assert s.shadow_slot is None and not s.shadow_due
    free_first(s, slot=born[0]["slot"])
    assert s.shadow_slot is None and all(x["epoch"] != SHADOW_EPOCH for x in s.live_slots().values())


def never_above_live(s: Search, offsets: dict, batches: int, seed: int) -> int:
    """Feed ``batches`` of paired losses (``offsets`` by epoch), deciding after each; assert
    that at most ``live`` slots are held (the shadow among them) at every step. The most held."""
    rng, most = np.random.default_rng(seed), 0
    for _ in range(batches):
        loss = rng.random(100)
        s.observe({i: loss + offsets.get(slot["epoch"], rng.normal(0, 0.02)) + rng.normal(0, 0.01, 100)
                   for i, slot in s.live_slots().items()})
        s.decide()
        most = max(most, len(s.live_slots()))
        assert most <= s.live
    return most


@pytest.mark.parametrize("shadow_offset", [-0.05, 0.05, -0.001, 0.0])
def test_never_more_than_live_candidates_learn_at_once(shadow_offset):
    """The budget: whatever the shadow does (promoted, retired, undecided to its lease's end),
    at most ``live`` candidates are held, and the shadow is born at the first free slot."""
    for seed in range(3):
        s = begun(shadow_job(patience=5000, margin=0.0))
        most = never_above_live(s, {SHADOW_EPOCH: shadow_offset}, 300, seed)
        assert most == s.live and not s.shadow_due
        assert s.seen == 30000 and s.shadow_slot is None or s.lease > s.seen


def test_a_shadow_not_leading_at_its_lease_end_is_retired():
    """Lease: born at n examples, looked at from 2 n; kept (the lease doubles) while it leads
    every live candidate against the champion, else retired ('patience') and its slot refilled."""
    s = begun(shadow_job(patience=10 ** 6, margin=0.0))
    free_first(s)
    assert s.lease == 2 * s.seen == 200
    events = feed(s, {3: 0.001, 1: -0.001}, 3)
    retired = [e for e in events if e["event"] == "retired"]
    assert [(e["slot"], e["reason"], e["epoch"]) for e in retired] == [(3, "patience", SHADOW_EPOCH)]
    assert s.shadow_slot is None and not s.shadow_due and len(s.live_slots()) == 3     # (this space is exhausted)
    assert all(slot["epoch"] != SHADOW_EPOCH for slot in s.live_slots().values())


def test_a_leading_shadow_keeps_its_slot_until_the_stream_doubles():
    s = begun(shadow_job(patience=10 ** 6, margin=0.0, confidence=1e-9))
    free_first(s)
    feed(s, {3: -0.001}, 2)
    assert s.shadow_slot == 3 and s.lease == 2 * 200


def test_a_promoted_shadow_is_a_champion_like_any_other():
    s = begun(shadow_job(patience=10 ** 6, margin=0.0))
    free_first(s)
    events = feed(s, {3: -0.05}, 40)
    promoted = [e for e in events if e["event"] == "promoted"]
    assert [e["slot"] for e in promoted] == [3] and s.champion == 3 and s.shadow_slot is None
    assert len(s.live_slots()) == 4
    s._retire(1, "worse")
    born = s._fill()
    assert [(e["event"], e["slot"]) for e in born] == [("born", 1)] and len(s.live_slots()) == 4


def test_the_shadow_answers_only_once_promoted():
    """A shadow better on average than the champion and every challenger, but not yet
    confidently so, does not answer (its predictions are used once it is promoted)."""
    s = begun(shadow_job(patience=10 ** 6, margin=0.0))
    free_first(s)
    events = feed(s, {3: -0.002}, 2)
    h = s.champion
    assert not any(e["event"] in ("promoted", "retired") for e in events)
    assert s.s[3, h] < min(s.s[i, h] for i in s.live_slots() if i not in (3, h)) and s.s[3, h] < 0
    assert s.served != 3
    s.shadow_slot = None                # as if it were any challenger: it would answer
    s._lead()
    assert s.served == 3


def test_the_shadow_is_saved_and_restored():
    s = begun(shadow_job())
    free_first(s)
    doc = json.loads(json.dumps(s.to_json()))
    assert doc["shadow_slot"] == 3 and not doc["shadow_due"] and doc["lease"] == 200
    t = begun(shadow_job())
    t.load_json(doc)
    assert (t.shadow_slot, t.shadow_due, t.lease) == (3, False, 200) and t.slots == s.slots
    u = begun(shadow_job())
    u.load_json(begun(shadow_job()).to_json())
    assert u.shadow_due and u.shadow_slot is None


def test_shadow_terms_must_be_optional():
    cfg = small_job()
    cfg["automl"]["space"][0]["shadow"] = ["wide_sum"]
    with pytest.raises(ConfigError) as err:
        configmod.validate(cfg)
    assert any(p == "automl.space[0].shadow" and "not among optional" in m for p, m in err.value.problems)


def unplanted_stream(seed: int = 0):
    """``planted_stream``'s batches with labels of no field (p = 0.3): no term is promoted away
    from the LR start before a retirement frees a slot for the shadow (``Search._shadow_turn``)."""
    rng = np.random.default_rng(seed + 100)
    for batch in planted_stream(seed):
        batch.labels = (rng.random(len(batch.labels)) < 0.3).astype(np.float32)
        yield batch


def step_until_shadow(trainers, stream, batches: int = 40):
    """Step the trainers in turn (a batch each) until the shadow is born; at every step at
    most ``live`` candidates learnt. The batches stepped."""
    for n in range(batches):
        t = trainers[n % len(trainers)]
        t.step(next(stream))
        assert len(t.candidates) <= t.search.live
        if t.search.shadow_slot is not None:
            return n + 1
    raise AssertionError(f"no shadow within {batches} batches")


def test_the_trainer_steps_the_shadow_within_live():
    """The shadow is born in the first slot a retirement frees and learns every batch with the
    others (a cold one learns the replay buffer first); never more than ``live`` learn."""
    cfg = shadow_job(replay=10 ** 6, grace=1500)     # the first retirement after the first step
    stream = unplanted_stream(0)
    first = next(stream)
    t = AutoTrainer(cfg, make_store({"backend": "memory"}), Schema.of(first))
    t.start()
    t.step(first)
    step_until_shadow([t], stream)
    i = t.search.shadow_slot
    assert len(t.candidates) == 4 and t.candidates[i].epoch == SHADOW_EPOCH
    assert any(name.startswith(f"a{i}g{SHADOW_EPOCH}_") for name in t.params)
    before = t.search.slots[i]["examples"]
    t.step(next(stream))
    assert len(t.candidates) <= 4 and t.search.slots[i]["examples"] == before + 1000


def test_two_trainers_share_the_shadow_through_redis(redis_url, redis_namespace):
    """The shadow's slot is part of the shared search: both trainers build it and step it."""
    cfg = shadow_job()
    stream = unplanted_stream(2)
    first = next(stream)
    trainers = redis_trainers(cfg, first, redis_url, redis_namespace)
    a, b = trainers
    step_until_shadow(trainers, stream)
    a.refresh()
    b.refresh()
    i = a.search.shadow_slot
    assert a.search.to_json() == b.search.to_json() and i is not None
    assert sorted(a.candidates) == sorted(b.candidates) and len(a.candidates) == 4
    assert a.candidates[i].epoch == b.candidates[i].epoch == SHADOW_EPOCH
