"""Champion and challengers: the search's state and its decisions (no models here).

``live`` slots hold one candidate each (an assignment of the space, and an ``epoch``: the
candidate's identity, new at every birth). Slot ``champion`` serves. After every batch the
trainer adds each live candidate's per-example progressive losses (``observe``); ``decide``
then, for every challenger that shared at least ``grace`` examples with the champion, looks at
the paired differences (``bounds.verdict``): all of them for a challenger of the same model
(other settings), the recent window (the last half to three quarters of them) for one of
another model (a term one of them lacks: learning curves cross, see ``evidence``):

* confidently better: **promoted** (the old champion stays, as a challenger);
* confidently worse, or not better on average after ``patience`` examples: **retired**, and
  its slot gets a new candidate **proposed** from the champion's neighbourhood (ChaCha);
* a candidate whose step was not finite is retired at once and never promoted; when it was the
  champion, the live candidate with the lowest mean loss against it takes over, or, alone, it
  is born again from its own assignment: the champion is never empty.

The confidence bound decides what to *keep* (resources, as ChaCha). What *answers* is slot
``served``: with ``serve: "leader"`` (the default) the live candidate whose progressive loss
is lowest now on the examples it shared with the champion (the champion itself, or a
challenger past ``grace`` paired examples whose mean difference to it is negative, on its
evidence and over all its pairs):
follow-the-leader, chosen after every batch from the evidence before the next one. A
challenger that is better, but not yet *confidently* so, answers meanwhile. With
``serve: "champion"`` the champion answers (ChaCha's rule).

The state is plain JSON (``to_json``/``load_json``, ``state.py``): checkpoints hold it, and trainers that
share a Redis store share it (``shared.py``) so that all of them agree on the champion.
"""
from __future__ import annotations

import numpy as np

from . import state
from .bounds import verdict
from .pairrank import cross_turn, promoted
from .space import Space, key
from .state import REASONS

TRIED = 1000          # assignments remembered as tried (never proposed again while remembered)
EXPIRES = 2.0         # a former champion retired at n examples of the stream may be tried again at 2 n
SHADOW_EPOCH = 1_000_000    # the shadow candidate's epoch (``begin``): it takes none of the births' numbers
LEASE = 2.0           # the shadow born at n examples is looked at from LEASE x n (``_lease``)


