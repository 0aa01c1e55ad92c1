"""The parse thread's compiled helpers give what numpy gives: the line ends of a block (counted
in 64-byte blocks, scanned only where a block holds one) and the batches' CSR fields of a
parsed piece (branch-free)."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.readers.batching import fields_from_columns
from streamtrain.readers.line_ends import line_ends


def _cases():
    rng = np.random.default_rng(0)
    yield b""
    yield b"\n"
    yield b"ab"
    yield b"a\nb\n\n"
    yield b"\n" * 200
    yield b"\n" * 3000                          # the output grows several times
    yield bytes(rng.choice([10, 65], size=1000).astype(np.uint8))
    yield bytes(rng.choice([10] + [65] * 199, size=5000).astype(np.uint8))


@pytest.mark.parametrize("buf", list(_cases()))
def test_line_ends_are_numpys_at_every_offset_of_the_blocks(buf):
    for off in range(min(len(buf), 70)):       # every alignment of the 64-byte blocks
        arr = np.frombuffer(buf, np.uint8)[off:]
        want = np.flatnonzero(arr == 10)
        got = line_ends(arr)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)


def test_fields_from_columns_are_the_masked_columns_per_cut():
    rng = np.random.default_rng(1)
    F, R = 5, 1000
    ids = rng.integers(0, 2**63, size=(F, R)).astype(np.uint64)
    present = rng.random((F, R)) < 0.7
    present[2] = False                          # a field empty in every row
    present[3] = True                           # and one in none
    cuts = [0, 1, 300, 301, 1000]
    out = fields_from_columns(ids, present, cuts)
    assert len(out) == 4
    for b, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        for j in range(F):
            f, m = out[b][j], present[j, lo:hi]
            np.testing.assert_array_equal(f.ids, ids[j, lo:hi][m])
            np.testing.assert_array_equal(f.offsets, np.r_[0, np.cumsum(m)])
    one = fields_from_columns(ids[:, :3], np.zeros((F, 3), bool))
    assert [len(f.ids) for f in one] == [0] * F
    assert one[0].offsets.tolist() == [0, 0, 0, 0]
