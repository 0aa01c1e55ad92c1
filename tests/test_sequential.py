"""Per-example (sequential) learning inside a mini-batch by the compiled engine
(``streamtrain.online``): a batch of B predicts and learns exactly as B batches of one (linear
and FM terms, every rule, both stores); which layers the engine owns. One step against its closed
form: test_sequential_steps.py."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from streamtrain.graph import Graph
from streamtrain.store.memory import MemoryStore
from streamtrain.trainer import Trainer

from .sequential_helpers import OPTIMIZERS, SCHEMA, arrays, assert_same_training, lr_layers, stream, train



@pytest.mark.parametrize("implicit,normalize", [(False, False), (True, True)])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_a_batch_learns_exactly_as_its_examples_one_by_one(opt, implicit, normalize):
    layers = lr_layers({"sequential": True, "implicit": implicit, "normalize": normalize}, OPTIMIZERS[opt])
    assert_same_training(layers, stream(), 16, 1e-9)


@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_squared_error_learns_exactly_as_its_examples_one_by_one(opt):
    """A regression (``mse``, labels around 3): the same per-example learning, linear and FM."""
    layers = lr_layers({"sequential": True}, OPTIMIZERS[opt], fm=OPTIMIZERS["adagrad"], loss="mse")
    trainer = assert_same_training(layers, stream(regression=True), 16, 1e-9)
    assert {layer.name for layer in trainer.engine.layers} == {"wide", "linear", "bias", "v"}


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("opt", sorted(OPTIMIZERS))
def test_a_softmax_over_k_logits_learns_exactly_as_its_examples_one_by_one(opt, normalize):
    """``softmax_ce`` over 3 logits: a wide part, a linear fc and a bias of 3 outputs each learn
    example by example (their rows 3 wide), the rest of the logits (an MLP) per batch."""
    layers = lr_layers({"sequential": True, "normalize": normalize}, OPTIMIZERS[opt], loss="softmax_ce", classes=3)
    trainer = assert_same_training(layers, stream(classes=3), 16, 1e-9)
    assert {layer.name for layer in trainer.engine.layers} == {"wide", "linear", "bias"}
    data = stream(64, seed=5, multivalue=("c",), classes=4)
    data.sparse["b"] = data.sparse["a"]           # a row twice in an example (summed, as one logit's)
    layers = lr_layers({"sequential": True}, OPTIMIZERS[opt], loss="softmax_ce", classes=4, cross=True)
    assert_same_training(layers, data, 32, 1e-9)
    layers = lr_layers({"sequential": True}, OPTIMIZERS[opt], loss="softmax_ce", classes=4, deep=True)
    p, _, trainer = train(layers, data, 64)
    assert {layer.name for layer in trainer.engine.layers} == {"wide", "linear", "bias"}
    assert np.isfinite(p).all() and np.allclose(p.reshape(-1, 4).sum(axis=1), 1)


@pytest.mark.parametrize("fm_opt", ["sgd", "adagrad"])
def test_fm_terms_learn_exactly_as_one_by_one(fm_opt):
    layers = lr_layers({"sequential": True}, OPTIMIZERS["ftrl-l1"], fm=OPTIMIZERS[fm_opt])
    trainer = assert_same_training(layers, stream(), 24, 1e-9)
    assert {layer.name for layer in trainer.engine.layers} == {"wide", "linear", "bias", "v"}



def test_a_row_twice_in_an_example_learns_exactly_as_one_by_one(monkeypatch):
    """Ids repeated across fields (a reader breaking "unique across fields", or a hash collision)
    put a row of a shared table twice in an example: the compiled loop is told so
    (``Occurrences.repeats``) and merges them as before; distinct fields skip those look-ups."""
    from streamtrain.batch import SparseField
    from streamtrain.online import kernels
    told = []
    learn = kernels.learn
    monkeypatch.setattr(kernels, "learn", lambda *a: (told.append((a[5].repeats, a[7].repeats)), learn(*a))[1])
    layers = lr_layers({"sequential": True}, OPTIMIZERS["ftrl"], fm=OPTIMIZERS["adagrad"])
    data = stream()
    a = data.sparse["a"]
    data.sparse["b"] = SparseField(a.ids.copy(), a.offsets.copy(), None)
    assert_same_training(layers, data, 24, 1e-9)
    assert (True, True) in told
    told.clear()
    assert_same_training(layers, stream(), 24, 1e-9)
    assert set(told) == {(False, False)}


def test_one_column_says_whether_a_present_terms_columns_share_no_row():
    from streamtrain.online.prep import one_column
    present = np.array([1, 1, 0, 1, 0, 1], np.uint8)           # 2 columns of 3 examples
    assert one_column(present, np.array([0, 1, 2, 3]), 2)
    assert not one_column(present, np.array([0, 1, 1, 2]), 2)   # row 1 in both columns
    assert not one_column(present, np.array([2, 3, 0, 1]), 2)   # disjoint, numbered otherwise: not known
    assert one_column(np.zeros(0, np.uint8), np.zeros(0, np.int64), 0)

def test_crossed_multivalued_wide_part_learns_exactly_as_one_by_one():
    layers = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"], cross=True, fm=OPTIMIZERS["adagrad"])
    assert_same_training(layers, stream(64, seed=5, multivalue=("c",)), 32, 1e-9)


def test_single_and_multivalued_parts_side_by_side_learn_exactly_as_one_by_one():
    """A wide part over single-valued fields (its grid filled from the layout) next to one over
    a multi-valued field (its occurrences sorted by example), and FMs over both kinds."""
    adagrad = OPTIMIZERS["adagrad"]
    layers = [
        {"name": "single", "type": "sparse_input", "fields": ["a", "b"]},
        {"name": "multi", "type": "sparse_input", "fields": ["c"]},
        {"name": "dense", "type": "dense_input"},
        {"name": "w1", "type": "embedding", "inputs": ["single"], "dim": 1, "shared": True, "init": "zeros",
         "optimizer": OPTIMIZERS["ftrl-l1"]},
        {"name": "w2", "type": "embedding", "inputs": ["multi"], "dim": 1, "init": "zeros", "optimizer": adagrad},
        {"name": "s1", "type": "sum_pooling", "inputs": ["w1"]},
        {"name": "s2", "type": "sum_pooling", "inputs": ["w2"]},
        {"name": "linear", "type": "fc", "inputs": ["dense"], "dim": 1, "init": "zeros", "optimizer": adagrad},
        {"name": "v1", "type": "embedding", "inputs": ["single"], "dim": 3, "shared": True, "init_scale": 0.3,
         "optimizer": adagrad},
        {"name": "fm1", "type": "fm", "inputs": ["v1"], "reduce": True},
        {"name": "v2", "type": "embedding", "inputs": ["multi"], "dim": 3, "init_scale": 0.3, "optimizer": adagrad},
        {"name": "fm2", "type": "fm", "inputs": ["v2"], "reduce": True},
        {"name": "logit", "type": "add", "inputs": ["s1", "s2", "linear", "fm1", "fm2"]},
        {"name": "loss", "type": "logloss", "inputs": ["logit"], "sequential": True},
    ]
    trainer = assert_same_training(layers, stream(64, seed=7, multivalue=("c",), values=True), 32, 1e-9)
    assert {layer.name for layer in trainer.engine.layers} == {"w1", "w2", "linear", "v1", "v2"}


@pytest.mark.parametrize("fm_opt", ["adagrad", "ftrl"])
def test_rules_mixed_across_the_owned_layers_learn_exactly_as_one_by_one(fm_opt):
    """A rule per layer (the kernel's general path, not its one-rule loops), FM rows repeated
    within an example (a multivalued field: the summed-gradient path)."""
    layers = lr_layers({"sequential": True}, OPTIMIZERS["ftrl-l1"], fm=OPTIMIZERS[fm_opt])
    for layer in layers:
        if layer["name"] in ("linear", "bias"):
            layer["optimizer"] = OPTIMIZERS["sgd" if layer["name"] == "linear" else "adagrad"]
    assert_same_training(layers, stream(64, seed=7, multivalue=("a", "c")), 16, 1e-9)


def test_a_table_per_field_learns_exactly_as_one_by_one():
    layers = lr_layers({"sequential": True}, OPTIMIZERS["ftrl-l1"], fm=OPTIMIZERS["adagrad"])
    for layer in layers:
        if layer["name"] in ("wide", "v"):
            layer["shared"] = False
    trainer = assert_same_training(layers, stream(), 16, 1e-9)
    assert {layer.name for layer in trainer.engine.layers} == {"wide", "linear", "bias", "v"}


@pytest.mark.parametrize("opt, loss", [("adagrad", "logloss"), ("ftrl-l1", "logloss"), ("ftrl-l1", "mse"),
                                       ("ftrl-l1", "softmax_ce")])
def test_redis_store_trains_a_batch_as_its_examples_one_by_one(opt, loss, redis_url, redis_namespace):
    """The same through a real redis-server: one combined push per row. Its rows are float32, so
    a batch of one rounds after every example and a batch of 16 after 16: 1e-6, relative."""
    from streamtrain.store.redis_store import RedisStore

    def store(suffix):
        return RedisStore({"urls": [redis_url], "namespace": redis_namespace + suffix})

    stores = [store("one"), store("batch")]
    try:
        classes = 3 if loss == "softmax_ce" else 1      # (K logits: rows K wide, no FM)
        layers = lr_layers({"sequential": True}, OPTIMIZERS[opt], fm=None if classes > 1 else OPTIMIZERS["adagrad"],
                           loss=loss, classes=classes)
        assert_same_training(layers, stream(48, regression=loss == "mse", classes=classes if classes > 1 else None),
                             16, 1e-6, 1e-6,
                             one={"store": stores[0], "dtype": np.float32},
                             batch={"store": stores[1], "dtype": np.float32})
    finally:
        for s in stores:
            s.close()


class GradientMemoryStore(MemoryStore):
    """The memory store without ``assigns``: the engine pushes a combined gradient to it, which
    it steps by (the path every store without the capability takes)."""

    assigns = False


@pytest.mark.parametrize("opt", ["sgd", "adagrad", "ftrl-l1"])
def test_memory_store_assigns_what_a_combined_gradient_would_step_to(opt, tmp_path):
    """The memory store ``assigns``: the engine's final rows and slots are written as they are,
    not re-stepped from one combined gradient. In float64 the two agree to the combine's
    round-off; in float32 an assigned value is the float64 one rounded once, the gradient path
    rounds the gradient, the squares and every operation of the step: they differ by a few
    float32 ulps (6 batches: within rtol 2e-6 + atol 1e-7; the largest difference is one ulp
    of an accumulator ``n`` near 100). The counters are the same; a checkpoint holds the
    assigned rows."""
    from streamtrain import checkpoint
    layers = lr_layers({"sequential": True}, OPTIMIZERS[opt], fm=OPTIMIZERS["adagrad"])
    data = stream(96)
    for dtype, rtol, atol in ((np.float64, 1e-12, 1e-12), (np.float32, 2e-6, 1e-7)):
        pa, snap_a, trainer = train(layers, data, 16, dtype=dtype)
        assert trainer.engine.assign
        pg, snap_g, trainer_g = train(layers, data, 16, dtype=dtype, store=GradientMemoryStore(dtype=dtype))
        assert not trainer_g.engine.assign
        np.testing.assert_allclose(pa, pg, rtol=rtol, atol=atol)
        a, g = arrays(snap_a), arrays(snap_g)
        assert sorted(a) == sorted(g) and {"wide.table.value", "bias.b.value", "v.table.n"} <= set(a)
        for name in a:
            np.testing.assert_allclose(a[name], g[name], rtol=rtol, atol=atol, err_msg=name)
        assert trainer.store.stats.rows_pushed == trainer_g.store.stats.rows_pushed > 0
        assert trainer.store.stats.table_rows == trainer_g.store.stats.table_rows
    checkpoint.write(tmp_path, snap_a, step=6)
    restored = MemoryStore(dtype=np.float32)
    restored.declare(trainer.graph.params, {"type": "adagrad", "lr": 0.1})
    restored.restore(checkpoint.read(tmp_path)[0])
    back = arrays(restored.snapshot())
    for name, value in a.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    assert np.abs(a["v.table.n"]).min() > 0 and np.abs(a["wide.table.value"]).max() > 0


def test_a_softmax_through_a_combined_gradient_steps_to_what_the_memory_store_assigns():
    """``softmax_ce``'s rows, 3 wide, pushed as one combined gradient per row (a store without
    ``assigns``, as Redis) step to the values the memory store is handed."""
    layers = lr_layers({"sequential": True}, OPTIMIZERS["ftrl-l1"], loss="softmax_ce", classes=3)
    pa, snap_a, _ = train(layers, stream(96, classes=3), 16)
    pg, snap_g, trainer = train(layers, stream(96, classes=3), 16, store=GradientMemoryStore(dtype=np.float64))
    assert not trainer.engine.assign
    np.testing.assert_allclose(pa, pg, rtol=1e-12, atol=1e-12)
    a, g = arrays(snap_a), arrays(snap_g)
    assert sorted(a) == sorted(g) and a["wide.table.value"].shape[1] == 3
    for name in a:
        np.testing.assert_allclose(a[name], g[name], rtol=1e-12, atol=1e-12, err_msg=name)


# ---- which layers, and the rest of the model ------------------------------------------------

def test_which_layers_learn_per_example():
    layers = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"], deep=True, fm=OPTIMIZERS["sgd"])
    graph = Graph.from_config(layers, SCHEMA)
    store = MemoryStore()
    store.declare(graph.params, {"type": "adagrad"})
    trainer = Trainer(graph, store)
    # deep_out is linear in its own weights but trained by Adam, which has no kernel rule
    assert [layer.name for layer in trainer.engine.layers] == ["wide", "linear", "bias", "v"]
    assert trainer.engine.skip == {"wide", "wide_sum", "linear", "bias", "v", "fm"}

    def owned(cfg):
        g = Graph.from_config(cfg, SCHEMA)
        s = MemoryStore()
        s.declare(g.params, {"type": "adagrad"})
        return {layer.name for layer in Trainer(g, s).engine.layers}

    # a layer whose parameter another layer shares, or one consumed twice, is left to the batch
    shared = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"])
    shared.insert(-2, {"name": "bias2", "type": "bias", "param": "bias"})
    shared[-2]["inputs"] = ["wide_sum", "linear", "bias", "bias2"]
    assert "bias" not in owned(shared)
    twice = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"])
    twice[-2]["inputs"] = ["wide_sum", "linear", "bias", "bias"]
    assert "bias" not in owned(twice)
    # an FM embedding that also feeds an MLP (DeepFM) learns per batch
    deepfm = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"], fm=OPTIMIZERS["sgd"])
    deepfm[-2:-2] = [{"name": "mlp", "type": "fc", "inputs": ["v"], "dim": 1, "activation": "tanh"}]
    deepfm[-2]["inputs"] = ["wide_sum", "linear", "bias", "fm", "mlp"]
    assert owned(deepfm) == {"wide", "linear", "bias"}
    plain = Graph.from_config(lr_layers({}, OPTIMIZERS["sgd"]), SCHEMA)
    s = MemoryStore()
    s.declare(plain.params, {"type": "sgd"})
    assert Trainer(plain, s).engine is None


def test_without_sequential_a_batch_predicts_with_the_parameters_before_it():
    p16, _, _ = train(lr_layers({}, OPTIMIZERS["sgd"]), stream(), 16)
    # zero-initialised linear model: the whole first batch is predicted at 0.5
    np.testing.assert_allclose(p16[:16], 0.5)
    seq, _, _ = train(lr_layers({"sequential": True}, OPTIMIZERS["sgd"]), stream(), 16)
    assert seq[0] == pytest.approx(0.5) and np.abs(seq[1:16] - 0.5).max() > 0.01


@pytest.mark.parametrize("loss", ["logloss", "mse"])
def test_deep_parts_still_train_and_the_step_is_finite(loss):
    layers = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"], deep=True, fm=OPTIMIZERS["adagrad"], loss=loss)
    p, snap, trainer = train(layers, stream(128, seed=9, regression=loss == "mse"), 32, dtype=np.float32)
    assert np.isfinite(p).all() and trainer.nonfinite == 0
    assert np.abs(snap.dense["hidden.W"]["m"]).max() > 0          # Adam saw gradients


def test_evaluation_predicts_from_the_parameters():
    layers = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"])
    data = stream(32)
    _, _, trainer = train(layers, data, 32)
    graph, store = trainer.graph, trainer.store
    ctx = graph.context(training=False, dtype=np.float64)
    graph.feed(ctx, data)
    dense, tables = graph.needs(ctx)
    ctx.values = store.pull(dense, tables, create=False)
    graph.forward(ctx)
    z = np.log(ctx.predictions / (1 - ctx.predictions))
    wide = store.pull([], {"wide.table": ctx.table_ids["wide.table"]}, create=False)["wide.table"][:, 0]
    pos = ctx.table_pos[("wide", "wide.table")]
    ex = np.concatenate([np.repeat(np.arange(32), np.diff(data.sparse[f].offsets)) for f in SCHEMA.sparse])
    want = (np.bincount(ex, wide[pos], minlength=32)
            + data.dense @ store.dense["linear.W"][:, 0] + store.dense["linear.b"][0] + store.dense["bias.b"][0])
    np.testing.assert_allclose(z, want, atol=1e-6)


@pytest.mark.parametrize("deep", [False, True])
def test_training_leaves_out_the_forward_of_the_terms_the_engine_computes(deep):
    """The layers the engine learns and the sums between them and the logit are not computed
    by the forward pass in training (the engine computes their terms); a batch's first
    prediction is still the model's before it."""
    layers = lr_layers({"sequential": True}, OPTIMIZERS["adagrad"], deep=deep, fm=OPTIMIZERS["adagrad"])
    data = stream(8)
    graph = Graph.from_config(layers, SCHEMA)
    store = MemoryStore(dtype=np.float64)
    store.declare(graph.params, {"type": "adagrad", "lr": 0.1})
    for _ in range(2):                              # parameters away from their initial values
        Trainer(graph, store, dtype=np.float64).step(stream(32, seed=11))
    ctx = graph.context(training=False, dtype=np.float64)
    graph.feed(ctx, data)
    dense, tables = graph.needs(ctx)
    ctx.values = store.pull(dense, tables)
    graph.forward(ctx)
    trainer = Trainer(graph, store, dtype=np.float64)
    owned = {"fm", "v", "wide", "wide_sum", "linear", "bias"} | (set() if deep else {"logit"})
    assert trainer.engine.skip == owned
    got = trainer.step(data).predictions
    assert got[0] == pytest.approx(ctx.predictions[0], abs=1e-12)
    assert not owned & set(trainer.ctx.saved)


