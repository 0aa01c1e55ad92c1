"""One conformance suite for every registered layer kind (STYLE.md §4, §11).

Every case gets: a finite-difference gradient check (inputs and every parameter), a JSON
round-trip that rebuilds an identical layer, the forward contract (shape, dtype, no per-batch
state on the layer), and option validation. Hand-computed values for the interaction layers
follow the table.
"""
from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field

import numpy as np
import pytest

from streamtrain.context import Context
from streamtrain.errors import ConfigError
from streamtrain.graph import Schema
from streamtrain.ops import REGISTRY, load_all
from streamtrain.testing import feed_tables, gradcheck, input_shape, random_batch

load_all()
BATCH = 5
SPARSE = "sparse"      # an input spec: the batch's categorical fields (what sparse_input outputs)


@dataclass
class Case:
    kind: str
    options: dict = field(default_factory=dict)
    inputs: tuple = ((4,),)         # per-example shape of each dense input, or SPARSE
    batch: dict = field(default_factory=dict)   # random_batch keyword arguments
    classes: int = 0                # labels become class indices 0..classes-1
    extra: dict = field(default_factory=dict)   # reserved config keys: param, optimizer
    tag: str = ""

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.tag}" if self.tag else self.kind


CASES = [
    Case("sparse_input", inputs=()),
    Case("sparse_input", {"fields": ["a", "c"]}, inputs=(), tag="fields"),
    Case("sparse_input", {"exclude": ["b"]}, inputs=(), tag="exclude"),
    Case("dense_input", inputs=()),
    Case("dense_input", {"fields": ["d2", "d0"]}, inputs=(), tag="fields"),
    Case("embedding", {"dim": 3}, (SPARSE,), tag="per_field-sum"),
    Case("embedding", {"dim": 3, "shared": True}, (SPARSE,), {"multivalue": ("b", "c"), "values": True},
         tag="shared-sum-values-multi"),
    Case("embedding", {"dim": 2, "combiner": "mean"}, (SPARSE,), {"multivalue": ("a",)},
         tag="per_field-mean-multi"),
    Case("embedding", {"dim": 2, "combiner": "mean", "shared": True}, (SPARSE,),
         {"multivalue": ("a", "b"), "values": True, "missing": 0.3}, tag="shared-mean-values-multi"),
    Case("embedding", {"dim": 2}, (SPARSE,), {"multivalue": ("a", "b", "c"), "values": True},
         tag="per_field-sum-values-multi"),
    *[Case("fc", {"dim": 3, "activation": act}, ((2, 3),), tag=act)
      for act in ("identity", "relu", "sigmoid", "tanh")],
    Case("fc", {"dim": 2, "bias": False, "init": "normal"}, ((4,),),
         extra={"param": "shared_fc", "optimizer": {"type": "adam", "lr": 0.01}}, tag="nobias-param"),
    Case("logloss", inputs=((1,),)),
    Case("logloss", {"reduction": "mean"}, ((1,),), tag="mean"),
    Case("logloss", {"sequential": True, "implicit": False}, ((1,),), tag="sequential"),
    Case("mse", inputs=((1,),)),
    Case("mse", {"reduction": "mean"}, ((1,),), tag="mean"),
    Case("softmax_ce", inputs=((4,),), classes=4),
    Case("softmax_ce", {"reduction": "mean"}, ((3,),), classes=3, tag="mean"),
    Case("dropout", {"rate": 0.3}, ((2, 3),)),
    Case("dropout", {"rate": 0.0}, ((4,),), tag="rate0"),
    Case("concat", inputs=((2, 3), (4,), (1,))),
    Case("concat", inputs=((3, 2),), tag="one-input"),
    Case("add", inputs=((2,), (2,), (2,))),
    Case("add", inputs=((3, 2),), tag="one-input"),
    Case("sum_pooling", inputs=((4, 3),)),
    Case("sum_pooling", inputs=((5,),), tag="vector"),
    Case("mean_pooling", inputs=((4, 3),)),
    Case("mean_pooling", {"axis": 2}, ((4, 3),), tag="axis2"),
    Case("fm", inputs=((4, 3),)),
    Case("fm", {"reduce": True}, ((4, 3),), tag="reduce"),
    Case("inner_product", inputs=((4, 3),)),
    Case("inner_product", inputs=((2, 5),), tag="two-fields"),
    Case("cross", {"layers": 1}, ((5,),), tag="1layer"),
    Case("cross", {"layers": 3, "init_scale": 0.3}, ((2, 3),), tag="3layers"),
    Case("cosine", inputs=((6,), (2, 3))),
    Case("feature_cross", inputs=(SPARSE,)),
    Case("feature_cross", {"pairs": [["a", "c"]], "keep": False}, (SPARSE,), {"multivalue": ("a",), "values": True},
         tag="pairs-multi-values"),
    Case("bias", inputs=()),
    Case("bias", {"dim": 3, "init": "normal", "init_scale": 0.5}, inputs=(),
         extra={"optimizer": {"type": "adagrad", "lr": 0.5}}, tag="dim3-optimizer"),
]

