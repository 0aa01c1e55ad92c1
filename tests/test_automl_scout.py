"""Scouting a leader's own settings (streamtrain/automl/scout.py): once a challenger of another
model has led the champion from n examples (past ``replay``) until 1.25 n, a slot goes to its
neighbour in a dimension only it reads, copied from it; once per leader, never for a lead that
began within the first ``replay`` examples, and the state survives a JSON round trip."""
from __future__ import annotations

import json

import numpy as np

from streamtrain.automl.search import Search
from streamtrain.automl.space import AUTOML, Space
from streamtrain.schema import with_defaults

# per-candidate losses around 0.5 whose paired differences have mean 0 in every batch of 100 and
# a spread of ~0.4: a mean shift of a few thousandths is never confidently so here
PATTERNS = [np.tile(p, 25) * 0.3 for p in ([1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1])]


SECTION = with_defaults(AUTOML, {"live": 3, "grace": 100, "replay": 500, "margin": 0.0, "space": [
    {"name": "x", "paths": ["batch_size"], "values": [1, 2, 3], "start": 2},
    {"name": "y", "paths": ["seed"], "values": [1, 2], "start": 1},
    {"name": "z", "paths": ["z"], "values": [1, 2, 3], "start": 2}]})


def search() -> Search:
    """Three slots: the champion (y=1), a challenger of its model (x moved) and one of another
    model (y=2, a term the champion lacks), which alone reads dimension z."""
    s = Search(SECTION, Space(SECTION))
    s.space.same_model = lambda a, b: a["y"] == b["y"]
    s.space.cold = lambda a, p: a["y"] == 2 and p["y"] != 2
    s.space.active = lambda a: [0, 1, 2] if a["y"] == 2 else [0, 1]
    s.begin({"layers": [], "batch_size": 2, "seed": 1, "z": 2}, [])
    assert [s.slots[i]["assign"]["y"] for i in range(3)] == [1, 1, 2]
    return s


def feed(s: Search, shift: dict) -> list[dict]:
    s.observe({i: 0.5 + shift[i] + PATTERNS[i] for i in range(3)})
    return s.decide()


def test_a_sustained_leader_gets_a_neighbour_in_its_own_dimension_copied_from_it():
    s = search()
    lead, worst = 2, 1
    events = []
    while s.seen < 700:                     # the leader-to-be trails until past ``replay``
        events += feed(s, {0: 0.0, worst: 0.002, lead: 0.001})
    assert events == [] and s._leader() == 0
    since = None
    while not events and s.seen < 5000:
        events = feed(s, {0: 0.0, worst: 0.002, lead: -0.004})
        since = since or (s.seen if s._leader() == lead else None)
    # it leads from 900 (0.001 x 700 made up at 0.004 a pair) and is scouted at 1.25 x 900
    assert since == 900 and s.seen == 1200 and s.champion == 0 and s.promotions == 0
    assert [(e["event"], e["slot"]) for e in events] == [("retired", worst), ("born", worst)]
    assert events[0]["reason"] == "patience"
    born, leader = events[1]["assign"], s.slots[lead]["assign"]
    assert {k for k in born if born[k] != leader[k]} == {"z"} and abs(born["z"] - leader["z"]) == 1
    assert s.slots[worst]["parent"] == lead and s.scouting["scouted"] == s.slots[lead]["epoch"]
    again = Search(SECTION, s.space)
    again.load_json(json.loads(json.dumps(s.to_json())))
    assert again.to_json() == s.to_json()
    for _ in range(30):                     # the same leader: scouted once
        assert all(e.get("reason") != "patience" for e in feed(s, {0: 0.0, worst: 0.002, lead: -0.004}))


def test_a_lead_that_began_within_replay_is_not_scouted():
    s = search()
    for _ in range(50):                     # leads from 200 examples on: a slow starter's early lead
        assert all(e.get("reason") != "patience" for e in feed(s, {0: 0.0, 1: 0.002, 2: -0.004}))
    assert s._leader() == 2 and s.scouting["since"] == 200 and s.scouting["scouted"] == -1
