"""What a layer declares to the per-example engine: its terms of the logit, per parameter.

A *linear* term contributes ``z[example[o]] += x[o] * w[pos[o]]`` for each occurrence ``o``
(``pos``: the pulled row of a table, or the flat index of a dense parameter). A *field* term
(``field`` set) is an embedding's rows entering an FM: example ``k``'s field ``f`` is
``e_f = Σ_{o in (k, f)} x[o] · v[pos[o]]`` and the FM adds ``½ (|Σ_f e_f|² − Σ_f |e_f|²)``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: the update rules the compiled per-example loop implements (``Optimizer.kernel_rule``)
SGD, ADAGRAD, FTRL = 0, 1, 2


@dataclass
class Term:
    """Occurrences either as a list (``example`` given: ``pos``, ``x`` and ``field`` per
    occurrence) or *dense* (``example`` None: ``pos`` and ``x`` are ``[B, m]``, one row per
    example, ``x = 0`` where an example has nothing; ``field`` then per column)."""

    param: str
    pos: np.ndarray           # int: the row (table) or flat index (dense parameter) of each occurrence
    x: np.ndarray             # its coefficient
    rows: int                 # rows of the table pulled this batch, or the dense parameter's size
    example: np.ndarray | None = None   # int: the example of each occurrence (None: dense)
    field: np.ndarray | None = None     # FM terms: the field of each occurrence, numbered in its layer
