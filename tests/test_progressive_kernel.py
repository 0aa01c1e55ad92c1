"""The binary progressive figures' compiled pass (``streamtrain/_progressive_kernels.py``) against
their numpy arithmetic (``Progressive._update``): the same bins, losses and sums, bit for bit."""
import numpy as np
import pytest

from streamtrain.progressive import Progressive


def _batches(rng, label_dtype):
    for n in (0, 1, 7, 8, 9, 127, 128, 129, 256, 300, 1000, 4099):
        z = rng.standard_normal(n) * rng.choice([0.5, 4.0, 40.0])
        p = (1 / (1 + np.exp(-z))).astype(rng.choice([np.float32, np.float64]))
        labels = (rng.random(n) < 0.3).astype(label_dtype)
        if n > 8:
            p[:4] = [0.0, 1.0, 1e-30, 0.5]
            labels[5] = 0.75                       # a soft label
        yield labels, p


@pytest.mark.parametrize("label_dtype", [np.float32, np.float64])
def test_compiled_binary_figures_are_the_numpy_arithmetic(label_dtype):
    rng = np.random.default_rng(3)
    fast, slow = Progressive(), Progressive()
    for labels, p in _batches(rng, label_dtype):
        with np.errstate(invalid="ignore"):
            want = slow._update(np.asarray(labels).reshape(-1), np.asarray(p, np.float64).reshape(-1))
        got = fast.update(labels, p)
        # numpy's log is a SIMD routine chosen by the CPU (AVX-512 on some hosts), the kernel's is libm's:
        # they may differ in the last bit; the sums and the AUC below are still compared exactly
        np.testing.assert_array_max_ulp(got, want, maxulp=2)
        assert got.dtype == want.dtype == np.float64
    assert np.array_equal(fast.pos, slow.pos) and np.array_equal(fast.neg, slow.neg)
    assert fast.pos.sum() + fast.neg.sum() == fast.count == slow.count
    for k in ("loss_sum", "label_sum", "pred_sum"):
        assert getattr(fast, k) == getattr(slow, k), k
    assert fast.auc == slow.auc and 0.3 < fast.auc < 0.7


def test_a_nan_prediction_bins_as_numpy_casts_it():
    """A NaN probability: its log-odds bin is 0 (numpy's cast of NaN to int64, clipped), its
    loss and the sums NaN, in both."""
    fast, slow = Progressive(), Progressive()
    labels, p = np.array([1, 0, 1, 0, 1, 0, 0, 1, 1], np.float32), np.linspace(0.05, 0.95, 9)
    p[[2, 3]] = np.nan
    with np.errstate(invalid="ignore"):
        want = slow._update(labels, p)
    np.testing.assert_array_equal(fast.update(labels, p), want)
    assert np.array_equal(fast.pos, slow.pos) and np.array_equal(fast.neg, slow.neg)
    assert fast.pos[0] == 1 and fast.neg[0] == 1 and np.isnan(fast.loss_sum) and np.isnan(fast.pred_sum)
    assert fast.label_sum == slow.label_sum == 5.0


def test_integer_labels_take_the_numpy_path():
    fast, slow = Progressive(), Progressive()
    labels, p = np.array([1, 0, 1, 1]), np.array([0.9, 0.2, 0.4, 0.7], np.float32)
    np.testing.assert_array_equal(fast.update(labels, p), slow._update(labels, np.asarray(p, np.float64)))
    assert fast.logloss == slow.logloss and fast.auc == slow.auc == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pairwise_sum_is_numpys_sum(dtype):
    """The sums of the pass add as numpy's ``sum`` does (pairwise, in the array's precision)."""
    from streamtrain._progressive_kernels import pairwise_sum
    rng = np.random.default_rng(4)
    for n in [*range(0, 300), 1000, 4097, 70001]:
        a = (rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 3, n)).astype(dtype)
        assert pairwise_sum(a) == a.sum(), n


def test_losses_reuse_the_bins_logarithms_only_where_both_clips_leave_p():
    """The loss takes the bins' log(p) and log1p(-p) when neither clip moves p, its own logs of
    the loss's clip otherwise (p between the bins' clip 1e-13 and the loss's 1e-7, or at 0/1):
    each loss is libm's -(y log c + (1 - y) log1p(-c)) bit for bit (``math`` calls libm too)."""
    import math

    from streamtrain.scores import EPS
    p = np.array([0.0, 1e-30, 1e-12, 3e-8, 1e-7, 0.2, 0.5, 0.9, 1 - 3e-8, 1 - 1e-14, 1.0, 0.7])
    labels = np.array([1, 0, 1, 0, 1, 0, 1, 0.75, 1, 0, 1, 0], np.float64)
    got = Progressive().update(labels, p)
    for q, y, loss in zip(p.tolist(), labels.tolist(), got.tolist()):
        c = min(max(q, EPS), 1 - EPS)
        assert loss == -(y * math.log(c) + (1 - y) * math.log1p(-c)), q
