"""Checkpoints of the redis store: a snapshot of every row of the namespace, and its restore;
and the AutoML candidates' parameters written over (``put``) or dropped (``drop``).

``snapshot`` lists a table's rows by SCAN and reads them in one pass; ``restore`` clears the
tables it replaces and writes every row by the create-if-absent compare-and-set (a row that
appears meanwhile means another writer raced the restore: ``StoreError``).
"""
from __future__ import annotations

import logging

import numpy as np

from streamtrain.errors import StoreError

from . import redis_keys
from .base import Snapshot
from .redis_rows import Rows

log = logging.getLogger("streamtrain.store.redis")


def snapshot(store, names=None) -> Snapshot:
    """Every declared parameter of the store's namespace (tables listed by SCAN), or those named."""
    keep = set(store.specs if names is None else names) & set(store.specs)
    snap = Snapshot(specs={k: s for k, s in store.specs.items() if k in keep},
                    optimizers={k: o.get_config() for k, o in store.optimizers.items() if k in keep})
    for name, spec in snap.specs.items():
        if spec.table:
            keys = store.io.scan(redis_keys.table_pattern(store.ns, name), what=f"list rows of '{name}'")
            ids = np.array([redis_keys.key_id(k) for k in keys], np.uint64)
            it = Rows(store, name, np.sort(ids))
            if not len(ids):                 # no row of this table exists yet
                w, state = it.layout.initial(it.ids)
                snap.tables[name] = {"ids": it.ids, "value": w, **state}
                continue
        else:
            it = Rows(store, name, None)
        store.read_rows([it], "snapshot")
        keep = np.flatnonzero(it.present) if spec.table else np.arange(1)
        if not spec.table and not it.present[0]:
            it.fill_initial(keep)
        arrays = {"value": it.w[keep] if spec.table else it.out()}
        for k, a in it.state.items():
            kind = store.optimizers[name].slots[k]
            arrays[k] = a[keep] if spec.table else a.reshape(spec.shape if kind == "full" else (1,)).copy()
        if spec.table:
            arrays = {"ids": it.ids[keep], **arrays}
            snap.tables[name] = arrays
        else:
            snap.dense[name] = arrays
    return snap


def restore(store, snapshot: Snapshot) -> None:
    """Write the snapshot's parameters (declared ones only) over the namespace's."""
    for name, spec in store.specs.items():
        if spec.table and name in snapshot.tables:
            store.io.delete(store.io.scan(redis_keys.table_pattern(store.ns, name)), what="clear table")
    store.io.feed_reset()
    parts = []
    for name, arrays in [*snapshot.dense.items(), *snapshot.tables.items()]:
        if name not in store.specs:
            continue
        spec = store.specs[name]
        it = Rows(store, name, np.asarray(arrays["ids"], np.uint64) if spec.table else None)
        n = len(it.keys)
        w, state = it.layout.initial(it.ids)
        w[...] = np.asarray(arrays["value"]).reshape(n, -1)
        for k, width in it.layout.slots:
            if k in arrays:
                state[k][...] = np.asarray(arrays[k]).reshape(n, width)
        values = it.layout.encode(store.new_tags(n), w, state)
        if not spec.table:
            store.io.delete(list(it.keys), what="clear dense parameter")
        parts.append((it, np.arange(n), np.zeros(n, np.uint64), values))
        if spec.table:
            store.counters.set(name, created=n, live=n)
    if parts:
        failed, refused = store.cas_rows(parts, "restore")
        if any(f.any() for f in failed):
            raise StoreError("redis store: restore raced with another writer (rows appeared meanwhile)")
        bad = sum(int(r.sum()) for r in refused)
        if bad:            # counted by the store; they read as their initial rows
            log.error("redis store: the checkpoint holds %d rows with NaN or infinite values: not restored "
                      "(they start again from the initializer)", bad)
    store.stats.table_rows.update({n: len(a["ids"]) for n, a in snapshot.tables.items() if n in store.specs})


def put(store, snapshot: Snapshot) -> None:
    """Write some parameters (new ones: nothing of theirs is cached here) over theirs."""
    store.ahead.cancel()
    for name in [*snapshot.dense, *snapshot.tables]:
        store._cache.pop(name, None)
        if store.wb is not None:
            store.wb.cached.pop(name, None)
    restore(store, snapshot)


def drop(store, names) -> None:
    """Delete the parameters' keys (a retired AutoML candidate's): its dense values and every
    row of its tables, found by SCAN on each server; its local copies are forgotten first."""
    store.ahead.cancel()
    if store.wb is not None:
        if store.wb.flight is not None:          # a flush in flight may be writing these rows
            store.wb.flight.join()
        for name in names:
            store.wb.cached.pop(name, None)
    dropped = set(names)
    for name in names:
        store._cache.pop(name, None)
        store.layouts.pop(name, None)
    keys = [redis_keys.dense_key(store.ns, n) for n in names]
    for name in names:
        for kind in ("r", "s"):             # rows, and admission's sightings
            keys += store.io.scan(redis_keys.table_pattern(store.ns, name, kind), what=f"find the rows of {name}")
    store.io.delete(keys, what="drop parameters")
    store.stats.lifecycle = {n: c for n, c in store.stats.lifecycle.items() if n not in dropped}
