"""The parameter-store interface both backends implement.

A step pulls the dense parameters and only the table rows its batch touches, and pushes
gradients; the update rule runs where the parameters live. Rows that do not exist yet are
created by the deterministic (table, id) initializer, so every backend and every trainer
agrees on them without talking.
"""
from __future__ import annotations

import abc
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from streamtrain.context import Gradients
from streamtrain.errors import StoreError
from streamtrain.optim import Optimizer, make_optimizer
from streamtrain.params import ParamSpec, init_dense, init_rows
from streamtrain.registry import Registry
from streamtrain.schema import Option, check_options

from .durable import Durable

STORES = Registry("store backend", group="streamtrain.stores")
register = STORES.register


@dataclass
class StoreStats:
    """Counters a store keeps for the metrics module."""

    rows_pulled: int = 0
    rows_pushed: int = 0
    rows_created: int = 0
    errors: int = 0
    flushes: int = 0             # write-back (redis): flushes, rows they wrote, rows merged, seconds
    rows_flushed: int = 0
    flush_conflicts: int = 0
    flush_seconds: float = 0.0
    nonfinite_rows: int = 0      # redis: rows not written because a value was NaN or infinite
    rows_vanished: int = 0       # redis: rows this trainer held that Redis had lost (written again)
    table_rows: dict = field(default_factory=dict)   # table -> live rows
    lifecycle: dict = field(default_factory=dict)    # table -> {created, admitted, expired, live, ...} (redis)


@dataclass
class Snapshot:
    """A whole store in memory, the unit of checkpoints: every parameter with its state.

    ``dense[name] = {"value": array, <slot>: array}``;
    ``tables[name] = {"ids": uint64[n], "value": [n, dim], <slot>: [n, ...]}``.
    """

    specs: dict
    optimizers: dict
    dense: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)


def resolve_optimizers(specs: dict, default: dict) -> dict[str, Optimizer]:
    """The optimizer of every parameter: its layer's override, else the default."""
    return {name: make_optimizer(spec.optimizer or default,
                                 where=f"layers.{name.rsplit('.', 1)[0]}.optimizer" if spec.optimizer
                                 else "default_optimizer")
            for name, spec in specs.items()}


def initial_dense(spec: ParamSpec, optimizer: Optimizer, dtype=np.float32) -> np.ndarray:
    if optimizer.zero_init:
        return np.zeros(spec.shape, dtype)
    return init_dense(spec, dtype)


def initial_rows(spec: ParamSpec, optimizer: Optimizer, ids: np.ndarray, dtype=np.float32) -> np.ndarray:
    if optimizer.zero_init:
        return np.zeros((len(ids), spec.dim), dtype)
    return init_rows(spec, ids, dtype)


