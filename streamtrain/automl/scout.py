"""Scouting (variant k8): a challenger of another model (a term the champion lacks) that
*leads* the champion (``Search._leader``: better on average on all its evidence, not yet
confidently better) is a sign the champion's neighbourhood is moving. Once per such leader that
has led since n examples until ``SUSTAINED`` x n (a lead, not a blip), when no slot is free one
is freed: the challenger of the champion's own model (a warm rate or cross, on the same point
of the learning curve: never a slow starter) that is worst against the champion, past ``grace``
and not better on average, is retired (``patience``), and the slot is filled as any (``_fill``:
the shadow if due, else a neighbour of the champion). No decision is taken on the leader: it is
promoted only by the bound."""
from __future__ import annotations

SUSTAINED = 1.25      # a leader since n examples is scouted from SUSTAINED x n on (a lead, not a blip)


def scout(search) -> list[dict]:
    """Free a slot while a leader of another model leads, once per leader (``search.scouting``:
    the leader's epoch, the ``seen`` it leads since, the last leader scouted)."""
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
    for i, slot in enumerate(search.slots):     # not a slow starter: of the champion's model
        if i in (h, lead, search.shadow_slot) or not search.space.same_model(slot["assign"], champ):
            continue
        n = int(search.n[i, h])                 # and not better on average
        if n >= search.grace and search.s[i, h] / n >= worst_mean:
            worst, worst_mean = i, search.s[i, h] / n
    return [] if worst is None else search._retire(worst, "patience")

