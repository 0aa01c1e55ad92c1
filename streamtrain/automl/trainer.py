"""The AutoML trainer: every live candidate steps on the same parsed batch, then the search decides.

The reader parses a batch once; each candidate feeds it to its own graph, predicts every
example before learning it (its progressive loss is honest) and pushes to its own namespace
of the shared store. The job sees one trainer: the served candidate's predictions (the search's
``served`` slot: the leader now, or the champion) are what it scores, serves and watches for drift; ``step`` returns once every candidate applied the batch, so the
job commits the batch's offsets only then.
"""
from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np

from streamtrain.errors import ConfigError, StoreError
from streamtrain.graph import Graph
from streamtrain.progressive import tracker_class
from streamtrain.schema import with_defaults
from streamtrain.trainer import StepResult

from .candidates import Candidate
from .pairrank import PairRank, publish, wide_cross
from .replay import Replay
from .search import Search
from .space import AUTOML, Space, key, reachable

log = logging.getLogger("streamtrain.automl")


class _Status:
    """The served candidate's layer states under the base config's layer names (bounded metric labels)."""

    def __init__(self, owner):
        self.owner = owner

    @property
    def status(self) -> dict:
        champ = self.owner.served
        n = len(champ.prefix)
        return {name[n:]: s for name, s in champ.trainer.ctx.status.items()}