class ParamStore(abc.ABC):
    """Where the parameters live. ``declare`` once, then ``pull``/``push`` every step.

    A backend is a subclass with ``kind``, ``options`` (its keys in the ``store`` section),
    ``from_config`` and ``test_params()``, registered with ``@register``. Optional
    capabilities have defaults here: ``pull_states`` (raises: no optimizer state to show),
    ``barrier`` (``None``: updates apply on push, no sync rounds), ``assigns`` (False: only
    gradients are pushed), ``lends`` (False), ``writes_back`` (False: a push reaches the server before it returns;
    True: ``flush()`` writes what pushes left in a local copy, see below), ``lifecycle()`` (``{}``:
    no row expiry or admission to count) and ``stats`` (the counters, kept by every store).

    Durability (store/durable.py): after each batch's push the job calls ``applied(offsets)``
    and commits what ``durable_offsets()`` hands back; this base class keeps that bookkeeping
    for every backend from ``writes_back``, ``flush*`` and ``flushes_in_background``."""

    kind: str = ""
    options: dict[str, Option] = {}
    specs: dict
    optimizers: dict
    #: sync mode: ``barrier(store)`` after each push (the trainer calls it); None = async
    barrier = None
    #: the server a backend talks to ("redis"): tests add the address of theirs to test_params
    server: str | None = None

    @classmethod
    def check_config(cls, cfg: dict) -> list[tuple[str, str]]:
        """Every problem of the ``store`` section (without ``backend``) as (key path, message)."""
        return check_options(cls.options, cfg, what=f"the {cls.kind} store")

    @classmethod
    def from_config(cls, cfg: dict) -> "ParamStore":
        """The store a checked ``store`` section describes."""
        return cls()

    @classmethod
    def test_params(cls) -> dict:
        """A ``store`` section (without ``backend``) for the conformance suite (which adds the
        address of its server for a backend with ``server`` set)."""
        return {}

    def __init__(self):
        self.stats = StoreStats()
        self.specs = {}
        self.optimizers = {}

    def declare(self, specs: dict[str, ParamSpec], default_optimizer: dict) -> None:
        """Register parameters and their optimizers; create what does not exist yet."""
        self.specs = dict(specs)
        self.optimizers = resolve_optimizers(self.specs, default_optimizer)
        self._declare()

    @abc.abstractmethod
    def _declare(self) -> None: ...

    def add(self, specs: dict[str, ParamSpec], default_optimizer: dict) -> None:
        """Declare more parameters beside those already declared (an AutoML candidate's, whose
        names carry its own prefix: its namespace in this store)."""
        self.specs.update(specs)
        self.optimizers.update(resolve_optimizers(specs, default_optimizer))
        self._declare()

    def drop(self, names) -> None:
        """Forget these parameters: their values, rows and optimizer state go (a retired AutoML
        candidate's namespace). Names not declared are ignored."""
        names = [n for n in names if n in self.specs]
        for name in names:
            del self.specs[name]
            self.optimizers.pop(name, None)
            self.stats.table_rows.pop(name, None)
        if names:
            self._drop(names)

    def _drop(self, names: list[str]) -> None:
        raise NotImplementedError(f"{self.describe()} store cannot drop parameters")

    def copy(self, pairs: dict[str, str], carry: bool = False) -> None:
        """Copy parameters ``source → destination`` (both declared, of one shape): values,
        rows and the optimizer slots both optimizers have (an AutoML challenger starts from its
        champion's knowledge). The destinations' previous rows go."""
        pairs = {a: b for a, b in pairs.items() if a in self.specs and b in self.specs}
        if not pairs:
            return
        snap = self.snapshot_of(list(pairs))
        out = Snapshot(specs={b: self.specs[b] for b in pairs.values()},
                       optimizers={b: self.optimizers[b].get_config() for b in pairs.values()})
        for a, b in pairs.items():
            got = snap.dense.get(a, snap.tables.get(a))
            if got is None:
                continue
            got = {k: np.array(v, copy=True) for k, v in got.items()}
            if carry:                       # the weights as they are (``Optimizer.carry``)
                self.optimizers[b].carry(self.optimizers[a], got["value"], got)
            (out.dense if a in snap.dense else out.tables)[b] = got
        self._put(out)

    def snapshot_of(self, names: list[str]) -> Snapshot:
        """A snapshot of these parameters only (the default takes a whole one)."""
        snap = self.snapshot()
        keep = set(names)
        return Snapshot(specs={n: s for n, s in snap.specs.items() if n in keep},
                        optimizers={n: o for n, o in snap.optimizers.items() if n in keep},
                        dense={n: a for n, a in snap.dense.items() if n in keep},
                        tables={n: a for n, a in snap.tables.items() if n in keep})

    def _put(self, snapshot: Snapshot) -> None:
        """Write a snapshot of some parameters over theirs, the others untouched."""
        self.restore(snapshot)

    @abc.abstractmethod
    def pull(self, dense: list[str], tables: dict[str, np.ndarray], *, create: bool = True) -> dict:
        """Values of the dense parameters and of the rows of ``tables[name]`` (unique ids, any order).
        With ``create=False`` missing rows read as their initial value but are not stored."""

    @abc.abstractmethod
    def push(self, grads: Gradients) -> None:
        """Apply each parameter's update rule to its gradient (atomic per row); a store that
        ``assigns`` also writes ``grads.assigned``, in the same step."""

    #: True: ``push`` also writes ``grads.assigned`` (rows' final values and optimizer slots) as
    #: they are. The per-example engine then hands over what it learnt instead of a combined
    #: gradient to step by again; a store that retries updates on conflicts needs the gradient.
    assigns = False
    #: True: ``lend(dense, tables, names)`` (memory.py): ``pull`` but for ``names`` the store's
    #: own arrays and the rows of the ids, from which an engine that ``assigns`` gathers itself
    lends = False

    prefetches = False     # True: ``prefetch`` reads ahead, worth calling with the next batch
    #: True: models with parameters of their own may pull and push from several threads at once
    #: (the memory store's lock): an AutoML job steps its candidates side by side
    concurrent = False

    #: True: pushes update a local copy that ``flush()`` writes to the store's server (the redis
    #: store's write-back). The job then sets ``auto_flush`` False and flushes before checkpoints
    #: and at the end; the store holds the offsets of what it has not written (``applied``).
    writes_back = False
    auto_flush = True      # a store that writes back flushes by itself when due (push, pull)

    # ---- durability: which pushed batches' offsets may be committed ---------------------------
    @property
    def durability(self) -> Durable:
        """The offsets of pushed batches until they are durable (store/durable.py)."""
        d = self.__dict__.get("_durable")
        if d is None:
            d = self.__dict__["_durable"] = Durable()
        return d

    def applied(self, offsets: dict) -> bool:
        """The update of the batch read up to ``offsets`` was pushed (or it had nothing to push).
        Its offsets become durable (``durable_offsets``) once every push until now is: at once
        for a store whose push reaches its server before it returns, after the flush that writes
        them for a store that ``writes_back``. True: a flush is due that this store does not make
        in the background; the caller makes it now (``flush``, retried while the store is down)."""
        self.durability.hold(offsets, written=not self.writes_back)
        return self.writes_back and not self.flushes_in_background and self.flush_due()

    def durable_offsets(self) -> Iterator[dict]:
        """The offsets made durable since the last call, oldest first: what every push before
        them has written to the store's server. A background flush is polled first (raising what
        stopped it: its batches then wait for the next flush); once the last one is handed out
        (iterate to the end) the next background flush begins when due, so a commit never waits
        on the flush of later batches (the job takes them all, then commits them while it runs)."""
        d = self.durability
        if d.flying:
            try:
                done = self.flush_poll()
            except StoreError:
                d.failed()
                raise
            if done is not None:
                d.landed()
        yield from d.take()
        if self.flushes_in_background and d.held and not d.flying and self.flush_due() \
                and self.flush_begin():
            d.begun()

    @property
    def undurable(self) -> bool:
        """Offsets applied whose rows are not all written yet (a flush makes them durable)."""
        return bool(self.durability)

    def flush_due(self) -> bool:
        """A store that writes back: its flush interval has passed."""
        return False

    def flush(self) -> int:
        """A store that writes back: write the local copy's changes now (rows written); every
        batch applied before is durable then (``durability.flushed()``)."""
        self.durability.flushed()
        return 0

    #: True: ``flush_begin`` starts a flush that runs while training goes on and ``flush_poll``
    #: reports when it is done (the redis store's write-back); ``durable_offsets`` drives them,
    #: and the batches applied before a ``flush_begin`` are durable once ``flush_poll`` says so.
    #: ``flush`` finishes one in flight first.
    flushes_in_background = False

    def flush_begin(self) -> bool:
        """Start writing the local copy's changes in the background (False: one is in flight)."""
        return False

    def flush_poll(self, wait: bool = False) -> int | None:
        """The background flush's rows written once it is done (or ``wait``), else None; raises
        what stopped it (its rows are written by a later flush)."""
        return None

    def prefetch(self, dense: list[str], tables: dict[str, np.ndarray]) -> None:
        """Start reading what the next ``pull`` will ask for (a store with slow reads overlaps
        them with the current batch's compute). The default does nothing."""

    def pull_states(self, names) -> dict[str, dict]:
        """The optimizer slots of what the last ``pull`` returned for each of ``names``, shaped
        as the values (a table: one row per pulled id, a "row" slot ``[n, 1]``; a dense
        parameter: its shape, a "row" slot ``(1,)``). Read-only copies; no round trip."""
        raise NotImplementedError(f"{self.describe()} store cannot report optimizer state")

    def lifecycle(self) -> dict:
        """Per table ``{created, admitted, expired, live, ...}`` for the metrics; may scan the
        store, so it is called at most every ``metrics.lifecycle_seconds``. ``{}``: none."""
        return {}

    def apply(self) -> None:
        """Sync mode: apply what was staged. Async stores apply on push; nothing to do."""

    @abc.abstractmethod
    def snapshot(self) -> Snapshot: ...

    @abc.abstractmethod
    def restore(self, snapshot: Snapshot) -> None: ...

    def ready(self) -> bool:
        return True

    def watch(self, stopped, waiting) -> None:
        """Called by the job: a store that retries unreachable servers ends its retries once
        ``stopped()`` is true (raising ``StoreInterrupted``) and calls ``waiting(what)`` while
        it retries (``waiting(None)`` when it no longer does). The default does nothing."""

    def close(self) -> None:
        pass

    def describe(self) -> str:
        return type(self).__name__