class Search:
    def __init__(self, section: dict, space: Space):
        self.space = space
        self.live = int(section["live"])
        self.grace, self.patience = int(section["grace"]), int(section["patience"])
        self.alpha = float(section["confidence"])
        self.margin = float(section["margin"])
        self.replay = int(section["replay"])
        self.follow = section["serve"] == "leader"
        self.span = bool(section["span"])   # the first challengers: the start with each term
        self.rng = np.random.default_rng(int(section["seed"]))
        # a set of terms with ``shadow`` members: the first champion with them (``_shadow``)
        self.shadow_terms = [(d.name, d.shadow) for d in space.dims if getattr(d, "shadow", None)]
        k = self.live
        self.shadow_slot: int | None = None            # the shadow's slot until it is decided
        self.shadow_due = bool(self.shadow_terms)      # the shadow is born in the first slot freed
        self.shadow_yielded = False                    # a new term was born before it (``_fill``)
        self.slots: list[dict | None] = [None] * k     # {"epoch", "assign", "examples", "loss_sum"}
        self.champion = 0
        self.served = 0                                # the slot that answers (``_lead``)
        self.next_epoch = 0
        self.n = np.zeros((k, k), np.int64)            # paired examples of (i, j)
        self.s = np.zeros((k, k))                      # sum of loss_i - loss_j
        self.ss = np.zeros((k, k))                     # sum of (loss_i - loss_j) ** 2
        # the recent window of each pair (``recent``): the sums at its start, and at its midpoint
        self.start = np.zeros((3, k, k))
        self.mid = np.zeros((3, k, k))
        self.windows = np.zeros((k, k), np.int64)      # windows each pair's evidence has had
        self.tried: list[str] = []                     # keys of the last TRIED assignments born
        self.seen = 0                                  # examples of the stream observed
        self.retired_at: dict[str, int] = {}           # a former champion's key → ``seen`` at its last retirement
        self.fields: list[str] = []                    # the stream's categorical fields (crosses)
        self.promotions, self.retired = 0, dict.fromkeys(REASONS, 0)
        self.version = 0                               # bumped at every change of the slots
        self.exhausted, self.exhausted_at = -1, 0      # a champion's epoch whose neighbours were all tried, ``seen`` then
        self.turn = 0                                  # the dimension whose turn it is to move
        self.lease = 0                                 # ``seen`` at which the shadow's lease ends (``_lease``)
        self.ranked: list = []                         # pairs a cross neighbour adds first (pairrank.py)
        self.cross_due = False                         # a new ranking: the next proposal is the crosses' turn
        self.fits = lambda assign: True                # whether an assignment builds on this stream (the trainer's)

    # ---- births ------------------------------------------------------------------------------
    def begin(self, config: dict, fields) -> list[dict]:
        """The first champion (the space's start in ``config``) and its first challengers."""
        self.fields = sorted(fields)
        start = self.space.start(config, self.fields)
        events = [self._born(0, start)]
        self.slots[0]["led"] = True
        self.champion = self.served = 0
        for i, assign in enumerate([a for a in _spans(self.space, start) if self.fits(a)][:self.live - 1] if self.span else [], 1):
            events.append(self._born(i, assign))        # live from the first example (``span``)
        return events + self._fill()

    def _shadow(self, i: int, start: dict) -> dict:
        """The shadow: the first champion with the ``shadow`` terms, a term whose gain is early
        (born mid-stream, cold, it comes too late). It is one of the ``live`` candidates (the
        budget): born in the first slot freed, but for one new term proposed there (which goes
        first, once: ``_fill``), it learns the replay buffer first (every example so far, while
        the stream is shorter than ``replay``). It is judged as any challenger of another model,
        answers only once promoted (``_lead``) and holds its slot for a lease (``_lease``)."""
        event = self._born(i, self._shadow_assign(start))
        self.next_epoch -= 1                # the births after it keep their numbers (and names)
        self.slots[i]["epoch"] = event["epoch"] = SHADOW_EPOCH
        self.shadow_slot, self.shadow_due = i, False
        self.lease = int(LEASE * self.seen)
        return event

    def _shadow_assign(self, start: dict) -> dict:
        dims = {d.name: d for d in self.space.dims}
        return {**start, **{n: [m for m in dims[n].optional if m in start[n] or m in terms] for n, terms in self.shadow_terms}}

    def _shadow_turn(self) -> bool:
        """The shadow is due from the first slot freed while the champion has the start's terms."""
        champ, dims = self.slots[self.champion]["assign"], {d.name: d for d in self.space.dims}
        if any(set(champ[n]) != set(dims[n].start) or set(t) <= set(champ[n]) for n, t in self.shadow_terms) \
                or not self.fits(self._shadow_assign(champ)):
            self.shadow_due = False
        return self.shadow_due and self.seen > 0

    def _born(self, slot: int, assign: dict) -> dict:
        self.slots[slot] = {"epoch": self.next_epoch, "assign": assign, "examples": 0, "loss_sum": 0.0}
        self.next_epoch += 1
        k = key(assign)
        if k not in self.tried:
            self.tried.append(k)
            del self.tried[:-TRIED]         # the oldest may be tried again (the state stays small)
        for a in (self.n, self.s, self.ss, self.windows):
            a[slot, :] = a[:, slot] = 0
        for a in (self.start, self.mid):
            a[:, slot, :] = a[:, :, slot] = 0
        self.version += 1
        return {"event": "born", "slot": slot, "epoch": self.slots[slot]["epoch"], "assign": assign}

    def _fill(self) -> list[dict]:
        events = []
        champ = self.slots[self.champion]
        if self.exhausted == champ["epoch"] and not self._expired_since():
            return events
        live = {key(s["assign"]) for s in self.slots if s is not None}
        held = sum(s is not None for s in self.slots)
        for i, slot in enumerate(self.slots):
            if slot is not None or held >= self.live:
                continue            # the shadow counts: at most ``live`` are held
            state = (self.turn, self.cross_due, self.rng.bit_generator.state)
            turn = cross_turn(self.space) if self.cross_due else self.turn     # the rotation goes on after it
            assign, turn = self._proposal(champ["assign"], live, turn)
            self.turn, self.cross_due = self.turn if self.cross_due else turn, False
            due = self._shadow_turn()
            if due and assign is not None and self.space.cold(assign, champ["assign"]) and not self.shadow_yielded:
                self.shadow_yielded, due = True, False      # a new term first, once
            if due:     # the neighbour the shadow displaces is proposed again at the next free slot
                self.turn, self.cross_due, self.rng.bit_generator.state = state
                events.append(self._shadow(i, champ["assign"]))
                assign = self.slots[i]["assign"]
            elif assign is None:            # every neighbour tried: slots wait for a new champion
                self.exhausted, self.exhausted_at = champ["epoch"], self.seen
                break
            else:
                events.append(self._born(i, assign))
            live.add(key(assign))
            held += 1
            if self.space.cold(assign, champ["assign"]):
                # a cold newborn (the shadow too) learns the last ``replay`` examples first (the
                # trainer's), and is compared once it learnt what the champion had learnt at its
                # birth (at most ``patience``): equal experience, not its cold start
                self.slots[i]["grace"] = max(self.grace, min(champ["examples"] - self.replay, self.patience))
        return events

    def _proposal(self, champ: dict, live: set, turn: int):
        """The space's next proposal that builds on this stream (``fits``: not, e.g., inner
        products of the field embeddings on a stream of one categorical field)."""
        unfit: set[str] = set()
        while True:
            assign, after = self.space.propose(champ, self.fields, self.rng, self.avoid() | live | unfit, turn, live, self.ranked)
            if assign is None or self.fits(assign):
                return assign, after
            unfit.add(key(assign))

    def avoid(self) -> set[str]:
        """The keys not to propose: those tried, but for a former champion's retirement the
        stream has outgrown (retired at n examples, ``EXPIRES`` × n seen since the start; retired
        again, from then): the best setting moves as the data grow (a step size shrinks), so
        what led early may lead again late."""
        return {k for k in self.tried if self.seen < EXPIRES * self.retired_at.get(k, np.inf)}

    def _expired_since(self) -> bool:
        """Whether a retirement expired since the search last ran out of neighbours."""
        return any(self.exhausted_at < EXPIRES * at <= self.seen for at in self.retired_at.values())

    # ---- evidence ----------------------------------------------------------------------------
    def observe(self, losses: dict[int, np.ndarray]) -> None:
        """Add one batch's per-example progressive losses of the live candidates (slot → [B])."""
        if not losses:
            return
        slots = np.array(sorted(losses))
        self.seen += max(len(v) for v in losses.values())
        for i in slots:
            self.slots[i]["examples"] += len(losses[i])
            self.slots[i]["loss_sum"] += float(np.sum(losses[i]))
        # pairs are compared once both have learnt ``grace`` examples (a newborn's cold start
        # is not held against it for ever)
        slots = np.array([i for i in slots if self.slots[i]["examples"] > self.slots[i].get("grace", self.grace)])
        if len(slots) < 2:
            return
        m = np.stack([np.asarray(losses[i], np.float64) for i in slots])
        total = m.sum(axis=1)
        square = (m * m).sum(axis=1)
        ix = np.ix_(slots, slots)
        self.n[ix] += m.shape[1]
        self.s[ix] += total[:, None] - total[None, :]
        self.ss[ix] += square[:, None] + square[None, :] - 2.0 * (m @ m.T)
        self._slide()

    def _slide(self) -> None:
        """Move each pair's recent window on once its paired examples doubled since the window's
        midpoint (and are at least 2 ``grace``): the old midpoint starts the window, now is its
        new midpoint. The window then holds the last half to three quarters of the pair's
        examples: the first ones, when a newborn was still learning, are forgotten."""
        now = np.stack([self.n, self.s, self.ss]).astype(np.float64)
        due = (self.n >= np.maximum(2 * self.mid[0], 2 * self.grace)) & (self.n > 0)
        if due.any():
            self.start[:, due] = self.mid[:, due]
            self.mid[:, due] = now[:, due]
            self.windows[due] += 1

    def evidence(self, i: int, j: int) -> list[tuple[int, float, float, float]]:
        """The paired evidence of ``i`` against ``j``: (examples, sum and sum of squares of the
        differences, the error probability it may spend) on every example they shared and, for
        two candidates of different models (a term one lacks), on their recent window too.
        Learning curves cross: a richer model learns slower at first, so its first examples
        understate what it is worth now; two of the same model (other rates, crosses: a warm
        newborn starts from its parent's parameters) are on the same point of the curve."""
        every = (int(self.n[i, j]), self.s[i, j], self.ss[i, j], self.alpha)
        if self.space.same_model(self.slots[i]["assign"], self.slots[j]["assign"]):
            return [every]
        return [every, self.recent(i, j)]

    def verdict(self, i: int, j: int, margin: float = 0.0) -> tuple[int, float]:
        """-1: ``i`` is confidently better than ``j``, +1: confidently worse, else 0; and the
        smallest mean difference of its evidences. Early evidence understates the richer model
        (a term the other lacks): a decision *for* it needs one of the evidences, a decision
        *against* it both (so a slow starter better lately is kept, and a simpler model is not
        promoted on the richer one's first examples). Where one evidence may decide, each
        spends a share of the error probability (a union bound)."""
        found = self.evidence(i, j)
        richer = self.space.cold(self.slots[i]["assign"], self.slots[j]["assign"])
        share = {True: len(found), False: 1}        # richer: its promotion needs one; else its retirement
        better = [verdict(n, t, q, a / share[richer], self.grace) < 0 for n, t, q, a in found]
        worse = [verdict(n, t, q, a / share[not richer], self.grace, margin) > 0 for n, t, q, a in found]
        low = _means(found)[1]
        if any(better) if richer else all(better):
            return -1, low
        return (1 if (all(worse) if richer else any(worse)) else 0), low

    def recent(self, i: int, j: int) -> tuple[int, float, float, float]:
        """The paired evidence of ``i`` against ``j`` in their recent window (``evidence``)."""
        n = int(self.n[i, j] - self.start[0, i, j])
        # one confidence sequence per window start: a union bound over them (sum 6/(pi^2 w^2) = 1)
        alpha = self.alpha * 6.0 / (np.pi ** 2 * max(int(self.windows[i, j]), 1) ** 2)
        return n, self.s[i, j] - self.start[1, i, j], self.ss[i, j] - self.start[2, i, j], alpha

    # ---- decisions ---------------------------------------------------------------------------
    def decide(self, nonfinite=()) -> list[dict]:
        """Promotions and retirements the evidence supports now, then births into free slots."""
        events = []
        for i in sorted(set(nonfinite)):
            if self.slots[i] is not None:
                events += self._retire(i, "nonfinite")
        h = self.champion
        best, best_mean = None, 0.0
        for i, slot in enumerate(self.slots):
            if slot is None or i == h:
                continue
            v, low = self.verdict(i, h)
            if v < 0 and low < best_mean:
                best, best_mean = i, low
            elif v > 0:
                events += self._retire(i, "worse")
            elif self._no_gain(i, h):
                events += self._retire(i, "no_gain")
            elif self.n[i, h] >= self.patience and low >= 0:
                events += self._retire(i, "patience")
        if best is not None:
            if best == self.shadow_slot:    # a champion as any other from now on
                self.shadow_slot = None
            self.champion = best
            self.slots[best]["led"] = True
            self.promotions += 1
            self.version += 1
            promoted(self, self.slots[h]["assign"], self.slots[best]["assign"])
            events.append({"event": "promoted", "slot": best, "from": h, "epoch": self.slots[best]["epoch"],
                           "assign": self.slots[best]["assign"], "mean_difference": float(best_mean)})
        events += self._lease()
        events += self._fill()
        self._lead()
        return events

    def _lease(self) -> list[dict]:
        """The shadow born at n examples holds its slot until ``LEASE`` x n (scale-free); then it
        is retired (``patience``) unless it leads the search (``_leader`` with it), and its
        lease runs until the stream has doubled again (ChaCha's doubling, Wu et al. 2021)."""
        i = self.shadow_slot
        if i is None or self.seen < self.lease:
            return []
        found = self.evidence(i, self.champion)
        if min(e[0] for e in found) < self.slots[i].get("grace", self.grace) or (
                _means(found)[0] < 0 and self._leader(shadow=True) == i):
            self.lease = 2 * self.seen
            return []
        return self._retire(i, "patience")

    def _no_gain(self, i: int, h: int) -> bool:
        """``i`` is of the champion ``h``'s model (other rates, crosses: on the same point of the
        learning curve) and confidently not better than it by ``margin`` × its mean loss."""
        if self.margin <= 0 or not self.space.same_model(self.slots[i]["assign"], self.slots[h]["assign"]):
            return False
        return self.verdict(i, h, self.margin * self.mean_loss(h))[0] > 0

    def _lead(self) -> None:
        """``served``: the champion, or (``serve: "leader"``) the live challenger with the lowest
        finite mean loss difference to it over at least ``grace`` paired examples of its evidence
        (``evidence``: the recent window of another model), negative there and over all its pairs."""
        self.served = self._leader() if self.follow else self.champion

    def _leader(self, shadow: bool = False) -> int:
        """The live candidate that would answer (``_lead``; the shadow too with ``shadow``)."""
        h = self.champion
        best, leader = 0.0, h
        for i, slot in enumerate(self.slots):
            if slot is None or i == h or (i == self.shadow_slot and not shadow):     # the shadow answers once promoted
                continue
            found = self.evidence(i, h)
            if min(e[0] for e in found) < self.grace:
                continue
            mean = _means(found)[0]         # better on all of its evidence (over all pairs and lately)
            if np.isfinite(mean) and mean < best:
                leader, best = i, mean
        return leader

    def _retire(self, i: int, reason: str) -> list[dict]:
        slot = self.slots[i]
        self.slots[i] = None
        if i == self.shadow_slot:
            self.shadow_slot = None
        self.retired[reason] += 1
        self.version += 1
        k = key(slot["assign"])
        if reason != "nonfinite" and (slot.get("led") or k in self.retired_at):     # a former champion
            self.retired_at = {t: at for t, at in self.retired_at.items() if t != k and t in self.tried}
            self.retired_at[k] = self.seen
        events = [{"event": "retired", "slot": i, "epoch": slot["epoch"], "reason": reason, "assign": slot["assign"]}]
        if i == self.champion:
            events += self._succeed(i, slot)
        return events

    def _succeed(self, old: int, slot: dict) -> list[dict]:
        """The champion was retired (not finite): the best other live candidate, or itself again."""
        others = [j for j, s in enumerate(self.slots) if s is not None]
        if not others:
            return [self._born(old, slot["assign"])]
        means = [self.s[j, old] / self.n[j, old] if self.n[j, old] else 0.0 for j in others]
        self.champion = others[int(np.argmin(means))]
        self.slots[self.champion]["led"] = True
        self.promotions += 1
        return [{"event": "promoted", "slot": self.champion, "from": old, "epoch": self.slots[self.champion]["epoch"],
                 "assign": self.slots[self.champion]["assign"], "mean_difference": float(min(means))}]

    # ---- reading -----------------------------------------------------------------------------
    def live_slots(self) -> dict[int, dict]:
        return {i: s for i, s in enumerate(self.slots) if s is not None}

    def mean_loss(self, i: int) -> float:
        s = self.slots[i]
        return s["loss_sum"] / s["examples"] if s and s["examples"] else float("nan")

    def to_json(self) -> dict:
        return state.dump(self)

    def load_json(self, doc: dict) -> None:
        state.load(self, doc)


def _spans(space: Space, start: dict) -> list[dict]:
    """The start with one optional term of a set added (each but its ``later`` ones, in the set's
    order): ``automl.span``'s first challengers, one per term, live from the first example."""
    return [dict(start, **{d.name: [t for t in d.optional if t in start[d.name] or t == m]})
            for d in space.dims if d.optional for m in d.optional if m not in d.later and m not in start[d.name]]


def _means(found) -> tuple[float, float]:
    """The largest and the smallest mean difference of a list of evidences (0 without examples)."""
    means = [total / n if n else 0.0 for n, total, _, _ in found]
    return max(means), min(means)
