"""The search state shared by the trainers of one Redis store: all of them agree on the champion.

The state (``Search.to_json``: slots, champion, pair sums, proposals' random state) is one JSON
value in the job's namespace, ``st:{<ns>/meta}:automl:state``, beside a revision counter
``...:automl:rev`` (same hash slot). After each batch a trainer reads both, adds its own
batch's paired losses to the pair sums (only for the candidates whose epoch is still the one
it trained: a slot reborn meanwhile belongs to another candidate), takes the decisions the
summed evidence supports (``Search.decide``, deterministic given the state), and writes the
state back with a compare-and-set on the revision (a Lua script: write only if nobody wrote
since the read); on a conflict it reads again and redoes it. So every decision is made once,
from every trainer's evidence, and every trainer follows it at its next step.
"""
from __future__ import annotations

import json

from streamtrain.errors import StoreError
from streamtrain.store import redis_keys

from .pairrank import publish

CAS = """
if (redis.call('GET', KEYS[1]) or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
return 1
"""
ATTEMPTS = 100


class SharedSearch:
    def __init__(self, store):
        self.io = store.io
        self.rev_key = redis_keys.meta_key(store.ns, "automl:rev")
        self.state_key = redis_keys.meta_key(store.ns, "automl:state")
        self.conflicts = 0

    def _read(self) -> tuple[str, dict | None]:
        rev, doc = self.io.meta("MGET", self.rev_key, self.state_key, what="read the automl state")
        rev = rev.decode() if isinstance(rev, bytes) else (rev or "")
        return rev, (json.loads(doc) if doc else None)

    def _write(self, rev: str, search) -> bool:
        new = str(int(rev or 0) + 1)
        done = self.io.meta("EVAL", CAS, 2, self.rev_key, self.state_key, rev, new,
                            json.dumps(search.to_json()), what="write the automl state")
        if not done:
            self.conflicts += 1
        return bool(done)

    def begin(self, search, config, fields) -> list[dict]:
        """The shared search (started by the first trainer to get here)."""
        for _ in range(ATTEMPTS):
            rev, doc = self._read()
            if doc is not None:
                search.load_json(doc)
                return []
            events = search.begin(config, fields)
            if self._write(rev, search):
                return events
        raise StoreError(f"automl: the shared search state kept changing ({ATTEMPTS} attempts)")

    def put(self, search) -> None:
        """Make ``search`` the shared state (a restored checkpoint's)."""
        rev, _ = self._read()
        while not self._write(rev, search):
            rev, _ = self._read()

    def refresh(self, search) -> None:
        """Read the shared state into ``search``."""
        _, doc = self._read()
        if doc is not None:
            search.load_json(doc)

    def step(self, search, good: dict, bad: list, epochs: dict, ranked=None) -> list[dict]:
        """Add this trainer's batch (losses of the live candidates, slot → [B]; ``epochs``: the
        epoch each slot had when it trained) to the shared state and decide. ``ranked``: the
        pairs this trainer's ranking (``pairrank.py``, on its own examples) just put first: the
        shared state's from now on, so every proposal is made from the state all trainers read."""
        for _ in range(ATTEMPTS):
            rev, doc = self._read()
            search.load_json(doc)
            publish(search, ranked)
            same = {s for s, slot in search.live_slots().items() if epochs.get(s) == slot["epoch"]}
            search.observe({s: v for s, v in good.items() if s in same})
            events = search.decide([s for s in bad if s in same])
            if self._write(rev, search):
                return events
        raise StoreError(f"automl: the shared search state kept changing ({ATTEMPTS} attempts)")