# kinds that carry their own test parameters (``test_params()``, registry.py): one case each
CASES += [Case(kind, p.get("options", {}), tuple(p.get("inputs", ())), p.get("batch", {}), p.get("classes", 0),
               p.get("extra", {}), p.get("tag", ""))
          for kind, cls in REGISTRY.items() if hasattr(cls, "test_params") for p in cls.test_params()]

# per kind: one option value that must be refused (None: the kind has no options)
BAD_VALUE = {
    "sparse_input": ("fields", "a"), "dense_input": ("fields", ["d0", 3]),
    "embedding": ("combiner", "max"), "fc": ("activation", "gelu"), "logloss": ("reduction", "avg"),
    "mse": ("reduction", "none"), "softmax_ce": ("reduction", "avg"), "dropout": ("rate", 1.0),
    "concat": None, "add": None, "sum_pooling": ("axis", 0), "mean_pooling": ("axis", "1"),
    "fm": ("reduce", 1), "inner_product": None, "cross": ("layers", 0), "cosine": ("eps", 0),
    "bias": ("dim", 0), "feature_cross": ("max_fields", 1),
    "scatter_gather": ("reduce", "max"), "indegree_norm": ("block", "0"), "partial_linear": ("dim", 0),
    "bias_act": ("activation", "gelu"), "node_input": ("dim", -1), "seed_rows": ("endpoint", 3),
}
KINDS = sorted(REGISTRY)


def make_batch(case: Case, seed: int = 0):
    batch = random_batch(BATCH, **{"missing": 0.2, **case.batch}, seed=seed)
    if case.classes:
        batch.labels = np.random.default_rng(seed).integers(0, case.classes, BATCH).astype(np.float32)
    return batch


def make(case: Case, seed: int = 0):
    """(layer, inputs, batch) of a case; dense inputs are float64 standard normals."""
    rng = np.random.default_rng(seed + 100)
    batch = make_batch(case, seed)
    xs = [batch.sparse if spec == SPARSE else rng.standard_normal((BATCH, *spec)) for spec in case.inputs]
    names = [f"in{i}" for i in range(len(xs))]
    layer = REGISTRY[case.kind]("l", names, **case.extra, **case.options)
    return layer, xs, batch


def prepare(layer, xs, batch, values=None, *, dtype=np.float64, seed=0, training=True):
    """Build ``layer`` and pull random (or the given) parameter values: (ctx, xs in ``dtype``)."""
    layer.output_shape = layer.build([input_shape(x) for x in xs], Schema.of(batch))
    ctx = Context([layer.name], dtype=dtype, seed=seed, training=training)
    ctx.reset(batch)
    feed_tables(ctx, layer)
    if values is None:
        rng = np.random.default_rng(seed)
        values = {}
        for spec in layer.params.values():
            shape = (len(ctx.table_ids[spec.name]), spec.dim) if spec.table else spec.shape
            values[spec.name] = rng.standard_normal(shape) * 0.5
    ctx.values = {k: v.astype(dtype) for k, v in values.items()}
    return ctx, [x if isinstance(x, dict) else x.astype(dtype) for x in xs]


