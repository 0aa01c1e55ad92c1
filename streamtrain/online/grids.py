"""The occurrence grids of a batch's embedding terms, made ahead in the reader's thread
(``PerExample.prepare``): work that depends on the batch alone, which the per-example engine's
``_by_example`` then offsets and copies instead of filling it from the term."""
from __future__ import annotations

import numpy as np

from streamtrain.batch import once_per_batch

from . import prep

_EMPTY_F = np.zeros(0)
_NO_X = np.zeros((0, 0))      # the coefficients of no fixed rows

GRID = "per-example grid"        # ctx.memo key (with the term's parameter) of a grid made ahead


def present_grids(ctx, layers, room: dict | None = None, bare=()) -> None:
    """For each term of ``layers`` given by present flags, its ``[B, m]`` grid of rows (from 0)
    and coefficients, into ``ctx.memo``: work that depends on the batch alone, done ahead in
    the reader's thread (``PerExample.prepare``); ``_by_example`` offsets and copies it instead
    of filling it from the term. ``room[param]`` more columns (the block's other terms, when
    the term is its first: ``PerExample.learn`` says how many) make it ``[B, m + room]``: the
    block's grid itself, whose last columns ``_by_example`` fills in place. A parameter in
    ``bare`` (its block's grid has unweighted terms alone: ``_unit``) gets rows alone, padding
    -1, and None for its coefficients."""
    batch = ctx.batch.size
    room = room or {}
    for layer in layers:
        for t in layer.field_terms(ctx):
            if t.present is not None:
                m = len(t.present) // batch
                width = m + room.get(t.param, 0)
                unit = t.param in bare and t.x is None
                row, x, single = _grid(ctx, t, batch, m, width, unit)
                ctx.memo[(GRID, t.param)] = (t.pos, row, None if unit else x, single)


def _grid(ctx, t, batch: int, m: int, width: int, unit: bool) -> tuple:
    """``present_grids``' grid of one term: (rows, coefficients, one column). An unweighted
    term's grid with no room for others (nothing writes into it later) depends on its present
    flags and positions alone: made once per batch for every graph whose term has the very
    same arrays (an AutoML job's candidates over the same fields: ``Prepared.shared``)."""
    def make():
        row, x = np.empty((batch, width), np.int64), _NO_X if unit else np.empty((batch, width))
        prep.put_present(row, x, 0, m, t.present, t.pos, 0,
                         _EMPTY_F if t.x is None else np.asarray(t.x, np.float64))
        return row, x, prep.one_column(t.present, t.pos, m)
    if t.x is not None or width != m:
        return make()
    # a graph's positions are a view of the batch's one unique pass (``Graph._feed``): named by
    # the array they view and where in it
    owner = t.pos if t.pos.base is None else t.pos.base
    where = (t.pos.__array_interface__["data"][0], t.pos.shape, t.pos.strides, unit)
    return once_per_batch(ctx.batch, ("grid", *where), (t.present, owner), make)


def _made_ahead(memo: dict, t):
    got = memo.get((GRID, t.param))
    return got[1:] if got is not None and got[0] is t.pos else None
