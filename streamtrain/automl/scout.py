"""Scouting (variant k): a challenger of another model that *leads* the champion (``_leader``:
better on average on its evidence, not yet confidently) has its neighbours tried before it is
promoted. Once per such leader, a slot is freed for them: the challenger of the champion's own
model (a warm rate or cross: not a slow starter) that is worst against the champion, when it
is not better on average; the free slots then get neighbours of the leader (``parent``), warm
from its parameters. Every decision stays the bound's, against the champion."""
from __future__ import annotations


def scout(search) -> list[dict]:
    """Free a slot for a richer leader's neighbours, once per leader (``search.scouted``)."""
    h, lead = search.champion, search._leader()
    if lead == h or search.slots[lead]["epoch"] == search.scouted:
        return []
    if not search.space.cold(search.slots[lead]["assign"], search.slots[h]["assign"]):
        return []
    search.scouted = search.slots[lead]["epoch"]
    if any(slot is None for slot in search.slots):
        return []
    champ = search.slots[h]["assign"]
    worst, worst_mean = None, 0.0
    for i, slot in enumerate(search.slots):
        if i in (h, lead, search.shadow_slot) or not search.space.same_model(slot["assign"], champ):
            continue
        n = int(search.n[i, h])
        if n >= search.grace and search.s[i, h] / n >= worst_mean:
            worst, worst_mean = i, search.s[i, h] / n
    return [] if worst is None else search._retire(worst, "patience")


def parent(search) -> int:
    """The slot whose neighbours are proposed: a leader of another model than the champion's
    (``scout``), else the champion."""
    h, lead = search.champion, search.served
    if lead != h and search.slots[lead] is not None and search.space.cold(
            search.slots[lead]["assign"], search.slots[h]["assign"]):
        return lead
    return h
