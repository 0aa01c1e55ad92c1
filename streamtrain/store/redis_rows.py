"""How one row (or one dense parameter) is laid out in a Redis value: pure numpy, no I/O.

A value is ``tag (8 bytes) | weights float32[dim] | each optimizer slot, sorted by name``,
a "full" slot as ``float32[dim]`` and a "row" slot as one float32. The tag is a random 64-bit
number written afresh with every update: it is the row's version for compare-and-set.
Weights and state sit in one key so one read gives all a rule needs and one write is atomic.
"""
from __future__ import annotations

import numpy as np

from streamtrain.errors import StoreError

from . import redis_keys
from .base import initial_dense, initial_rows

TAG = 8


class RowLayout:
    """The value layout of one parameter: a table's row, or a whole dense parameter as one row."""

    def __init__(self, spec, optimizer, dtype=np.float32):
        self.spec, self.optimizer = spec, optimizer
        self.dtype = np.dtype(dtype)
        self.dim = spec.dim if spec.table else int(np.prod(spec.shape))
        self.slots = [(k, self.dim if how == "full" else 1) for k, how in sorted(optimizer.slots.items())]
        self.floats = self.dim + sum(w for _, w in self.slots)
        self.nbytes = TAG + 4 * self.floats

    # ---- fresh rows --------------------------------------------------------------------
    def initial(self, ids: np.ndarray | None) -> tuple[np.ndarray, dict]:
        """Initial weights ``[n, dim]`` and state ``{slot: [n, width]}`` (``ids=None``: dense)."""
        if ids is None:
            w = initial_dense(self.spec, self.optimizer, self.dtype).reshape(1, -1)
            state = self.optimizer.init_state(self.spec.shape, table=False, dtype=self.dtype)
        else:
            w = initial_rows(self.spec, self.optimizer, ids, self.dtype)
            state = self.optimizer.init_state((len(ids), self.dim), table=True, dtype=self.dtype)
        n = len(w)
        return w, {k: state[k].reshape(n, width) for k, width in self.slots}

    # ---- bytes <-> arrays --------------------------------------------------------------
    def encode(self, tags: np.ndarray, w: np.ndarray, state: dict) -> np.ndarray:
        """The values of ``n`` rows as ``uint8[n, nbytes]``. ``tags`` is ``uint64[n]``."""
        n = len(w)
        mat = np.empty((n, self.floats), "<f4")
        mat[:, :self.dim] = w.reshape(n, self.dim)
        col = self.dim
        for k, width in self.slots:
            mat[:, col:col + width] = state[k].reshape(n, width)
            col += width
        out = np.empty((n, self.nbytes), np.uint8)
        out[:, :TAG] = np.asarray(tags, "<u8").view(np.uint8).reshape(n, TAG)
        out[:, TAG:] = mat.view(np.uint8)
        return out

    def decode(self, values: list, where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
        """``values`` (bytes or None per row) → present mask, tags, weights, state (zeros where absent)."""
        n = len(values)
        found = [v for v in values if v is not None]
        present = np.ones(n, bool) if len(found) == n else \
            np.fromiter((v is not None for v in values), bool, n)
        mat = np.zeros((n, self.nbytes), np.uint8)
        if found:
            joined = b"".join(found)
            if len(joined) != len(found) * self.nbytes or any(len(v) != self.nbytes for v in found[:1]):
                bad = next((len(v) for v in found if len(v) != self.nbytes), len(found[0]))
                raise StoreError(f"{where}: a stored value has {bad} bytes, the layout of "
                                 f"'{self.spec.name}' ({self.optimizer.kind}, dim {self.dim}) needs "
                                 f"{self.nbytes}; was the namespace written with another model?")
            flat = np.frombuffer(joined, np.uint8).reshape(-1, self.nbytes)
            if len(found) == n:
                mat = flat
            else:
                mat[present] = flat
        return (present, *self.unpack(mat))

    def finite(self, values: np.ndarray) -> np.ndarray:
        """Per row of ``encode``'s output: every weight and slot finite (no NaN, no inf)."""
        if values.flags.c_contiguous:           # the tag is two floats' width: a view, no copy
            floats = values.view("<f4")[:, TAG // 4:]
        else:
            floats = np.ascontiguousarray(values[:, TAG:]).view("<f4")
        return np.isfinite(floats).all(axis=1)

    def unpack(self, mat: np.ndarray) -> tuple[np.ndarray, np.ndarray, dict]:
        """``uint8[n, nbytes]`` (``encode``'s output) → tags, weights, state."""
        n = len(mat)
        tags = mat[:, :TAG].copy().view("<u8").reshape(n)
        floats = mat[:, TAG:].copy().view("<f4").reshape(n, self.floats)
        w = floats[:, :self.dim].astype(self.dtype)
        state, col = {}, self.dim
        for k, width in self.slots:
            state[k] = floats[:, col:col + width].astype(self.dtype)
            col += width
        return tags, w, state

    # ---- the rule, with the memory store's shapes ---------------------------------------
    def step(self, w: np.ndarray, g: np.ndarray, state: dict, sq: np.ndarray | None = None) -> None:
        """Run the optimizer in place on ``n`` rows, shaped exactly as the memory store shapes them."""
        if self.spec.table:
            st = {k: state[k] for k, _ in self.slots}
            self.optimizer.step(w, g.astype(self.dtype, copy=False), st,
                                None if sq is None else sq.astype(self.dtype, copy=False))
            return
        shape = tuple(self.spec.shape)
        wv = w.reshape(shape)
        st = {k: state[k].reshape(shape if self.optimizer.slots[k] == "full" else (1,))
              for k, _ in self.slots}
        self.optimizer.step(wv, g.reshape(shape).astype(self.dtype, copy=False), st,
                            None if sq is None else sq.reshape(shape).astype(self.dtype, copy=False))


class Rows:
    """One parameter's rows in flight: keys, and the current value read for each."""

    def __init__(self, store, name, ids):   # store: a RedisStore (its layouts, cfg, ns, io)
        self.name, self.ids = name, ids
        self.layout: RowLayout = store.layouts[name]
        self.policy = store.cfg.policy(name) if ids is not None else None
        self.integrity = store.integrity   # counts rows read with a NaN or an infinity
        self.present = None             # not read yet
        if ids is None:
            self.keys = np.array([redis_keys.dense_key(store.ns, name)])
            self.groups = np.array([store.io.DENSE], np.int64)
        else:
            self.keys = redis_keys.row_keys(store.ns, name, ids, store.io.buckets)
            self.groups = redis_keys.bucket_of(name, ids, store.io.buckets)

    def set_values(self, values, where: str, rows=None) -> None:
        present, tags, w, state = self.layout.decode(list(values), where)
        bad = ~np.isfinite(w).all(axis=1)
        for a in state.values():
            bad |= ~np.isfinite(a).all(axis=1)
        if bad.any():       # written by an older version: read as the initial row; its tag is kept,
            at = np.flatnonzero(bad)                      # so the next write replaces it
            ids = None if self.ids is None else (self.ids if rows is None else self.ids[rows])[at]
            w[at], fresh = self.layout.initial(ids)
            for k in state:
                state[k][at] = fresh[k]
            self.integrity.corrupt(self.name, len(at))
        if rows is None:
            self.present, self.tags, self.w, self.state = present, tags, w, state
            return
        self._assign(rows, present, tags, w, state)

    def set_encoded(self, rows: np.ndarray, mat: np.ndarray) -> None:
        """Rows ``rows`` now hold these encoded values (as written by this store)."""
        self._assign(rows, True, *self.layout.unpack(mat))

    def _assign(self, rows, present, tags, w, state) -> None:
        self.present[rows], self.tags[rows], self.w[rows] = present, tags, w
        for k in self.state:
            self.state[k][rows] = state[k]

    def fill_initial(self, rows: np.ndarray) -> None:
        """Absent rows take their initial weights and state."""
        if len(rows):
            w, state = self.layout.initial(None if self.ids is None else self.ids[rows])
            self.w[rows] = w
            for k in self.state:
                self.state[k][rows] = state[k]

    @property
    def ttl(self) -> int:
        return self.policy.ttl_ms if self.policy else 0

    def out(self) -> np.ndarray:
        return self.w.reshape(self.layout.spec.shape).copy() if self.ids is None else self.w.copy()
