"""A new term first: a challenger of another model (a term the champion lacks, as + deep beside
an LR champion) that *leads* the champion (``Search._leader``: better on average on all its
evidence, not yet confidently better) since n examples until ``SUSTAINED`` x n (a lead, not a
blip) is a sign that the champion's neighbourhood is moving before the bound can say so (on
TalkingData + deep leads an LR champion from ~45,000 examples and is promoted at ~95,000). The
next slot freed while it leads goes, once per such leader, to the leader with *another* new
term (+ FM beside + deep), the term that would be proposed from it once promoted, rather than
to a rate or cross neighbour of the champion. With ``FREE``, a slot is freed for it when none
is (the challenger of the champion's own model worst against it, not better on average: never
a slow starter). The newborn is cold (a term the champion lacks: it learns the replay buffer
first) and judged against the champion as any other; no decision is taken on the leader."""
from __future__ import annotations

import os

import numpy as np

from .space import key

SUSTAINED = float(os.environ.get("SCOUT_SUSTAINED", "1.25"))      # a leader since n examples counts from SUSTAINED x n on (a lead, not a blip)
import os
FREE = os.environ.get("SCOUT_FREE") == "1"   # TEMP for measuring


def fresh() -> dict:
    """The scouting state: the leader's epoch, the ``seen`` it leads since, the last leader
    whose other term was proposed."""
    return {"leader": -1, "since": 0, "scouted": -1}


def track(search) -> list[dict]:
    """Follow the leader (after the decisions of a batch); with ``FREE``, free a slot for a
    sustained leader's other term."""
    h, lead, state = search.champion, search._leader(), search.scouting
    epoch = search.slots[lead]["epoch"]
    if epoch != state["leader"]:
        state["leader"], state["since"] = epoch, search.seen
    if not FREE or _sustained(search) is None or any(slot is None for slot in search.slots):
        return []
    worst, worst_mean, champ = None, 0.0, search.slots[h]["assign"]
    for i, slot in enumerate(search.slots):
        if i in (h, lead, search.shadow_slot) or not search.space.same_model(slot["assign"], champ):
            continue
        n = int(search.n[i, h])
        if n >= search.grace and search.s[i, h] / n >= worst_mean:
            worst, worst_mean = i, search.s[i, h] / n
    return [] if worst is None else search._retire(worst, "patience")


def _sustained(search) -> int | None:
    """The slot of the leader of another model that has led since n until ``SUSTAINED`` x n and
    whose other term was not proposed yet, else None."""
    h, state = search.champion, search.scouting
    lead = next((i for i, s in enumerate(search.slots) if s is not None and s["epoch"] == state["leader"]), None)
    if lead is None or lead == h or state["leader"] == state["scouted"]:
        return None
    if search.seen < SUSTAINED * state["since"] or state["since"] < MIN_SINCE:
        return None
    if not search.space.cold(search.slots[lead]["assign"], search.slots[h]["assign"]):
        return None
    return lead


MIN_SINCE = int(os.environ.get("SCOUT_MIN_SINCE", "1"))   # TEMP: a lead counts only if it began at this example or later
MODE = os.environ.get("SCOUT_MODE", "own")    # TEMP: "other" (variant n) or "own" (variant o)


def proposal(search, avoid) -> tuple[dict | None, int | None]:
    """What the next free slot gets for the sustained leader (``_sustained``), and the slot
    it is copied from (None: the champion), or (None, None)."""
    lead = _sustained(search)
    if lead is None:
        return None, None
    if MODE == "other":
        return _other_term(search, lead, avoid), None
    return _own_setting(search, lead, avoid), lead


def _own_setting(search, lead: int, avoid) -> dict | None:
    """A neighbour of the leader in a dimension only its new term reads (a setting the champion's
    model lacks, so never tried: the deep part's rate or batch size), one the leader's parameters
    can be copied into (not cold from it); drawn at random (a generator of the search's seed and
    the leader's epoch: the search's own draws are not moved), else None."""
    space, assign, champ = search.space, search.slots[lead]["assign"], search.slots[search.champion]["assign"]
    own = sorted(set(space.active(assign)) - set(space.active(champ)))
    options = []
    for d in own:
        dim = space.dims[d]
        for v in dim.neighbours(assign[dim.name], search.fields):
            out = dict(assign, **{dim.name: v})
            if key(out) not in avoid and not space.cold(out, assign):
                options.append(out)
    if not options:
        return None
    rng = np.random.default_rng([search.seed, search.slots[lead]["epoch"]])
    return options[int(rng.integers(len(options)))]


def _other_term(search, lead: int, avoid) -> dict | None:
    """The leader's assignment with one more optional term of a set (not a ``later`` one; in the
    set's order), not in ``avoid``, else None."""
    assign = search.slots[lead]["assign"]
    for dim in search.space.dims:
        if dim.optional is None:
            continue
        have = assign[dim.name]
        for m in dim.optional:
            if m in have or m in dim.later:
                continue
            out = dict(assign, **{dim.name: [t for t in dim.optional if t in have or t == m]})
            if key(out) not in avoid:
                return out
    return None
