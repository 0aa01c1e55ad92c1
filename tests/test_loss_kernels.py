"""logloss's compiled forward tail (``ops/_loss_kernels.py``) against the numpy expressions it
replaces: the predictions bit for bit (signed zeros, infinities and NaN included), the mean loss
to float rounding; and the layer's two paths (with and without numba loaded) agree."""
import sys

import numpy as np
import pytest

from streamtrain.ops import losses
from streamtrain.ops._loss_kernels import logloss_forward
from streamtrain.ops.dense import sigmoid


def _logits(n, dtype, seed):
    rng = np.random.default_rng(seed)
    z = (rng.normal(size=n) * 8).astype(dtype)
    special = np.array([0.0, -0.0, 1e-30, -1e-30, 90.0, -90.0, 800.0, -800.0, np.inf, -np.inf], dtype)
    z[rng.choice(n, len(special), replace=False)] = special
    return z, (rng.random(n) < 0.3).astype(dtype)


def _numpy_loss(z, y):
    return np.logaddexp(0, -np.abs(z)) + np.maximum(z, 0) - y * z


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logloss_forward_is_numpy(dtype):
    z, y = _logits(1000, dtype, 0)
    finite = np.isfinite(z)
    p = np.empty_like(z)
    mean = logloss_forward(z[finite], y[finite], np.exp(-np.abs(z[finite])), p[:finite.sum()],
                           np.array([0, 1], dtype))
    want = _numpy_loss(z[finite].astype(np.float64), y[finite].astype(np.float64)).mean()
    assert mean == pytest.approx(want, rel=1e-6 if dtype == np.float32 else 1e-13)
    p = np.empty_like(z)
    logloss_forward(z, y, np.exp(-np.abs(z)), p, np.array([0, 1], dtype))
    want_p = sigmoid(z)
    assert p.dtype == want_p.dtype and np.array_equal(p.view(np.uint8), want_p.view(np.uint8))


def test_nan_logit_gives_nan():
    z = np.array([0.5, np.nan], np.float32)
    p = np.empty_like(z)
    mean = logloss_forward(z, np.zeros(2, np.float32), np.exp(-np.abs(z)), p, np.array([0, 1], np.float32))
    assert np.isnan(p[1]) and np.isnan(mean) and p[0] == sigmoid(z[:1])[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_paths_agree(dtype, monkeypatch):
    from streamtrain.context import Context
    z, y = _logits(300, dtype, 1)
    z = z[np.isfinite(z)]
    y = y[:len(z)]
    ctx = Context(["loss"])
    import numba  # noqa: F401  (the compiled path runs once numba is loaded)
    p_fast, loss_fast = losses._sigmoid_loss(ctx, "loss", z, y)
    monkeypatch.delitem(sys.modules, "numba")
    p_slow, loss_slow = losses._sigmoid_loss(ctx, "loss", z, y)
    assert np.array_equal(p_fast.view(np.uint8), p_slow.view(np.uint8))
    assert loss_fast == pytest.approx(loss_slow, rel=1e-6 if dtype == np.float32 else 1e-13)
    assert losses._sigmoid_loss(ctx, "loss", z[:0], y[:0])[1] == 0.0
