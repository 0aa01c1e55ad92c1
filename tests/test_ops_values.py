"""Forward values worked out by hand on tiny inputs, and the errors layers raise on bad data."""
from __future__ import annotations

import numpy as np
import pytest

from streamtrain.batch import Batch
from streamtrain.context import Context
from streamtrain.errors import ConfigError, ShapeError
from streamtrain.graph import Graph, Schema
from streamtrain.ops import LAYERS, load_all

load_all()

# three fields of dimension 2 for one example: pairwise products (0,1)=[2,0] (0,2)=[0,0] (1,2)=[0,3]
V = np.array([[[1.0, 0.0], [2.0, 1.0], [0.0, 3.0]]])


def forward(kind, xs, labels=None, params=None, *, training=True, seed=0, **options):
    xs = [np.asarray(x, np.float64) for x in xs]
    layer = LAYERS[kind]("l", [f"in{i}" for i in range(len(xs))], **options)
    layer.output_shape = layer.build([x.shape[1:] for x in xs], Schema())
    ctx = Context(["l"], dtype=np.float64, seed=seed, training=training)
    labels = np.zeros(len(xs[0])) if labels is None else labels
    ctx.reset(Batch(labels=np.asarray(labels, np.float32)))
    ctx.values = {layer.param_name(k): np.asarray(v, np.float64) for k, v in (params or {}).items()}
    return layer.forward(ctx, xs), ctx


def test_fm_is_the_sum_of_pairwise_products():
    out, _ = forward("fm", [V])
    np.testing.assert_allclose(out, [[2.0, 3.0]])
    out, _ = forward("fm", [V], reduce=True)
    np.testing.assert_allclose(out, [[5.0]])


def test_inner_product_pairs_in_row_major_order():
    out, _ = forward("inner_product", [V])
    np.testing.assert_allclose(out, [[2.0, 0.0, 3.0]])       # <v0,v1>, <v0,v2>, <v1,v2>


def test_cross_network_by_hand():
    x = [[1.0, 3.0]]
    # one layer: s = x·w = 7; x1 = x0*7 + b + x0
    out, _ = forward("cross", [x], params={"w": [[1.0, 2.0]], "b": [[0.5, -0.5]]}, layers=1)
    np.testing.assert_allclose(out, [[8.5, 23.5]])
    # second layer w=[0,1], b=0: s = 23.5; x2 = x0*23.5 + x1
    out, _ = forward("cross", [x], params={"w": [[1.0, 2.0], [0.0, 1.0]], "b": [[0.5, -0.5], [0, 0]]}, layers=2)
    np.testing.assert_allclose(out, [[32.0, 94.0]])


def test_cosine_by_hand_and_zero_vectors():
    a = [[3.0, 4.0], [1.0, 0.0], [0.0, 0.0], [2.0, 2.0]]
    b = [[4.0, 3.0], [-5.0, 0.0], [1.0, 1.0], [0.0, 0.0]]
    out, _ = forward("cosine", [a, b])
    np.testing.assert_allclose(out, [[0.96], [-1.0], [0.0], [0.0]], atol=1e-8)
    assert out.shape == (4, 1)
    layer = LAYERS["cosine"]("l", ["in0", "in1"])
    layer.build([(2,), (2,)], Schema())
    ctx = Context(["l"], dtype=np.float64)
    layer.forward(ctx, [np.array(a), np.array(b)])
    ga, gb = layer.backward(ctx, np.ones((4, 1)))
    np.testing.assert_array_equal(ga[2:], 0)                    # a zero vector passes no gradient
    np.testing.assert_array_equal(gb[2:], 0)
    np.testing.assert_allclose(ga[0], [4 / 25 - 0.96 * 3 / 25, 3 / 25 - 0.96 * 4 / 25])


