"""Scouting (variant k): a challenger of another model that *leads* the champion (``_leader``:
better on average on its evidence, not yet confidently) has its neighbours tried before it is
promoted. Once per such leader, a slot is freed for them: the challenger of the champion's own
model (a warm rate or cross: not a slow starter) that is worst against the champion, when it
is not better on average; the free slots then get neighbours of the leader (``parent``), warm
from its parameters. Every decision stays the bound's, against the champion."""
from __future__ import annotations

from .bounds import means

SUSTAINED = 1.25      # a leader since n examples is scouted from SUSTAINED x n on (a lead, not a blip)


def scout(search) -> list[dict]:
    """Free a slot for a richer leader's neighbours, once per leader that has led
    since n examples until ``SUSTAINED`` x n (``search.scouting``)."""
    h, lead, state = search.champion, search._leader(), search.scouting
    epoch = search.slots[lead]["epoch"]
    if epoch != state["leader"]:
        state["leader"], state["since"] = epoch, search.seen
    if lead == h or epoch == state["scouted"] or search.seen < SUSTAINED * state["since"]:
        return []
    if not search.space.cold(search.slots[lead]["assign"], search.slots[h]["assign"]):
        return []
    state["scouted"] = epoch
    if any(slot is None for slot in search.slots):
        return []
    worst, worst_mean, champ = None, 0.0, search.slots[h]["assign"]
    for i, slot in enumerate(search.slots):   # not a slow starter: of the champion's model
        if i in (h, lead, search.shadow_slot) or not search.space.same_model(slot["assign"], champ):
            continue
        found = search.evidence(i, h)      # and not better on average
        if min(e[0] for e in found) >= search.grace and means(found)[1] >= worst_mean:
            worst, worst_mean = i, means(found)[1]
    return [] if worst is None else search._retire(worst, "patience")


def parent(search) -> int:
    """The slot whose neighbours are proposed: a scouted leader of another model than the
    champion's (``scout``) while it leads, else the champion."""
    h, lead = search.champion, search._leader()
    if lead != h and search.slots[lead]["epoch"] == search.scouting["scouted"] and search.space.cold(
            search.slots[lead]["assign"], search.slots[h]["assign"]):
        return lead
    return h