def test_sequential_needs_sum_reduction():
    from streamtrain.errors import ConfigError
    layers = lr_layers({"sequential": True, "reduction": "mean"}, OPTIMIZERS["sgd"])
    with pytest.raises(ConfigError, match="reduction 'sum'"):
        Graph.from_config(layers, SCHEMA)


def test_job_names_the_layers_it_learns_per_example(caplog):
    import logging
    from streamtrain import config as cfgmod
    from streamtrain.job import Job
    base = {"reader": {"type": "synthetic", "examples": 512, "fields": 3}, "batch_size": 256,
            "metrics": {"enabled": False}}
    with caplog.at_level(logging.INFO, logger="streamtrain"):
        Job(cfgmod.validate(cfgmod.merge(cfgmod.defaults(), {**base, "layers": lr_layers({"sequential": True}, OPTIMIZERS["ftrl"])}))).run()
    assert "per-example terms (sequential loss 'loss'): wide, linear, bias" in caplog.text
    adam = {"type": "adam", "lr": 0.01}
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="streamtrain"):
        Job(cfgmod.validate(cfgmod.merge(cfgmod.defaults(), {**base, "layers": lr_layers({"sequential": True}, adam)}))).run()
    assert "is sequential but no layer qualifies" in caplog.text


def test_a_warm_start_does_not_recompile(capsys):
    """numba's cache: once compiled (here, if no earlier run did), a new process loads the kernels."""
    from streamtrain.online import warm
    assert warm.main() == 0 and "compiled and cached" in capsys.readouterr().out
    code = ("from streamtrain.online import kernels, prep, warm; from streamtrain.optim import _rows; "
            "from streamtrain import _progressive_kernels as pk; warm.main(); "
            "fs = (kernels.learn, kernels.combine, kernels.by_example, prep.put_present, _rows.adam_many, pk.binary_pass); "
            "print(sum(sum(f.stats.cache_misses.values()) for f in fs), "
            "min(sum(f.stats.cache_hits.values()) for f in (fs[0], *fs[3:])))")   # (called from Python)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    misses, fewest_hits = run.stdout.split()[-2:]
    assert misses == "0" and int(fewest_hits) >= 1, run.stdout + run.stderr   # none compiled, each loaded




