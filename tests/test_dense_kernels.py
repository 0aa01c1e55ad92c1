"""The compiled ends of an fc layer (bias + ReLU forward; ReLU mask + bias gradient backward)
against the numpy expressions they replace: the same bits, signed zeros and NaN included."""
import numpy as np
import pytest

from streamtrain.ops._dense_kernels import bias_relu, relu_backward


def _special(shape, dtype, seed):
    """Normal values with zeros of both signs, NaN and infinities sprinkled in."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape).astype(dtype)
    flat = a.reshape(-1)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 0.0, -0.0, np.nan, 1e-30, -1e-30, 0.0, -0.0], dtype)
    n = min(len(special), flat.size // 2)
    flat[rng.choice(flat.size, n, replace=False)] = special[:n]
    return a


def _same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_bias_relu_is_numpy(dtype, bias):
    z = _special((37, 11), dtype, 0)
    b = _special((11,), dtype, 1) if bias else np.zeros(0, dtype)
    want = np.maximum(z + b, 0) if bias else np.maximum(z, 0)
    got = z.copy()
    bias_relu(got, b, np.array([0, 1], dtype))
    _same_bits(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
def test_relu_backward_is_numpy(dtype, bias):
    y = np.maximum(_special((37, 11), dtype, 2), 0)
    gy = _special((37, 11), dtype, 3)
    gy[np.isinf(gy)] = 1.5                      # inf * 0 is NaN either way; keep the sums finite
    gz = np.empty_like(y)
    gb = np.empty(11 if bias else 0, dtype)
    relu_backward(y, gy, gz, gb, np.array([0, 1], dtype))
    want = gy * (y > 0)
    _same_bits(gz, want)
    if bias:
        _same_bits(gb, want.sum(axis=0))


def test_relu_backward_bias_sum_is_numpy_row_order_on_a_batch():
    """Many rows of mixed magnitudes: float32 rounding depends on the order of the sum."""
    rng = np.random.default_rng(4)
    y = np.maximum(rng.normal(size=(256, 64)), 0).astype(np.float32)
    gy = (rng.normal(size=(256, 64)) * 10.0 ** rng.integers(-6, 6, (256, 64))).astype(np.float32)
    gz, gb = np.empty_like(y), np.empty(64, np.float32)
    relu_backward(y, gy, gz, gb, np.array([0, 1], np.float32))
    _same_bits(gb, (gy * (y > 0)).sum(axis=0))


def test_fc_layer_takes_the_kernels_and_keeps_numpy_numbers():
    """A relu fc forward/backward through the layer equals the plain numpy expressions."""
    from streamtrain.graph import Graph, Schema
    from streamtrain.testing import random_batch
    layers = [{"name": "x", "type": "dense_input"},
              {"name": "h", "type": "fc", "inputs": ["x"], "dim": 5, "activation": "relu"},
              {"name": "out", "type": "fc", "inputs": ["h"], "dim": 1},
              {"name": "loss", "type": "logloss", "inputs": ["out"]}]
    g = Graph.from_config(layers, Schema(dense=("d0", "d1", "d2")))
    ctx = g.context()
    batch = random_batch(16, seed=0)
    g.feed(ctx, batch)
    rng = np.random.default_rng(0)
    for name in g.dense_params:
        ctx.values[name] = rng.normal(size=g.params[name].shape).astype(np.float32)
    g.forward(ctx)
    g.backward(ctx)
    x = batch.dense.astype(np.float32)
    W, b = ctx.values["h.W"], ctx.values["h.b"]
    h = np.maximum(x @ W + b, 0)
    _same_bits(ctx.outputs["h"], h)
    gh = ctx.grad_out["h"]
    gz = gh * (h > 0)
    _same_bits(ctx.param_grads["h.W"], x.T @ gz)
    _same_bits(ctx.param_grads["h.b"], gz.sum(axis=0))
    W2 = ctx.values["out.W"]
    gout = ctx.grad_out["out"]
    _same_bits(gh, gout @ W2.T)                   # the one-output outer product


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sigmoid_is_the_two_sided_logistic(dtype):
    """``sigmoid`` (one ``exp(-|z|)`` for both sides) gives the numbers of the two-sided form it
    replaced: ``1 / (1 + exp(-z))`` where ``z >= 0``, ``exp(z) / (1 + exp(z))`` below."""
    from streamtrain.ops.dense import sigmoid
    rng = np.random.default_rng(2)
    z = np.concatenate([rng.standard_normal(20_000) * 10, rng.standard_normal(5000) * 200,
                        [0.0, -0.0, np.inf, -np.inf, 88.7, -88.7, 1e-40, -1e-40]]).astype(dtype)
    want = np.empty_like(z)
    pos = z >= 0
    with np.errstate(over="ignore"):
        want[pos] = 1.0 / (1.0 + np.exp(-z[pos]))
        ez = np.exp(z[~pos])
        want[~pos] = ez / (1.0 + ez)
    got = sigmoid(z)
    assert got.dtype == want.dtype and np.array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want))
    assert np.isnan(sigmoid(np.array([np.nan], dtype)))[0]
