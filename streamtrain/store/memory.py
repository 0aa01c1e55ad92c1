"""The in-process store: numpy arrays, tables that grow as ids arrive. One trainer; the fastest path."""
from __future__ import annotations

import threading

import numpy as np

from streamtrain import lazy
from streamtrain.context import Gradients
from streamtrain.growth import capacity_for, grow_rows
from streamtrain.optim import Optimizer
from streamtrain.optim.base import step_dense
from streamtrain.params import ParamSpec

from .base import ParamStore, Snapshot, initial_dense, initial_rows, register
from .idindex import IdIndex

_scatter = lazy.module("streamtrain.store.scatter")
AHEAD_BATCHES = 16      # batches whose rows ``index_ahead`` keeps for their step at most
PULLED_KEPT = 16        # id arrays remembered with a table pulled with them (``_share_ids``)


def take_rows(arr: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``arr[rows]`` for a 2-D array; ``take`` is several times faster than fancy indexing (the
    method: ``np.take`` is a Python wrapper around it, a few µs a call in the step)."""
    return arr.take(rows, axis=0)


def put_rows(arr: np.ndarray, rows: np.ndarray, values: np.ndarray) -> None:
    """``arr[rows] = values``, rows as opaque records: one 1-D scatter instead of a 2-D one."""
    if arr.ndim == 2 and arr.flags.c_contiguous and arr.shape[1] > 1:
        row = np.dtype((np.void, arr.dtype.itemsize * arr.shape[1]))
        arr.view(row).reshape(-1)[rows] = np.ascontiguousarray(values, arr.dtype).view(row).reshape(-1)
    else:
        arr[rows] = values


def step_table_rows(optimizer: Optimizer, weights: np.ndarray, state: dict, rows: np.ndarray,
                    g: np.ndarray, sq: np.ndarray | None) -> None:
    """Step ``rows`` of a table's weights and slots in place: the optimizer's compiled row
    update where it has one, else its numpy rule on the gathered rows, scattered back."""
    if optimizer.step_rows(weights, state, rows, g, sq):
        return
    w = take_rows(weights, rows)
    taken = {k: take_rows(arr, rows) for k, arr in state.items()}
    optimizer.step(w, g, taken, sq)
    put_rows(weights, rows, w)
    for k, arr in taken.items():
        put_rows(state[k], rows, arr)


def _squares(grads: Gradients, name: str, dtype) -> np.ndarray | None:
    sq = grads.squares.get(name)
    return None if sq is None else sq.astype(dtype, copy=False)


class _Ids:
    """A table's id index and its last lookup. Tables that are always pulled with the very same
    id array (a model's LR part and its FM or deep part over the same fields) share one
    (``MemoryStore._share_ids``): one lookup per batch serves them all."""

    def __init__(self):
        self.index = IdIndex()
        self.last = (None, None)    # (ids array, rows) of the last lookup: a push follows its pull
        self.ahead: dict = {}       # id(ids array) -> (ids, rows): found ahead (``MemoryStore.index_ahead``)


class Table:
    """Rows of one table parameter with their optimizer state, indexed by id."""

    def __init__(self, spec: ParamSpec, optimizer: Optimizer, dtype=np.float32, capacity=1024):
        self.spec, self.optimizer, self.dtype = spec, optimizer, dtype
        self.ids = _Ids()
        self.filled = 0             # rows initialised here (a shared index may know more ids)
        self.weights = np.zeros((capacity, spec.dim), dtype)
        self.state = optimizer.init_state((capacity, spec.dim), table=True, dtype=dtype)

    @property
    def index(self) -> IdIndex:
        return self.ids.index

    def __len__(self) -> int:
        return len(self.index)

    def _grow(self, needed: int) -> None:
        if needed <= len(self.weights):
            return
        capacity = capacity_for(len(self.weights), needed)
        self.weights = grow_rows(self.weights, capacity)
        self.state = {k: grow_rows(arr, capacity) for k, arr in self.state.items()}   # slots start at 0

    def fill(self) -> int:
        """Initialise the rows of the ids the index has gained since (here, or through a table
        sharing it); how many."""
        n, before = len(self.index), self.filled
        if n > before:
            self._grow(n)
            self.weights[before:n] = initial_rows(self.spec, self.optimizer, self.index.ids[before:n], self.dtype)
            self.filled = n
        return n - before

    def rows(self, ids: np.ndarray, create: bool) -> tuple[np.ndarray, int]:
        """Row numbers of ``ids`` (creating missing ones if asked; -1 otherwise), and how many were created."""
        shared = self.ids
        if not create:
            self.fill()
            rows = self.index.lookup(ids)
            return rows, int((rows < 0).sum())
        last_ids, rows = shared.last
        if ids is not last_ids:
            got = shared.ahead.pop(id(ids), None)
            # new ids get rows before, before + 1, ... (here, or when the batch was prepared)
            rows = got[1] if got is not None and got[0] is ids else self.index.find_or_add(ids)
            shared.last = (ids, rows)
        return rows, self.fill()

    def put(self, ids, weights, state) -> None:
        rows, _ = self.rows(np.asarray(ids, np.uint64), create=True)
        put_rows(self.weights, rows, weights)
        for k, arr in state.items():
            put_rows(self.state[k], rows, arr)


@register
class MemoryStore(ParamStore):
    """Parameters as numpy arrays in this process; a lock makes pull/push safe across threads."""

    kind = "memory"
    assigns = True     # one writer in this process: the engine's rows are written, not re-stepped
    concurrent = True  # every pull, lend and push under the lock; each model's rows its own

    def __init__(self, dtype=np.float32):
        super().__init__()
        self.dtype = np.dtype(dtype)
        self.dense: dict[str, np.ndarray] = {}
        self.dense_state: dict[str, dict] = {}
        self.tables: dict[str, Table] = {}
        self._id_groups: set = set()     # groups of tables looked at for one shared id index
        self._pulled: dict = {}          # id(ids) -> (ids, a table pulled with them): the last few
        self._lock = threading.Lock()

    def _declare(self) -> None:
        for name, spec in self.specs.items():
            opt = self.optimizers[name]
            if spec.table:
                self.tables.setdefault(name, Table(spec, opt, self.dtype))
            elif name not in self.dense:
                self.dense[name] = initial_dense(spec, opt, self.dtype)
                self.dense_state[name] = opt.init_state(spec.shape, table=False, dtype=self.dtype)

    def copy(self, pairs, carry: bool = False) -> None:
        """``ParamStore.copy`` without the snapshot: arrays and the id index copied as they are."""
        import copy as copying
        with self._lock:
            for src, dst in pairs.items():
                if src not in self.specs or dst not in self.specs:
                    continue
                adopt = self.optimizers[dst].carry if carry else (lambda *a: None)
                if src in self.dense:
                    self.dense[dst][...] = self.dense[src]
                    for k, arr in self.dense_state[dst].items():
                        if k in self.dense_state[src]:
                            arr[...] = self.dense_state[src][k]
                    adopt(self.optimizers[src], self.dense[dst], self.dense_state[dst])
                    continue
                a, b = self.tables[src], self.tables[dst]
                a.fill()
                b.ids = _Ids()
                b.ids.index = copying.deepcopy(a.index)
                b.filled = a.filled
                b.weights = a.weights.copy()
                b.state = {k: (a.state[k].copy() if k in a.state else np.zeros_like(arr, shape=(len(b.weights),) +
                                                                                     arr.shape[1:]))
                           for k, arr in b.state.items()}
                adopt(self.optimizers[src], b.weights, b.state)
                self.stats.table_rows[dst] = len(b)

    def _drop(self, names) -> None:
        with self._lock:
            for name in names:
                self.dense.pop(name, None)
                self.dense_state.pop(name, None)
                self.tables.pop(name, None)
            gone = set(names)
            self._id_groups = {g for g in self._id_groups if not gone & set(g)}

    def _share_ids(self, tables: dict) -> list:
        """Tables pulled together with the very same id array whose indexes hold the same ids in
        the same order (so the same rows: always so when both start empty) share one from then
        on; each group is looked at once. Returns the pairs to look at once this pull's rows are
        found (``_share_after``): a table pulled with the array another table was pulled with
        before (the candidates of an AutoML job over the same fields: ``Prepared.shared``)."""
        groups: dict = {}
        for name, ids in tables.items():
            groups.setdefault(id(ids), []).append(name)
        after = []
        for key_id, names in groups.items():
            ids = tables[names[0]]
            last = self._pulled.get(key_id)
            if last is not None and last[0] is ids and last[1] in self.tables and last[1] not in names:
                after.append((last[1], names[0]))
            else:
                self._pulled[key_id] = (ids, names[0])
                while len(self._pulled) > PULLED_KEPT:
                    del self._pulled[next(iter(self._pulled))]
            key = tuple(names)
            if len(names) < 2 or key in self._id_groups:
                continue
            self._id_groups.add(key)
            first, *rest = (self.tables[n] for n in names)
            for table in rest:
                self._join(first, table)
        return after

    def _share_after(self, pairs: list) -> None:
        """``_share_ids``'s later pairs, once each: ``b`` has just found the rows of the array
        ``a`` found before, adding the ids it lacked in the order ``a`` did, so if the two indexes
        are now the same they stay so."""
        for a, b in pairs:
            if (a, b) not in self._id_groups:
                self._id_groups.add((a, b))
                self._join(self.tables[a], self.tables[b])

    def _join(self, first: Table, table: Table) -> None:
        """``table`` (and every table sharing its index) takes ``first``'s index if the two hold
        the same ids in the same order."""
        old = table.ids
        if old is first.ids or len(table) != len(first) or not np.array_equal(table.index.ids, first.index.ids):
            return
        for t in self.tables.values():
            if t.ids is old:
                t.fill()
                t.ids = first.ids

    def pull(self, dense, tables, *, create=True):
        with self._lock:
            after = self._share_ids(tables) if create else []
            out = self._pull(dense, tables, create)
            self._share_after(after)
            return out

    def _pull(self, dense, tables, create: bool) -> dict:
        out = {}
        for name in dense:
            out[name] = self.dense[name].copy()
        for name, ids in tables.items():
            table, rows, n_new = self._rows(name, ids, create)
            values = take_rows(table.weights, rows if create else np.maximum(rows, 0))
            if not create and n_new:
                missing = rows < 0
                values[missing] = initial_rows(table.spec, table.optimizer, ids[missing], self.dtype)
            out[name] = values
        return out

    def _rows(self, name: str, ids, create: bool):
        """Table ``name``, the rows of ``ids`` in it (created, or -1 where missing) and how many
        were new; counted in ``stats``."""
        table = self.tables[name]
        rows, n_new = table.rows(ids, create)
        self.stats.rows_pulled += len(ids)
        self.stats.rows_created += n_new if create else 0
        return table, rows, n_new

    def index_ahead(self, tables: dict) -> None:
        """The rows of a batch's ids (``{table: unique ids}``), new ids added, found before its
        step: ``Trainer.prepare`` calls it in the reader's parse thread, while the training
        thread's compiled loop runs, so the step's pull finds them ready. A row is made for an
        id a few batches early; its values are made (``Table.fill``) when it is first pulled,
        from the id alone, so every number is the same. At most ``AHEAD_BATCHES`` wait."""
        with self._lock:
            tables = {name: ids for name, ids in tables.items() if name in self.tables}   # (none dropped since)
            after = self._share_ids(tables)
            for name, ids in tables.items():
                table = self.tables[name]
                if id(ids) in table.ids.ahead:
                    continue
                ahead = table.ids.ahead
                ahead[id(ids)] = (ids, table.index.find_or_add(ids))
                while len(ahead) > AHEAD_BATCHES:      # never stepped (a stopped job): drop the oldest
                    del ahead[next(iter(ahead))]
            self._share_after(after)

    lends = True       # ``lend``: the per-example engine reads its rows from the store's own arrays

    def lend(self, dense, tables, names) -> tuple[dict, dict]:
        """``pull`` (creating rows) of the parameters not in ``names``, and for those in ``names``
        the store's own arrays instead of copies: ``name -> (rows of its ids, or None for a dense
        parameter; its value array; its slots)``. The per-example engine gathers its working rows
        straight from them (no pulled copy, no ``pull_states``) and hands its final rows back
        through ``Gradients.assigned``, as always: the lent arrays are read, never written."""
        own = set(names)
        with self._lock:
            after = self._share_ids(tables)
            values = self._pull([n for n in dense if n not in own],
                                {n: ids for n, ids in tables.items() if n not in own}, True)
            lent = {n: (None, self.dense[n], self.dense_state[n]) for n in dense if n in own}
            for name, ids in tables.items():
                if name in own:
                    table, rows, _ = self._rows(name, ids, True)
                    lent[name] = (rows, table.weights, table.state)
            self._share_after(after)
        return values, lent

    def pull_states(self, names):
        out = {}
        with self._lock:
            for name in names:
                if name in self.dense_state:
                    out[name] = {k: a.copy() for k, a in self.dense_state[name].items()}
                    continue
                table = self.tables[name]
                _, rows = table.ids.last
                if rows is None:
                    raise KeyError(f"parameter '{name}': no rows pulled to report the state of")
                out[name] = {k: take_rows(a, rows) for k, a in table.state.items()}
        return out

    def push(self, grads: Gradients) -> None:
        with self._lock:
            step_dense([(self.optimizers[name], self.dense[name], g.astype(self.dtype, copy=False),
                         self.dense_state[name], _squares(grads, name, self.dtype))
                        for name, g in grads.dense.items()])
            for name, (ids, g) in grads.tables.items():
                table = self.tables[name]
                rows, _ = table.rows(ids, create=True)
                g, sq = np.ascontiguousarray(g, self.dtype), _squares(grads, name, self.dtype)
                step_table_rows(table.optimizer, table.weights, table.state, rows, g, sq)
                self.stats.rows_pushed += len(ids)
            self._assign(grads.assigned)
            self.stats.table_rows = {name: len(t) for name, t in self.tables.items()}

    def _assign(self, assigned: dict) -> None:
        """Write final values and slots (cast to the store's dtype): one scatter per array."""
        if not assigned:
            return
        scatter_rows = _scatter().scatter_rows     # numba: imported by the first push, not at start-up
        for name, (ids, value, slots) in assigned.items():
            if ids is None:
                self.dense[name][...] = value
                for k, arr in slots.items():
                    self.dense_state[name][k][...] = arr
                continue
            table = self.tables[name]
            rows, _ = table.rows(ids, create=True)
            for dst, src in ((table.weights, value), *((table.state[k], arr) for k, arr in slots.items())):
                scatter_rows(dst, rows, src)
            self.stats.rows_pushed += len(ids)

    def snapshot(self) -> Snapshot:
        return self.snapshot_of(list(self.specs))

    def snapshot_of(self, names) -> Snapshot:
        keep = set(names)
        with self._lock:
            snap = Snapshot(specs={k: s for k, s in self.specs.items() if k in keep},
                            optimizers={k: o.get_config() for k, o in self.optimizers.items() if k in keep})
            for name, value in self.dense.items():
                if name not in keep:
                    continue
                snap.dense[name] = {"value": value.copy(),
                                    **{k: a.copy() for k, a in self.dense_state[name].items()}}
            for name, table in self.tables.items():
                if name not in keep:
                    continue
                table.fill()
                ids, rows = table.index.items()
                snap.tables[name] = {"ids": ids, "value": take_rows(table.weights, rows),
                                     **{k: take_rows(a, rows) for k, a in table.state.items()}}
        return snap

    def restore(self, snapshot: Snapshot) -> None:
        with self._lock:
            for name, arrays in snapshot.dense.items():
                if name not in self.dense:
                    continue
                self.dense[name][...] = arrays["value"]
                for k in self.dense_state[name]:
                    if k in arrays:
                        self.dense_state[name][k][...] = arrays[k]
            for name, arrays in snapshot.tables.items():
                table = self.tables.get(name)
                if table is None:
                    continue
                table.put(arrays["ids"], arrays["value"],
                          {k: arrays[k] for k in table.state if k in arrays})
            self.stats.table_rows = {name: len(t) for name, t in self.tables.items()}

    def describe(self) -> str:
        return "memory"
