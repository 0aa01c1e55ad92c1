"""``signed_log1p``: the compiled pass and its table give numpy's float32 numbers bit for bit."""
import numpy as np
import pytest

from streamtrain.readers.numbers import signed_log1p


def numpy_signed_log1p(x):
    x = np.asarray(x, dtype=np.float32)
    return np.copysign(np.log1p(np.abs(x)), x)


RNG = np.random.default_rng(7)
CASES = {
    "small counts": RNG.integers(0, 300, (512, 13)).astype(np.float64),
    "around the table's end": np.arange(-70000, 70000, 7, dtype=np.float64),
    "large integers": RNG.integers(-10**8, 10**8, 4096).astype(np.float64),
    "fractions": RNG.standard_normal(4096) * 1e3,
    "float32 input": (RNG.standard_normal(4096) * 10).astype(np.float32),
    "specials": np.array([0.0, -0.0, 1, -1, np.inf, -np.inf, np.nan, 1e-30, -1e-40, 3.4e38, 1e39,
                          -0.99999, -1.0, -1.5, 65535, 65536, -65535, 65535.5, 2.0 ** 16 - 0.5]),
    "every bit pattern": RNG.integers(0, 2 ** 32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bit_identical_to_numpy(name):
    x = CASES[name]
    with np.errstate(all="ignore"):
        got, want = signed_log1p(x), numpy_signed_log1p(x)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_shapes_and_other_dtypes():
    assert signed_log1p(np.zeros((0, 13))).shape == (0, 13)
    x = np.arange(-5, 6, dtype=np.int64).reshape(11, 1)
    assert np.array_equal(signed_log1p(x), numpy_signed_log1p(x))
    f = np.asfortranarray(RNG.integers(0, 99, (6, 4)).astype(np.float64))
    assert np.array_equal(signed_log1p(f), numpy_signed_log1p(f))
