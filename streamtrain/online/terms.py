"""What a layer declares to the per-example engine: its terms of the logit, per parameter.

A *linear* term contributes ``z[example[o]] += x[o] * w[pos[o]]`` for each occurrence ``o``
(``pos``: the pulled row of a table, or the flat index of a dense parameter). A *field* term
(``field`` set) is an embedding's rows entering an FM: example ``k``'s field ``f`` is
``e_f = Σ_{o in (k, f)} x[o] · v[pos[o]]`` and the FM adds ``½ (|Σ_f e_f|² − Σ_f |e_f|²)``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

#: the update rules the compiled per-example loop runs (``Optimizer.kernel_rule``), by their
#: index in ``online.kernels.RULES`` (each optimizer module's own ``rule`` function, compiled)
KERNEL_RULES = ("sgd", "adagrad", "ftrl")
SGD, ADAGRAD, FTRL = range(len(KERNEL_RULES))


@functools.lru_cache(maxsize=16)
def index_grid(batch: int, n: int) -> np.ndarray:
    """``[batch, n]``: every row ``0, 1, ..., n - 1`` (a dense parameter's flat indices, each
    example's occurrences of them), read-only, made once per shape (a batch's terms are made per
    batch; batches come in one size but the last)."""
    return np.broadcast_to(np.arange(n), (batch, n))


@functools.lru_cache(maxsize=16)
def bias_grid(batch: int) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, x)`` of a one-weight term that every example has once, coefficient 1: ``[batch,
    1]`` zeros (int; one row broadcast, as an ``index_grid``) and ones (float64), read-only, made
    once per batch size."""
    x = np.ones((batch, 1))
    x.flags.writeable = False
    return index_grid(batch, 1), x


@dataclass
class Term:
    """Occurrences either as a list (``example`` given: ``pos``, ``x`` and ``field`` per
    occurrence) or *dense* (``example`` None: ``pos`` and ``x`` are ``[B, m]``, one row per
    example, ``x = 0`` where an example has nothing; ``field`` then per column). A dense term
    may come as *present* flags (``present`` given, ``[m * B]`` column-major, 0 or 1: whether
    example ``k`` has an occurrence in column ``f``): ``pos`` and ``x`` (None: 1) then list the
    occurrences column after column, each column's in example order (an embedding's
    single-valued fields: the engine fills its grid in one compiled pass)."""

    param: str
    pos: np.ndarray           # int: the row (table) or flat index (dense parameter) of each occurrence
    x: np.ndarray | None      # its coefficient
    rows: int                 # rows of the table pulled this batch, or the dense parameter's size
    example: np.ndarray | None = None   # int: the example of each occurrence (None: dense)
    field: np.ndarray | None = None     # FM terms: the field of each occurrence, numbered in its layer
    present: np.ndarray | None = None   # a dense term given by its occurrences: see above

    def grid(self, batch: int) -> tuple[np.ndarray, np.ndarray]:
        """A dense term's ``(pos, x)`` as ``[B, m]`` arrays."""
        if self.present is None:
            return self.pos, self.x
        here = self.present.reshape(-1, batch).astype(bool)
        pos, x = np.zeros(here.shape, np.int64), np.zeros(here.shape)
        pos[here] = self.pos
        x[here] = 1.0 if self.x is None else self.x
        return pos.T, x.T