def test_a_rule_the_per_example_core_cannot_run_is_refused_naming_the_layer():
    """An optimizer with a per-coordinate ``rule`` but no compiled per-example update, on a layer
    the sequential loss would learn example by example, is refused when the trainer starts (not
    silently trained per batch); the error names the layer's optimizer path and the rule."""
    from streamtrain.errors import ConfigError
    from streamtrain.optim import OPTIMIZERS as REGISTRY, Optimizer, register
    from streamtrain.schema import NUMBER, Option

    def halved(h, w, n, z, g, sq):
        return w - 0.5 * h[0] * g, n, z

    @register
    class HalfSGD(Optimizer):
        kind = "test_halfsgd"
        options = {"lr": Option(0.1, NUMBER)}
        rule = staticmethod(halved)

        def step(self, w, g, state, sq=None):
            w[...], _, _ = halved((self.lr,), w, None, None, g, None)

    try:
        layers = lr_layers({"sequential": True}, OPTIMIZERS["sgd"])
        next(layer for layer in layers if layer["name"] == "bias")["optimizer"] = {"type": "test_halfsgd"}
        graph = Graph.from_config(layers, SCHEMA)
        store = MemoryStore()
        store.declare(graph.params, OPTIMIZERS["sgd"])
        with pytest.raises(ConfigError) as err:
            Trainer(graph, store)
        assert err.value.problems[0][0] == "layers.bias.optimizer"
        assert "layer 'bias': rule 'test_halfsgd' has no update in the compiled per-example core" \
            in err.value.problems[0][1]
    finally:
        REGISTRY.unregister("test_halfsgd")
