"""Arrays the per-example engine reuses from batch to batch (``Arrays``), cache-line aligned
where the compiled loop reads and writes rows all over them (``aligned``)."""
from __future__ import annotations

import numpy as np


def aligned(shape: tuple, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)`` starting on a 64-byte cache line (numpy's start 16 bytes into
    one): a block's row of 8 float64 is then one line, not two, for the per-example loop that
    reads and writes rows all over the block (10 % of the FM loop's time)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class Arrays:
    """Arrays the engine reuses from batch to batch (a block's rows vary: the first ``n`` rows
    of one grown as needed), and zero arrays nothing writes to."""

    def __init__(self):
        self._kept: dict = {}

    def rows(self, key, n: int, d: int, dtype, zeros: bool = False) -> np.ndarray:
        buf = self._kept.get(key)
        if buf is None or len(buf) < n or buf.shape[1] != d or buf.dtype != dtype:
            size = max(n, len(buf) * 3 // 2 if buf is not None else 0)
            buf = self._kept[key] = aligned((size, d), dtype)
            if zeros:
                buf.fill(0)
        return buf[:n]

    def grid(self, key, batch: int, width: int, dtype) -> np.ndarray:
        buf = self._kept.get(key)
        if buf is None or buf.shape != (batch, width) or buf.dtype != dtype:
            buf = self._kept[key] = np.empty((batch, width), dtype)
        return buf

    def offsets(self, batch: int, width: int) -> np.ndarray:
        """``k * width`` for ``k = 0..B``: where each example's row of a dense grid starts."""
        return self._last("offsets", (batch, width), lambda: np.arange(batch + 1, dtype=np.int64) * width)

    def fields(self, batch: int, fields: list) -> np.ndarray:
        """The field of every cell of a dense grid whose columns hold ``fields``."""
        per_column = np.concatenate(fields).astype(np.int64, copy=False)
        return self._last("fields", (batch, per_column.tobytes()), lambda: np.tile(per_column, batch))

    def distinct(self, param: str, pos: np.ndarray) -> bool:
        """Whether every example's row of a dense term's ``pos`` grid holds distinct rows: one
        column, or one row broadcast to every example (an index grid) without a repeat (found
        once per grid: a term's broadcast grid is one array from batch to batch; by a set, not
        ``np.unique``, which imports ``numpy.ma`` at its first call)."""
        if pos.shape[1] <= 1:
            return True
        if pos.strides[0] != 0:
            return False
        got = self._kept.get(("distinct", param))
        if got is None or got[0] is not pos:
            got = self._kept[("distinct", param)] = (pos, len(set(pos[0].tolist())) == pos.shape[1])
        return got[1]

    def _last(self, kind: str, key, make) -> np.ndarray:
        """The array made for ``key`` the last time (batches come in one size but the last)."""
        got = self._kept.get(kind)
        if got is None or got[0] != key:
            got = self._kept[kind] = (key, make())
        return got[1]