def run(layer, xs, batch, values=None, **kw):
    """Build, pull and run forward: (ctx, output)."""
    ctx, xs = prepare(layer, xs, batch, values, **kw)
    return ctx, layer.forward(ctx, xs)


def test_every_registered_kind_has_a_case():
    missing = set(REGISTRY) - {c.kind for c in CASES}
    assert not missing, f"layer kinds without a conformance case: {sorted(missing)}"
    assert set(BAD_VALUE) == set(REGISTRY), "every kind needs an entry in BAD_VALUE"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_gradcheck(case):
    layer, xs, batch = make(case)
    report = gradcheck(layer, xs, batch)
    for spec in layer.params.values():
        assert spec.name in report, f"parameter {spec.name} was not checked"
    dense_inputs = [x for x in xs if not isinstance(x, dict)]
    assert len([k for k in report if k.startswith("input")]) == len(dense_inputs)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_json_round_trip(case):
    layer, xs, batch = make(case)
    config = layer.get_config()
    assert config["type"] == case.kind and config["name"] == "l"
    again = json.loads(json.dumps(config))
    rebuilt = REGISTRY[again["type"]].from_config(again)
    assert rebuilt.get_config() == config
    assert type(rebuilt) is type(layer)
    ctx1, out1 = run(layer, xs, batch)
    ctx2, out2 = run(rebuilt, xs, batch, values=ctx1.values)
    assert {k: s for k, s in layer.params.items()} == {k: s for k, s in rebuilt.params.items()}
    if isinstance(out1, dict):
        assert out1.keys() == out2.keys()
    else:
        np.testing.assert_array_equal(out1, out2)
    if layer.is_loss:
        assert ctx1.loss == ctx2.loss


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_forward_contract(case):
    """float32 stays float32, the output has the built shape, backward gives one gradient per
    input with the input's shape, and the layer keeps nothing of the batch on itself."""
    layer, xs, batch = make(case)
    ctx, xs = prepare(layer, xs, batch, dtype=np.float32)
    before = {k: copy.deepcopy(v) for k, v in vars(layer).items()}
    out = layer.forward(ctx, xs)
    if isinstance(out, dict):
        assert tuple(out) == layer.output_shape.fields
        return
    want = (BATCH, *layer.output_shape)
    if layer.is_loss and layer.output_shape == (1,):
        assert out.shape in (want, (BATCH,))         # one prediction per example
        assert ctx.predictions.shape == (BATCH,) and np.isfinite(ctx.loss)
    else:
        assert out.shape == want
    assert out.dtype == np.float32, f"{case.kind} returned {out.dtype} for float32 inputs"
    gy = None if layer.is_loss else np.ones(out.shape, np.float32)
    grads = layer.backward(ctx, gy)
    assert len(grads) == len(xs)
    for x, g in zip(xs, grads):
        if g is not None:
            assert g.shape == x.shape and g.dtype == np.float32
    for name, g in ctx.param_grads.items():
        assert g.dtype == np.float32 and g.shape == ctx.values[name].shape
    after = vars(layer)
    assert after.keys() == before.keys(), f"forward/backward added {set(after) - set(before)} to the layer"
    for k in before:
        assert type(after[k]) is type(before[k]) and repr(after[k]) == repr(before[k]), f"layer.{k} changed"


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_option_is_refused(kind):
    with pytest.raises(ConfigError) as err:
        REGISTRY[kind]("l", ["x"], colour="blue")
    assert "layers.l.colour" in str(err.value) and "unknown option" in str(err.value)


@pytest.mark.parametrize("kind", [k for k in KINDS if BAD_VALUE[k]])
def test_bad_option_value_is_refused(kind):
    key, value = BAD_VALUE[kind]
    required = {"dim": 2} if kind == "fc" else {}
    with pytest.raises(ConfigError) as err:
        REGISTRY[kind]("l", ["x"], **{**required, key: value})
    assert f"layers.l.{key}" in str(err.value), str(err.value)
    assert [p for p, _ in err.value.problems] == [f"layers.l.{key}"]


def test_missing_required_option_is_refused():
    with pytest.raises(ConfigError, match=r"layers\.l\.dim: required"):
        REGISTRY["fc"]("l", ["x"])
