"""The search's state as plain JSON (``Search.to_json``/``load_json``): checkpoints hold it,
and trainers that share a Redis store share it (``shared.py``). ``load`` reads states saved by
older versions too (a key missing: its value before the key existed)."""
from __future__ import annotations

import numpy as np

REASONS = ("worse", "no_gain", "patience", "nonfinite")


def dump(self) -> dict:
    """The state of ``self`` (a ``Search``) as plain JSON."""
    return {"slots": self.slots, "champion": self.champion, "served": self.served, "next_epoch": self.next_epoch,
            "n": self.n.tolist(), "s": self.s.tolist(), "ss": self.ss.tolist(), "tried": self.tried,
            "start": self.start.tolist(), "mid": self.mid.tolist(), "windows": self.windows.tolist(),
            "fields": self.fields, "promotions": self.promotions, "retired": self.retired,
            "version": self.version, "exhausted": self.exhausted, "exhausted_at": self.exhausted_at,
            "seen": self.seen, "retired_at": self.retired_at, "turn": self.turn, "rng": self.rng.bit_generator.state,
            "shadow_slot": self.shadow_slot, "shadow_due": self.shadow_due, "shadow_yielded": self.shadow_yielded, "lease": self.lease,
            "ranked": self.ranked, "cross_due": self.cross_due}


def load(self, doc: dict) -> None:
    """Set ``self`` (a ``Search``) to a state ``dump`` wrote."""
    if len(doc["slots"]) != self.live:
        raise ValueError(f"the saved search has {len(doc['slots'])} slots, automl.live is {self.live}")
    self.slots, self.champion, self.next_epoch = doc["slots"], doc["champion"], doc["next_epoch"]
    self.served = doc.get("served", self.champion)
    self.n = np.array(doc["n"], np.int64)
    self.s, self.ss = np.array(doc["s"], np.float64), np.array(doc["ss"], np.float64)
    k = self.live            # a state saved before the recent windows: every pair's starts at 0
    self.start = np.array(doc.get("start", np.zeros((3, k, k))), np.float64)
    self.mid = np.array(doc.get("mid", np.zeros((3, k, k))), np.float64)
    self.windows = np.array(doc.get("windows", np.zeros((k, k))), np.int64)
    self.tried, self.fields = list(doc["tried"]), list(doc["fields"])
    self.promotions, self.retired, self.version = doc["promotions"], dict(doc["retired"]), doc["version"]
    self.retired = dict.fromkeys(REASONS, 0) | self.retired    # saved before a reason existed
    self.exhausted = doc.get("exhausted", -1)
    self.exhausted_at, self.seen = doc.get("exhausted_at", 0), doc.get("seen", 0)
    self.retired_at = dict(doc.get("retired_at", {}))     # saved before retirements expired: none
    self.turn, self.ranked, self.cross_due = doc.get("turn", 0), list(doc.get("ranked", [])), doc.get("cross_due", False)
    self.shadow_slot, self.shadow_due = doc.get("shadow_slot"), doc.get("shadow_due", False)
    self.shadow_yielded, self.lease = doc.get("shadow_yielded", True), doc.get("lease", 0)
    self.rng.bit_generator.state = doc["rng"]
