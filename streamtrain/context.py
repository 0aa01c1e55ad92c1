"""What one evaluator or trainer keeps per batch: activations, saved tensors, gradients.

Layers hold config and topology only; everything that changes per batch lives here, so many
evaluators can share one model from many threads (Paddle's Evaluator).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from . import lazy
from .state import Status


@dataclass
class Gradients:
    """What a step pushes: dense grads by name, table grads as (unique ids, rows), and for
    some parameters ``squares[name]`` (the gradient's shape): the sum over the batch's examples
    of each example's squared gradient, which Adagrad and FTRL accumulate instead of ``g²``.
    ``assigned[name] = (unique ids or None for a dense parameter, value, {slot: array})``: final
    values to write as they are, for a store that ``assigns`` (the per-example engine's rows)."""

    dense: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)
    squares: dict = field(default_factory=dict)
    assigned: dict = field(default_factory=dict)

    def arrays(self):
        yield from self.dense.values()
        for _, rows in self.tables.values():
            yield rows
        yield from self.squares.values()
        for _, value, slots in self.assigned.values():
            yield value
            yield from slots.values()

    def all_finite(self, limit: float = np.inf) -> bool:
        """Whether every array holds finite numbers of magnitude below ``limit`` only (the
        trainer's: what the store's precision can hold and accumulate, ``Trainer.limit``): the
        float32 and float64 ones in one compiled call per precision (``_finite_kernels``) once
        numba is loaded (a compiled layer, update or sequential loss loaded it: a numpy-only
        model does not pay its import), any other one with numpy."""
        groups: dict = {}
        compiled = "numba" in sys.modules
        for a in self.arrays():
            flags = a.flags
            if compiled and a.dtype.char in "fd" and flags.writeable and flags.aligned:
                groups.setdefault(a.dtype.char, []).append(a.reshape(-1))
            elif not (np.abs(a) < limit).all():
                return False
        return all(_finite().all_finite(flat, limit) for flat in groups.values())


_finite = lazy.module("streamtrain._finite_kernels")     # numba: imported by the first check


class Context:
    """Per-evaluator state of one graph run."""

    def __init__(self, layer_names, *, training: bool = True, dtype=np.float32, seed: int = 0):
        self.training = training
        self.dtype = np.dtype(dtype)
        self._seed = seed
        self._rng = None              # made at first use (dropout): a generator costs ~50 µs
        self.status = {name: Status.NULL for name in layer_names}
        self.batch = None
        self.values: dict[str, np.ndarray] = {}       # pulled params (tables: rows of table_ids)
        self.table_ids: dict[str, np.ndarray] = {}    # table -> unique ids of this batch (first-seen order)
        self.table_pos: dict[tuple, np.ndarray] = {}  # (layer, table) -> position of each of its ids
        self.outputs: dict[str, object] = {}
        self.saved: dict[str, object] = {}
        self.grad_out: dict[str, np.ndarray] = {}     # accumulated output gradient per layer
        self.param_grads: dict[str, np.ndarray] = {}
        self.param_squares: dict[str, np.ndarray] = {}  # per-example squared gradients, summed
        self.optimizers: dict = {}    # parameter -> Optimizer (set by a trainer)
        self.states: dict = {}        # parameter -> optimizer slots of the pulled rows (when asked)
        self.lent: dict = {}          # parameter -> (rows, the store's own arrays): ``MemoryStore.lend``
        self.engine = None            # the per-example engine (``streamtrain.online``), set by a trainer
        self.needs_grad: dict = {}    # layer -> whether its output needs a gradient (default: yes)
        self.loss = float("nan")
        self.predictions = None
        self.memo: dict = {}          # per-batch results layers share (an embedding layout, ...)
        self._buffers: dict = {}
        self._written: set = set()

    @property
    def rng(self) -> np.random.Generator:
        """This context's random generator (dropout masks), seeded once."""
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        return self._rng

    @rng.setter
    def rng(self, value: np.random.Generator) -> None:
        self._rng = value

    # ---- buffers reused across batches of the same size (sam_backend) --------------------
    def buffer(self, key, shape, dtype=None) -> np.ndarray:
        """An array for ``key``; the same one as last batch when shape and dtype match."""
        dtype = np.dtype(dtype or self.dtype)
        buf = self._buffers.get(key)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
            buf = np.empty(shape, dtype)
            self._buffers[key] = buf
        return buf

    def zeros(self, key, shape, dtype=None) -> np.ndarray:
        """``buffer`` holding zeros, written only when it is made: the caller and whoever reads
        it must not write into it (an elided layer's output, which layers only read)."""
        buf = self._buffers.get(key)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != np.dtype(dtype or self.dtype):
            buf = self.buffer(key, shape, dtype)
            buf.fill(0)
        return buf

    def rows(self, key, shape, dtype=None) -> np.ndarray:
        """The first ``shape[0]`` rows of a buffer for ``key`` kept across batches whose row count
        varies (sampled graphs), reallocated only when a batch needs more (sam_backend's Resize)."""
        dtype = np.dtype(dtype or self.dtype)
        n, rest = int(shape[0]), tuple(shape[1:])
        buf = self._buffers.get(key)
        if buf is None or buf.shape[1:] != rest or buf.dtype != dtype or len(buf) < n:
            grown = len(buf) * 3 // 2 if buf is not None and buf.shape[1:] == rest else 0
            buf = np.empty((max(n, grown), *rest), dtype)
            self._buffers[key] = buf
        return buf[:n]

    def accumulate(self, store: dict, key: str, grad: np.ndarray) -> None:
        """The first contribution of the batch is kept as given, not copied (a layer writes
        neither into a gradient it returned nor into the one it was handed, and one array may
        go to several inputs: ``add``); a second is summed with it into a reused buffer, which
        later ones are added to."""
        have = store.get(key)
        if have is None:
            store[key] = grad
            return
        tag = (id(store), key)
        if tag in self._written:
            have += grad
            return
        buf = self.buffer(("grad", id(store), key), have.shape, have.dtype)
        np.add(have, grad, out=buf)
        store[key] = buf
        self._written.add(tag)

    def input_needs_grad(self, layer) -> list[bool]:
        """Per input of ``layer``: whether a gradient must flow back into it (a layer may skip
        computing the others and return None for them)."""
        return [self.needs_grad.get(src, True) for src in layer.inputs]

    def wants_squares(self, name: str) -> bool:
        """Whether parameter ``name``'s update rule accumulates per-example squared gradients."""
        opt = self.optimizers.get(name)
        return bool(opt is not None and opt.squares)

    def add_param_grad(self, name: str, grad: np.ndarray, squares: np.ndarray | None = None) -> None:
        self.accumulate(self.param_grads, name, grad)
        if squares is not None:
            self.accumulate(self.param_squares, name, squares)

    # ---- parameters -----------------------------------------------------------------------
    def value(self, name: str) -> np.ndarray:
        try:
            return self.values[name]
        except KeyError:
            raise KeyError(f"parameter '{name}' was not pulled for this batch") from None

    def reset(self, batch) -> None:
        for name in self.status:
            self.status[name] = Status.NULL
        self.batch = batch
        self.outputs.clear()
        self.saved.clear()
        self.grad_out.clear()
        self.param_grads.clear()
        self.param_squares.clear()
        self.states = {}
        self.lent = {}
        self._written.clear()
        self.memo.clear()
        self.loss = float("nan")
        self.predictions = None
