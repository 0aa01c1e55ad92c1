"""One conformance suite for every registered layer kind.

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
from streamtrain.ops import LAYERS, SPARSE, load_all
from streamtrain.testing import feed_tables, gradcheck, input_shape, random_batch

load_all()
BATCH = 5


@dataclass
class Case:
    """One entry of a kind's ``test_params()["cases"]`` (see ``Layer.test_params``)."""

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


def cases_of(kind: str) -> list[Case]:
    return [Case(kind, **{k: tuple(v) if k == "inputs" else v for k, v in c.items()})
            for c in LAYERS[kind].test_params()["cases"]]


KINDS = LAYERS.names()
CASES = [case for kind in KINDS for case in cases_of(kind)]
BAD_VALUE = {kind: LAYERS[kind].test_params()["bad"] for kind in KINDS}


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
    layer = LAYERS[case.kind]("l", names, **case.extra, **case.options)
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
    missing = set(LAYERS) - {c.kind for c in CASES}
    assert not missing, f"layer kinds without a conformance case: {sorted(missing)}"


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
    rebuilt = LAYERS[again["type"]].from_config(again)
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
        LAYERS[kind]("l", ["x"], colour="blue")
    assert "layers.l.colour" in str(err.value) and "unknown option" in str(err.value)


@pytest.mark.parametrize("kind", [k for k in KINDS if BAD_VALUE[k]])
def test_bad_option_value_is_refused(kind):
    key, value = BAD_VALUE[kind]
    required = {"dim": 2} if kind == "fc" else {}
    with pytest.raises(ConfigError) as err:
        LAYERS[kind]("l", ["x"], **{**required, key: value})
    assert f"layers.l.{key}" in str(err.value), str(err.value)
    assert [p for p, _ in err.value.problems] == [f"layers.l.{key}"]


def test_missing_required_option_is_refused():
    with pytest.raises(ConfigError, match=r"layers\.l\.dim: required"):
        LAYERS["fc"]("l", ["x"])


def test_a_kind_defined_here_is_discovered_and_checked():
    """Adding a layer kind is one class: the suite and the config find it through the registry."""
    from streamtrain.graph import layers_from_config
    from streamtrain.ops import Layer, Option, register

    @register
    class Scale(Layer):
        """y = x · w (one weight per feature)."""

        kind = "test_scale"
        options = {"init_scale": Option(0.5, (int, float))}

        @classmethod
        def test_params(cls):
            return {"cases": [{"inputs": [(3,)]}, {"inputs": [(2, 2)], "tag": "2d"}],
                    "bad": ("init_scale", "big")}

        def build(self, input_shapes, schema):
            self.declare("w", input_shapes[0], init="normal")
            return tuple(input_shapes[0])

        def forward(self, ctx, xs):
            ctx.saved[self.name] = xs[0]
            return xs[0] * ctx.values[self.params["w"].name]

        def backward(self, ctx, gy):
            x = ctx.saved[self.name]
            ctx.add_param_grad(self.params["w"].name, (gy * x).sum(axis=0))
            return [gy * ctx.values[self.params["w"].name]]

    try:
        assert "test_scale" in LAYERS.names()
        cases = cases_of("test_scale")
        assert [c.id for c in cases] == ["test_scale", "test_scale-2d"]
        for case in cases:
            test_gradcheck(case)
            test_json_round_trip(case)
            test_forward_contract(case)
        test_unknown_option_is_refused("test_scale")
        key, value = Scale.test_params()["bad"]
        with pytest.raises(ConfigError, match=r"layers\.l\.init_scale"):
            Scale("l", ["x"], **{key: value})
        built = layers_from_config([{"name": "s", "type": "test_scale", "inputs": ["x"]}])
        assert type(built[0]) is Scale
    finally:
        LAYERS.unregister("test_scale")
    assert "test_scale" not in LAYERS