def test_pooling_by_hand():
    x = [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]
    np.testing.assert_allclose(forward("sum_pooling", [x])[0], [[9.0, 12.0]])
    np.testing.assert_allclose(forward("mean_pooling", [x])[0], [[3.0, 4.0]])
    np.testing.assert_allclose(forward("sum_pooling", [x], axis=2)[0], [[3.0, 7.0, 11.0]])
    np.testing.assert_allclose(forward("mean_pooling", [[[1.0, 2.0, 6.0]]])[0], [[3.0]])   # [B, n] -> [B, 1]


def test_softmax_ce_by_hand():
    z = [[0.0, np.log(3.0)], [0.0, np.log(3.0)]]              # probabilities [0.25, 0.75]
    p, ctx = forward("softmax_ce", [z], labels=[1, 0])
    np.testing.assert_allclose(p, [[0.25, 0.75]] * 2)
    assert ctx.loss == pytest.approx(-(np.log(0.75) + np.log(0.25)) / 2)
    np.testing.assert_allclose(ctx.predictions, p)
    big, ctx = forward("softmax_ce", [[[1000.0, 0.0, -1000.0]]], labels=[2])     # no overflow
    assert np.isfinite(ctx.loss) and ctx.loss == pytest.approx(2000.0)


def test_mse_by_hand():
    out, ctx = forward("mse", [[[1.0], [3.0]]], labels=[0, 1])
    assert ctx.loss == pytest.approx((1 + 4) / 2)                # no one-half
    np.testing.assert_allclose(out, [1.0, 3.0])
    layer = LAYERS["mse"]("l", ["in0"], reduction="mean")
    layer.build([(1,)], Schema())
    layer.forward(ctx, [np.array([[1.0], [3.0]])])
    np.testing.assert_allclose(layer.backward(ctx, None)[0], [[1.0], [2.0]])   # 2 (z - y) / B


def test_concat_and_add_by_hand():
    out, _ = forward("concat", [[[1.0, 2.0]], [[[3.0], [4.0]]]])
    np.testing.assert_allclose(out, [[1.0, 2.0, 3.0, 4.0]])
    out, _ = forward("add", [[[1.0, 2.0]], [[10.0, 20.0]], [[100.0, 200.0]]])
    np.testing.assert_allclose(out, [[111.0, 222.0]])


def test_dropout_scales_kept_entries_and_is_identity_when_evaluating():
    x = np.ones((200, 50))
    out, _ = forward("dropout", [x], rate=0.25)
    assert set(np.unique(out)) <= {0.0, 1 / 0.75}
    assert abs((out == 0).mean() - 0.25) < 0.02
    assert abs(out.mean() - 1.0) < 0.03                          # inverted: the mean is kept
    again, _ = forward("dropout", [x], rate=0.25)
    np.testing.assert_array_equal(out, again)                    # the mask comes from ctx.rng
    other, _ = forward("dropout", [x], rate=0.25, seed=1)
    assert not np.array_equal(out, other)
    same, _ = forward("dropout", [x], rate=0.25, training=False)
    np.testing.assert_array_equal(same, x)


def test_add_shape_mismatch_names_both_inputs_and_shapes():
    layer = LAYERS["add"]("logit", ["wide", "deep"])
    with pytest.raises(ShapeError) as err:
        layer.build([(1,), (8,)], Schema())
    msg = str(err.value)
    assert all(s in msg for s in ("'logit'", "'wide'", "'deep'", "(1,)", "(8,)")), msg


def test_shape_errors_of_interaction_layers():
    with pytest.raises(ShapeError, match=r"'c'.*'a'.*\(3,\).*'b'.*\(4,\)"):
        LAYERS["cosine"]("c", ["a", "b"]).build([(3,), (4,)], Schema())
    with pytest.raises(ShapeError, match=r"\[B, F, d\]"):
        LAYERS["fm"]("f", ["x"]).build([(6,)], Schema())
    with pytest.raises(ShapeError, match="at least 2 fields"):
        LAYERS["inner_product"]("p", ["x"]).build([(1, 4)], Schema())
    with pytest.raises(ShapeError, match="axis 3"):
        LAYERS["sum_pooling"]("s", ["x"], axis=3).build([(2, 4)], Schema())
    with pytest.raises(ShapeError, match="K >= 2"):
        LAYERS["softmax_ce"]("s", ["x"]).build([(1,)], Schema())
    with pytest.raises(ShapeError, match="one output"):
        LAYERS["mse"]("m", ["x"]).build([(2,)], Schema())


