"""Scouting a leader's own settings: a challenger of another model (a term the champion lacks,
as + deep beside an LR champion) that *leads* the champion (``Search._leader``: better on
average on all its evidence, not yet confidently better) is where the search is heading before
the bound can say so (on TalkingData + deep leads an LR champion from ~45,000 examples and is
promoted at ~95,000). Its new term brings settings no candidate has been compared on (the deep
part's rate, batch size, product inputs: dimensions only it reads), and they would be its
neighbours' turns only once it is promoted. So, once per such leader that has led since n
examples until ``SUSTAINED`` x n (a lead, not a blip) with n past ``replay`` (the early leads
of a slow starter are blips: on MovieLens + FM or + deep lead a batch or a few from 2,048), one
slot is given to a neighbour of the leader in one of those dimensions, copied from the leader
(warm; ``parent``): the next free one, or, when none is free, that of the challenger of the
champion's own model worst against it, past ``grace`` and not better on average (never a slow
starter), retired (``patience``). It is judged against the champion as any other challenger;
no decision is taken on the leader."""
from __future__ import annotations

import numpy as np

from .space import key

SUSTAINED = 1.25      # a leader since n examples counts from SUSTAINED x n on (a lead, not a blip)


def fresh() -> dict:
    """The scouting state: the leader's epoch, the ``seen`` it leads since, the last leader
    scouted."""
    return {"leader": -1, "since": 0, "scouted": -1}


def track(search) -> list[dict]:
    """Follow the leader (after the decisions of a batch); free a slot for a sustained leader's
    own setting when none is free and there is one to propose."""
    h, lead, state = search.champion, search._leader(), search.scouting
    epoch = search.slots[lead]["epoch"]
    if epoch != state["leader"]:
        state["leader"], state["since"] = epoch, search.seen
    if any(slot is None for slot in search.slots):
        return []
    live = {key(s["assign"]) for s in search.slots}
    if proposal(search, search.avoid() | live)[0] is None:
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
    """The slot of the leader of another model that has led since n (past ``replay``) until
    ``SUSTAINED`` x n and was not scouted yet, else None."""
    h, state = search.champion, search.scouting
    lead = next((i for i, s in enumerate(search.slots) if s is not None and s["epoch"] == state["leader"]), None)
    if lead is None or lead == h or state["leader"] == state["scouted"]:
        return None
    if state["since"] < max(search.replay, 1) or search.seen < SUSTAINED * state["since"]:
        return None
    return lead if search.space.cold(search.slots[lead]["assign"], search.slots[h]["assign"]) else None


def proposal(search, avoid) -> tuple[dict | None, int | None]:
    """A neighbour of the sustained leader (``_sustained``) in a dimension only its new term
    reads, one the leader's parameters can be copied into (not cold from it), not in ``avoid``,
    and the leader's slot; drawn at random from a generator of the search's seed and the
    leader's epoch (the search's own draws are not moved). (None, None) if there is none."""
    lead = _sustained(search)
    if lead is None:
        return None, None
    space, assign, champ = search.space, search.slots[lead]["assign"], search.slots[search.champion]["assign"]
    options = []
    for d in sorted(set(space.active(assign)) - set(space.active(champ))):
        dim = space.dims[d]
        for v in dim.neighbours(assign[dim.name], search.fields):
            out = dict(assign, **{dim.name: v})
            if key(out) not in avoid and not space.cold(out, assign):
                options.append(out)
    if not options:
        return None, None
    rng = np.random.default_rng([search.seed, search.slots[lead]["epoch"]])
    return options[int(rng.integers(len(options)))], lead