class AutoTrainer:
    """Duck-types ``Trainer`` for the job (step, graph, progressive, counters)."""

    engine = None

    def __init__(self, config: dict, store, schema, *, seed: int = 0, shared=None):
        self.config, self.store, self.schema, self.seed = config, store, schema, seed
        self.section = with_defaults(AUTOML, config["automl"])
        self.space = Space(self.section, config)
        self.search = Search(self.section, self.space)
        self.search.fits = self._fits
        self._fit: dict[str, bool] = {}
        self.shared = shared            # trainers on one Redis store: the search state they share
        self.candidates: dict[int, Candidate] = {}
        self.batches = self.examples = self.nonfinite = self.skipped_examples = 0
        self.events: list[dict] = []    # the last step's decisions
        self.recent = Replay(self.section["replay"])    # the last batches (``automl.replay`` examples)
        fields = sorted(schema.sparse)  # a wide stream's cross neighbours add pairs in the ranking's order
        wide = self.section["rank"] > 0 and any(wide_cross(config, d, fields) for d in self.space.dims)
        self.pairs = PairRank(fields, window=self.section["rank"]) if wide else None
        self.on_event = []              # callables(event) (metrics, logs)
        self.ctx = _Status(self)
        self.progressive = None
        self.ahead = lambda: True       # the job's (``Trainer.ahead``): every candidate's prepare follows it
        # candidates step side by side on a store that allows it (``ParamStore.concurrent``): their
        # compiled loops hold no GIL, so a second core takes one while the first takes another
        threads = min(int(self.section["live"]), os.cpu_count() or 1)
        self._pool = (ThreadPoolExecutor(threads, thread_name_prefix="streamtrain-automl")
                      if threads > 1 and getattr(store, "concurrent", False) else None)

    def _fits(self, assign: dict) -> bool:
        """Whether the assignment's model builds on this stream's fields (cached by its key): the
        search proposes no other (it follows from the schema, so trainers sharing a search agree).
        On a stream whose models leave layers out (numeric columns only), a setting that changes
        only left-out layers (``fm_dim`` with no categorical field) makes no new model: an
        assignment fits only with every such setting at its start value (``_built``)."""
        k = key(assign)
        if k not in self._fit:
            try:
                built = self._built(assign)
                start = self.space.start(self.config, sorted(self.schema.sparse)) if built[1] else assign
                same = next((d for d, other in _back_to(assign, start) if self._same(other, built)), None)
                if same is not None:
                    log.info("automl: not proposed on this stream: %s (its %s changes only layers it leaves out)",
                             k, same)
                self._fit[k] = same is None
            except ConfigError as err:
                log.info("automl: not proposed on this stream: %s (%s)", k, str(err).replace("\n", " "))
                self._fit[k] = False
        return self._fit[k]

    def _same(self, assign: dict, built: tuple) -> bool:
        try:
            return self._built(assign) == built
        except ConfigError:
            return False

    def _built(self, assign: dict) -> tuple[str, bool]:
        """(the applied config with the layers as built on this stream, whether some were left out)."""
        applied = self.space.apply(self.config, assign)
        graph = Graph.from_config(reachable(applied["layers"]), self.schema)
        return json.dumps({**applied, "layers": graph.get_config()}, sort_keys=True, default=str), bool(graph.left_out)

    # ---- the candidates ----------------------------------------------------------------------
    def start(self, state: dict | None = None) -> None:
        """The first candidates (a fresh search), or those of a saved search state."""
        if state is not None:
            self.search.load_json(state)
            if self.shared is not None:         # the restored search is the trainers' from now on
                self.shared.put(self.search)
            events = []
        elif self.shared is not None:
            events = self.shared.begin(self.search, self.config, list(self.schema.sparse))
        else:
            events = self.search.begin(self.config, list(self.schema.sparse))
        self._sync(_born(events))
        self._report(events)
        self.progressive = tracker_class(self.graph.loss)()

    def _sync(self, born=()) -> None:
        """Build the candidates of the search's live slots; drop those no longer live. The
        candidates this trainer's search just gave birth to (``born``: their epochs) start from
        a copy of the champion's parameters where they have the same ones."""
        live = self.search.live_slots()
        for slot, cand in list(self.candidates.items()):
            if slot not in live or live[slot]["epoch"] != cand.epoch:
                self.store.drop(cand.params)
                del self.candidates[slot]
        for slot, s in live.items():
            if slot not in self.candidates:
                cfg = self.space.apply(self.config, s["assign"])
                self.candidates[slot] = Candidate(slot, s["epoch"], s["assign"], cfg, self.schema, self.store,
                                                  seed=self.seed)
                self.candidates[slot].trainer.ahead = lambda: self.ahead()
                if s["epoch"] in born and not self._warm(self.candidates[slot]):
                    self._replay(self.candidates[slot])

    def _warm(self, cand: Candidate) -> bool:
        """ChaCha's challengers start cold, and a cold challenger is compared with a warm
        champion: it loses for as long as it catches up. Here a challenger inherits what the
        champion learnt (every parameter of the same name and shape; a new cross's table starts
        empty), so the paired losses compare the two configurations from the same knowledge."""
        champ = self.candidates.get(self.search.champion)
        if champ is None or champ is cand or not self.search.slots[champ.slot]["examples"]:
            return True         # nothing learnt yet: nothing to copy, nothing to catch up
        pairs = {}
        for name, spec in cand.graph.params.items():
            src = champ.prefix + name[len(cand.prefix):]
            other = champ.graph.params.get(src)
            if other is not None and other.table == spec.table and (
                    other.dim == spec.dim if spec.table else tuple(other.shape) == tuple(spec.shape)):
                pairs[src] = name
        if len(pairs) < len(cand.graph.params):
            return False        # a new term (parameters the champion lacks): the whole model starts cold
        try:
            # a former champion tried again keeps the champion's weights under its own rate
            self.store.copy(pairs, carry=key(cand.assign) in self.search.retired_at)
        except StoreError as err:        # another trainer of a shared search wrote its rows first
            log.warning("automl: slot %d starts cold (copying the champion's parameters failed: %s)",
                        cand.slot, err)
        return True

    def _replay(self, cand: Candidate) -> None:
        """A cold newborn first learns the recent batches (``automl.replay`` examples, oldest
        first), so that it joins having learnt what the champion learnt lately instead of
        nothing; its progressive loss counts from the next batch on."""
        for batch in self.recent:
            if not cand.step(batch).applied:
                break
            self.recent.replayed += batch.size

    @property
    def replayed(self) -> int:
        """Examples cold newborns learnt from the replay buffer."""
        return self.recent.replayed

    def refresh(self) -> None:
        """Follow the shared search (trainers on one Redis store) without stepping."""
        if self.shared is not None:
            self.shared.refresh(self.search)
            self._sync()

    @property
    def champion(self) -> Candidate:
        return self.candidates[self.search.champion]

    @property
    def served(self) -> Candidate:
        """The candidate that answers (``Search.served``)."""
        return self.candidates[self.search.served]

    @property
    def graph(self):
        return self.served.graph

    @property
    def params(self) -> dict:
        """Every live candidate's parameters (what a checkpoint of the job holds)."""
        return {n: s for c in self.candidates.values() for n, s in c.graph.params.items()}

    # ---- one step ----------------------------------------------------------------------------
    def step(self, batch) -> StepResult:
        t0 = time.perf_counter()
        self.refresh()          # other trainers' decisions since this one's last step
        results = self._step_all(batch)
        served = results[self.search.served]
        seconds = {}
        for r in results.values():
            for k, v in r.seconds.items():
                seconds[k] = seconds.get(k, 0.0) + v
        losses = None
        if served.applied:
            losses = self.progressive.update(batch.labels, served.predictions)
            self.batches += 1
            self.examples += batch.size
        else:
            self.nonfinite += 1
            self.skipped_examples += batch.size
        good = {s: r.losses for s, r in results.items() if r.applied and r.losses is not None}
        bad = [s for s, r in results.items() if not r.applied]
        t1 = time.perf_counter()
        ranked = self._rank(batch, results.get(self.search.champion))
        if self.shared is not None:
            epochs = {slot: cand.epoch for slot, cand in self.candidates.items()}
            events = self.shared.step(self.search, good, bad, epochs, ranked)
        else:
            publish(self.search, ranked)
            self.search.observe(good)
            events = self.search.decide(bad)
        self.recent.remember(batch)
        self._sync(_born(events))
        self._report(events)
        seconds["search"] = time.perf_counter() - t1
        seconds["candidates"] = t1 - t0
        return StepResult(served.loss, served.predictions, served.applied, reason=served.reason,
                          seconds=seconds, losses=losses)

    def _step_all(self, batch) -> dict:
        """Every live candidate's step on the batch (side by side when ``_pool``): slot -> result.
        Each learns its own parameters from the same batch, so the order changes no number."""
        if self._pool is None or len(self.candidates) < 2:
            return {slot: cand.step(batch) for slot, cand in self.candidates.items()}
        running = {slot: self._pool.submit(cand.step, batch) for slot, cand in self.candidates.items()}
        wait(running.values())          # all of them done before any error is raised: none left running
        return {slot: f.result() for slot, f in running.items()}

    def _rank(self, batch, champion) -> list | None:
        """The champion's residuals into the pair ranking (a wide stream: ``pairrank.py``); the
        ranked pairs at the end of its window, else None."""
        if self.pairs is None or champion is None or not champion.applied:
            return None
        residual = batch.labels - np.asarray(champion.predictions, np.float64).reshape(-1)
        return self.pairs.add(batch, residual)

    def _report(self, events: list[dict]) -> None:
        self.events = events
        for e in events:
            if e["event"] == "promoted":
                log.info("automl: slot %d promoted to champion (from slot %d; mean loss difference %.5f): %s",
                         e["slot"], e["from"], e.get("mean_difference", 0.0), e["assign"],
                         extra={"fields": {"event": "automl_promoted", **e}})
            else:
                log.info("automl: slot %d %s%s: %s", e["slot"], e["event"],
                         f" ({e['reason']})" if "reason" in e else "", e["assign"],
                         extra={"fields": {"event": f"automl_{e['event']}", **e}})
            for hook in self.on_event:
                hook(e)

    # ---- what the job asks of a trainer ------------------------------------------------------
    @property
    def stepped(self) -> int:
        return self.examples + self.skipped_examples

    @property
    def hits(self) -> int:
        return getattr(self.progressive, "hits", 0)

    def prepare(self, batch) -> None:
        """Each live candidate's ``Trainer.prepare`` of the batch (the file reader's parse thread
        calls it, so the candidates' feeds leave the training thread), kept on the batch by
        graph (``batch.prepared``); a candidate born since feeds it in its step."""
        for cand in list(self.candidates.values()):
            if cand.graph.prepares_ahead:
                cand.trainer.prepare(batch)

    def prefetch(self, next_batch) -> None:
        """Candidates do not read ahead."""

    def pace(self, turn) -> None:
        """The reader's thread is not paced by a search (``Trainer.pace``): each candidate runs
        its own compiled loop, none of them the step's one long GIL-free stretch."""

    def close(self) -> None:
        """End the threads the candidates step on (the job's teardown); a step after it takes
        them in turn."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def describe(self) -> dict:
        """The search for ``/v1/model`` and the summary: champion, live candidates, counts."""
        s = self.search
        return {
            "champion": {**self.champion.describe(), "mean_loss": _num(s.mean_loss(s.champion))},
            "served": {**self.served.describe(), "mean_loss": _num(s.mean_loss(s.served))},
            "candidates": [{**c.describe(), "examples": s.slots[i]["examples"], "mean_loss": _num(s.mean_loss(i))}
                           for i, c in sorted(self.candidates.items())],
            "promotions": s.promotions, "retired": dict(s.retired), "born": s.next_epoch,
            "ranked_pairs": s.ranked,       # what a cross neighbour adds first (pairrank.py)
        }


def _born(events) -> set:
    return {e["epoch"] for e in events if e["event"] == "born"}


def _num(x: float):
    return round(float(x), 6) if np.isfinite(x) else None


def _back_to(assign: dict, start: dict):
    """(setting, the assignment with it at its start value), and for a set of terms or crosses,
    with each one the start has not taken out in turn."""
    for d, v in assign.items():
        if d in start and v != start[d]:
            yield d, {**assign, d: start[d]}
            if isinstance(v, list) and isinstance(start[d], list):
                yield from ((d, {**assign, d: [x for x in v if x != item]}) for item in v if item not in start[d])