def test_shape_error_in_a_graph_becomes_a_config_error_naming_the_layer():
    layers = [{"name": "x", "type": "dense_input"}, {"name": "a", "type": "fc", "inputs": ["x"], "dim": 2},
              {"name": "sum", "type": "add", "inputs": ["a", "x"]},
              {"name": "loss", "type": "mse", "inputs": ["sum"]}]
    with pytest.raises(ConfigError, match=r"layers\.sum: .*'x' of shape \(3,\).*'a' of shape \(2,\)"):
        Graph.from_config(layers, Schema(dense=("d0", "d1", "d2")))


@pytest.mark.parametrize("labels,bad", [([0, 3], "3.0"), ([0, -1], "-1.0"), ([0.5, 1], "0.5")])
def test_softmax_ce_refuses_a_label_that_is_not_a_class(labels, bad):
    with pytest.raises(ValueError, match=rf"layer 'l' \(softmax_ce\): label {bad}"):
        forward("softmax_ce", [np.zeros((2, 3))], labels=labels)


def test_feature_cross_pairs_every_id_of_one_field_with_every_id_of_the_other():
    from streamtrain.batch import SparseField
    from streamtrain.context import Context
    from streamtrain.hashing import hash_str, splitmix64
    from streamtrain.ops import get
    from streamtrain.ops.base import SparseShape
    u64 = lambda *v: np.array(v, np.uint64)  # noqa: E731
    batch = Batch(labels=np.zeros(3, np.float32), dense=np.zeros((3, 0), np.float32), dense_names=(),
                  sparse={"u": SparseField(u64(11, 12, 13), np.array([0, 1, 2, 3])),
                          "g": SparseField(u64(21, 22, 23), np.array([0, 2, 2, 3]),      # 2 ids, missing, 1 id
                                           np.array([1.0, 0.5, 2.0], np.float32))})
    layer = get("feature_cross")("x", ["s"])
    shape = layer.build([SparseShape(("u", "g"))], None)
    assert shape.fields == ("u", "g", "u_x_g")
    ctx = Context(["x"])
    ctx.reset(batch)
    out = layer.forward(ctx, [None])
    cross = out["u_x_g"]
    salt = np.uint64(hash_str("cross:u:g"))
    np.testing.assert_array_equal(cross.offsets, [0, 2, 2, 3])
    want = splitmix64(u64(11, 11, 13) ^ splitmix64(u64(21, 22, 23) ^ salt))
    np.testing.assert_array_equal(cross.ids, want)
    np.testing.assert_allclose(cross.values, [1.0, 0.5, 2.0])
    assert out["u"] is batch.sparse["u"]
    # the same pair of ids in another batch gets the same id: a feature of its own across batches
    again = get("feature_cross")("x", ["s"])
    again.build([SparseShape(("u", "g"))], None)
    ctx.reset(batch)
    np.testing.assert_array_equal(again.forward(ctx, [None])["u_x_g"].ids, want)


def test_feature_cross_refuses_unknown_fields_and_skips_wide_inputs():
    from streamtrain.errors import ShapeError
    from streamtrain.ops import get
    from streamtrain.ops.base import SparseShape
    with pytest.raises(ShapeError, match=r"fields \['z'\]"):
        get("feature_cross")("x", ["s"], pairs=[["a", "z"]]).build([SparseShape(("a", "b"))], None)
    many = SparseShape(tuple(f"f{i}" for i in range(26)))
    assert get("feature_cross")("x", ["s"]).build([many], None).fields == many.fields   # > max_fields: no crosses
    assert len(get("feature_cross")("x", ["s"], max_fields=26).build([many], None).fields) == 26 + 325
