"""Every update rule against a hand-computed step, dense and sparse (only touched rows change)."""
import json
import math

import numpy as np
import pytest

from streamtrain.context import Gradients
from streamtrain.errors import ConfigError
from streamtrain.optim import OPTIMIZERS, make_optimizer
from streamtrain.params import ParamSpec
from streamtrain.store.memory import MemoryStore


def two_steps(kind, hyper, w0, g1, g2):
    opt = make_optimizer({"type": kind, **hyper})
    w = np.array(w0, np.float64)
    state = opt.init_state(w.shape, table=False, dtype=np.float64)
    opt.step(w, np.array(g1, np.float64), state)
    w1 = w.copy()
    opt.step(w, np.array(g2, np.float64), state)
    return w1, w


def test_sgd_closed_form():
    w1, w2 = two_steps("sgd", {"lr": 0.1}, [1.0, -2.0], [0.5, 1.0], [1.0, -1.0])
    assert np.allclose(w1, [0.95, -2.1])
    assert np.allclose(w2, [0.85, -2.0])


def test_momentum_closed_form():
    w1, w2 = two_steps("momentum", {"lr": 0.1, "momentum": 0.5}, [1.0], [2.0], [4.0])
    # v1 = 2, w1 = 1 - 0.2 = 0.8; v2 = 0.5*2 + 4 = 5, w2 = 0.8 - 0.5 = 0.3
    assert np.allclose(w1, [0.8]) and np.allclose(w2, [0.3])


def test_adagrad_closed_form():
    w1, w2 = two_steps("adagrad", {"lr": 0.1, "eps": 0.0}, [1.0], [3.0], [4.0])
    # n1 = 9: w1 = 1 - 0.1*3/3 = 0.9; n2 = 25: w2 = 0.9 - 0.1*4/5 = 0.82
    assert np.allclose(w1, [0.9]) and np.allclose(w2, [0.82])


def test_adagrad_initial_accumulator():
    w1, _ = two_steps("adagrad", {"lr": 1.0, "eps": 0.0, "initial_accumulator": 16.0}, [0.0], [3.0], [0.0])
    assert np.allclose(w1, [-3.0 / 5.0])


def test_adam_closed_form():
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8
    w1, w2 = two_steps("adam", {"lr": lr, "beta1": b1, "beta2": b2, "eps": eps}, [0.5], [2.0], [-1.0])
    # step 1: m_hat = g, v_hat = g^2 -> w moves by lr * sign(g)
    assert np.allclose(w1, [0.5 - lr * 2.0 / (2.0 + eps)])
    m = (1 - b1) * 2.0 * b1 + (1 - b1) * -1.0
    v = (1 - b2) * 4.0 * b2 + (1 - b2) * 1.0
    m_hat, v_hat = m / (1 - b1 ** 2), v / (1 - b2 ** 2)
    assert np.allclose(w2, w1 - lr * m_hat / (math.sqrt(v_hat) + eps))


def test_ftrl_closed_form():
    a, b, l1, l2 = 0.5, 1.0, 0.1, 0.2
    w1, w2 = two_steps("ftrl", {"alpha": a, "beta": b, "l1": l1, "l2": l2}, [0.0], [1.0], [0.05])
    # z1 = 1 (sigma*w = 0 since w0 = 0), n1 = 1: w1 = -(1 - 0.1) / ((1 + 1)/0.5 + 0.2)
    expect1 = -(1 - l1) / ((b + 1) / a + l2)
    assert np.allclose(w1, [expect1])
    sigma = (math.sqrt(1 + 0.0025) - 1) / a
    z2 = 1 + 0.05 - sigma * expect1
    n2 = 1.0025
    expect2 = -(z2 - l1) / ((b + math.sqrt(n2)) / a + l2)
    assert np.allclose(w2, [expect2])


def test_ftrl_l1_gives_exact_zeros():
    w1, _ = two_steps("ftrl", {"alpha": 0.1, "l1": 5.0}, [0.0, 0.0], [1.0, -6.0], [0.0, 0.0])
    assert w1[0] == 0.0 and w1[1] > 0


KINDS = OPTIMIZERS.names()


@pytest.mark.parametrize("kind", KINDS)
def test_sparse_rows_only_touched_change(kind):
    """Per-row lazy state: a row's step depends only on the pushes that touched it."""
    spec = ParamSpec("emb.table", (3,), table=True, init="normal", scale=0.1)
    store = MemoryStore(dtype=np.float64)
    store.declare({spec.name: spec}, {"type": kind, **OPTIMIZERS[kind].test_params()})
    ids_a = np.array([1, 5, 9], np.uint64)
    before = store.pull([], {spec.name: ids_a})[spec.name].copy()
    g = np.ones((2, 3))
    store.push(Gradients(tables={spec.name: (np.array([1, 9], np.uint64), g)}))
    after = store.pull([], {spec.name: ids_a})[spec.name]
    assert np.array_equal(after[1], before[1])          # id 5 untouched
    assert not np.allclose(after[0], before[0])
    # row 9 pushed once, like a fresh dense parameter of the same initial value stepped once
    opt = make_optimizer({"type": kind, **OPTIMIZERS[kind].test_params()})
    w = before[2].copy()[None, :]
    state = opt.init_state(w.shape, table=True, dtype=np.float64)
    opt.step(w, g[1:], state)
    assert np.allclose(after[2], w[0])


def test_adam_step_count_is_per_row():
    spec = ParamSpec("t.table", (1,), table=True, init="zeros")
    store = MemoryStore(dtype=np.float64)
    store.declare({spec.name: spec}, {"type": "adam", "lr": 0.1})
    for _ in range(5):   # id 1 seen five times
        store.push(Gradients(tables={spec.name: (np.array([1], np.uint64), np.ones((1, 1)))}))
    store.push(Gradients(tables={spec.name: (np.array([2], np.uint64), np.ones((1, 1)))}))
    rows = store.pull([], {spec.name: np.array([1, 2], np.uint64)})[spec.name]
    # a first step of Adam moves by lr whatever the gradient scale: id 2's bias correction used t=1
    assert np.isclose(rows[1, 0], -0.1, atol=1e-6)
    assert np.allclose(store.tables[spec.name].state["t"][:2, 0], [5, 1])


@pytest.mark.parametrize("kind", KINDS)
def test_config_round_trip(kind):
    opt = make_optimizer({"type": kind, **OPTIMIZERS[kind].test_params()})
    again = make_optimizer(json.loads(json.dumps(opt.get_config())))
    assert again.get_config() == opt.get_config()


def test_bad_optimizer_configs_name_the_path():
    with pytest.raises(ConfigError, match=r"default_optimizer.type: unknown optimizer 'adamw'"):
        make_optimizer({"type": "adamw"}, where="default_optimizer")
    with pytest.raises(ConfigError, match=r"layers\[2\].optimizer.momentum: unknown key for optimizer 'sgd' \(known: lr\)"):
        make_optimizer({"type": "sgd", "momentum": 0.9}, where="layers[2].optimizer")
    with pytest.raises(ConfigError, match=r"lr: expected int/float, got str 'fast'"):
        make_optimizer({"type": "sgd", "lr": "fast"})
    with pytest.raises(ConfigError, match=r"lr: must be >= 0, got -1"):
        make_optimizer({"type": "sgd", "lr": -1})


@pytest.mark.parametrize("kind", [k for k in KINDS
                                  if OPTIMIZERS[k](**OPTIMIZERS[k].test_params()).kernel_rule() is not None])
def test_the_compiled_per_example_step_is_the_rule(kind):
    """A rule with a ``kernel_rule`` has the same step in ``streamtrain.online.kernels``: one
    coordinate's ``_step`` and the linear slots' ``_prepare``/``_apply`` equal ``step``, and
    ``combine`` finds the one gradient and squares whose ``step`` lands on several steps' end."""
    from streamtrain.online import kernels
    opt = make_optimizer({"type": kind, **OPTIMIZERS[kind].test_params()})
    code, h = opt.kernel_rule()
    hyper = np.zeros(4)
    hyper[:len(h)] = h
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal(4)
    state = opt.init_state(w0.shape, table=False, dtype=np.float64)
    for _ in range(3):                               # a state that has seen some gradients
        opt.step(w0, rng.standard_normal(4) * 2, state)
    n0, z0 = state.get("n", np.zeros(4)).copy(), state.get("z", np.zeros(4)).copy()
    g, sq = rng.standard_normal(4), rng.uniform(0.5, 2.0, 4)
    w, st = w0.copy(), {k: v.copy() for k, v in state.items()}
    opt.step(w, g, st, sq=sq if opt.squares else None)
    for i in range(4):
        q = sq[i] if opt.squares else g[i] ** 2
        np.testing.assert_allclose(kernels._step(code, hyper, w0[i], n0[i], z0[i], g[i], q)[0], w[i], rtol=1e-12)
        root, rate = kernels._prepare(code, hyper, n0[i], q)
        got = kernels._apply(code, hyper, w0[i], n0[i], z0[i], np.sqrt(n0[i]), root, rate, g[i], q)
        np.testing.assert_allclose(got[0], w[i], rtol=1e-12)
    # three more steps, then the single step that replaces all four
    for _ in range(3):
        opt.step(w, rng.standard_normal(4), st, sq=rng.uniform(0.5, 2.0, 4) if opt.squares else None)
    n1, z1 = st.get("n", np.zeros(4)), st.get("z", np.zeros(4))
    col = (lambda a: np.asarray(a, np.float64).reshape(4, 1))
    g1, sq1 = kernels.combine(np.array([code]), hyper[None], np.zeros(4, np.int64), col(w0), col(n0), col(z0),
                              col(w), col(n1), col(z1))
    once, st0 = w0.copy(), {k: v.copy() for k, v in state.items()}
    opt.step(once, g1[:, 0], st0, sq=sq1[:, 0] if opt.squares else None)
    np.testing.assert_allclose(once, w, rtol=1e-10, atol=1e-12)
    for k in st0:
        np.testing.assert_allclose(st0[k], st[k], rtol=1e-10, atol=1e-12)


def test_an_optimizer_defined_here_is_discovered_and_checked():
    """Adding a rule is one class: config, stores and this suite find it through the registry."""
    from streamtrain.optim import Optimizer, register
    from streamtrain.schema import NUMBER, Option

    @register
    class SignSGD(Optimizer):
        """w -= lr · sign(g)"""

        kind = "test_signsgd"
        options = {"lr": Option(0.01, NUMBER)}

        @classmethod
        def test_params(cls):
            return {"lr": 0.25}

        def step(self, w, g, state, sq=None):
            w -= self.lr * np.sign(g)

    try:
        assert "test_signsgd" in KINDS + OPTIMIZERS.names()
        w1, w2 = two_steps("test_signsgd", {"lr": 0.25}, [1.0, -2.0], [0.5, -3.0], [-1.0, 0.0])
        assert np.allclose(w1, [0.75, -1.75]) and np.allclose(w2, [1.0, -1.75])
        test_sparse_rows_only_touched_change("test_signsgd")
        test_config_round_trip("test_signsgd")
        from streamtrain import config as cfgmod
        found = cfgmod.problems(cfgmod.with_defaults(cfgmod.SCHEMA, {
            "default_optimizer": {"type": "test_signsgd", "lr": 0.1, "mu": 1},
            "layers": [{"name": "x", "type": "dense_input"}, {"name": "l", "type": "mse", "inputs": ["x"]}]}))
        assert found == [("default_optimizer.mu", "unknown key for optimizer 'test_signsgd' (known: lr)")]
    finally:
        OPTIMIZERS.unregister("test_signsgd")
    with pytest.raises(ConfigError, match="unknown optimizer 'test_signsgd'"):
        make_optimizer({"type": "test_signsgd"})


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("with_sq", [False, True])
def test_compiled_row_update_is_the_rule(kind, dtype, with_sq):
    """``step_rows`` (where a rule has one, ``optim/_rows.py``) on a table in place gives the
    same numbers as gathering the rows, ``step`` and scattering them back."""
    opt = make_optimizer({"type": kind, **OPTIMIZERS[kind].test_params()})
    rng = np.random.default_rng(5)
    weights = rng.standard_normal((9, 3)).astype(dtype)
    state = opt.init_state(weights.shape, table=True, dtype=dtype)
    for k in state:
        state[k] += rng.uniform(0.0, 2.0, state[k].shape).astype(dtype)
    rows = np.array([7, 2, 4, 0], np.int64)
    g = (rng.standard_normal((4, 3)) * 0.5).astype(dtype)
    g[1, 2] = 0.0
    sq = (g * g * rng.uniform(1.0, 3.0, g.shape)).astype(dtype) if with_sq else None
    want_w, want_state = weights.copy(), {k: a.copy() for k, a in state.items()}
    w, st = want_w[rows], {k: a[rows] for k, a in want_state.items()}
    opt.step(w, g, st, sq)
    want_w[rows] = w
    for k in st:
        want_state[k][rows] = st[k]
    if not opt.step_rows(weights, state, rows, g, sq):
        assert kind not in ("adagrad", "ftrl")          # these two have compiled row updates
        return
    assert np.array_equal(weights, want_w)
    for k in state:
        assert np.array_equal(state[k], want_state[k])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_dense_adam_is_the_numpy_arithmetic(dtype):
    """Adam on a dense parameter runs compiled (``optim/_rows.py``): the same numbers as its
    numpy expression (the table path, one step count per row), step after step."""
    opt = make_optimizer({"type": "adam", "lr": 0.01})
    rng = np.random.default_rng(8)
    w = rng.standard_normal((5, 3)).astype(dtype)
    state = opt.init_state(w.shape, table=False, dtype=dtype)
    rows = w.copy()                                   # the same numbers as a 5-row table
    rstate = opt.init_state(w.shape, table=True, dtype=dtype)
    for _ in range(4):
        g = rng.standard_normal(w.shape).astype(dtype)
        opt.step(w, g, state)
        opt.step(rows, g, rstate)
    assert np.array_equal(w, rows)
    assert np.array_equal(state["m"], rstate["m"]) and np.array_equal(state["v"], rstate["v"])
    assert state["t"][0] == 4


@pytest.mark.parametrize("kind,hyper", [("adagrad", {"lr": 0.1, "eps": 0.0}), ("adam", {"lr": 0.1, "eps": 0.0}),
                                        ("ftrl", {"alpha": 0.0})])
def test_compiled_updates_divide_by_zero_as_numpy_does(kind, hyper):
    """A zero denominator (eps 0 and a zero gradient on a fresh row, alpha 0) gives the numpy
    rule's inf / NaN in the compiled updates too, not an exception inside the step."""
    opt = make_optimizer({"type": kind, **hyper})
    g = np.zeros((4, 2), np.float32)
    g[0, 0] = 1.0
    weights = np.ones((4, 2), np.float32)
    # the numpy arithmetic: a table's rows (Adam: one step count per row, the numpy path)
    want, want_state = weights.copy(), opt.init_state((4, 2), table=True, dtype=np.float32)
    with np.errstate(all="ignore"):
        opt.step(want, g, want_state)
        if kind == "adam":                                   # a dense parameter: the compiled pass
            state = opt.init_state((4, 2), table=False, dtype=np.float32)
            opt.step(weights, g, state)
        else:                                                # a table's rows in place, compiled
            assert opt.step_rows(weights, opt.init_state((4, 2), table=True, dtype=np.float32),
                                 np.arange(4), g)
    np.testing.assert_array_equal(weights, want)
    assert not np.isfinite(want).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_dense_adam_is_each_step(dtype):
    """``step_dense`` takes the dense Adam parameters of one hyperparameter set in compiled passes
    of several (``_rows.adam_many``): the same numbers as each one's own ``step``, step counts
    that differ included, more parameters than one pass takes, a different ``lr`` and a
    parameter with squares (stepped alone) beside them."""
    from streamtrain.optim import _rows
    from streamtrain.optim.base import step_dense
    rng = np.random.default_rng(11)
    shapes = [(7, 3), (3,), (4, 1), (1,), (2, 5)] * 2
    opts = [make_optimizer({"type": "adam", "lr": 0.01 if i % 4 else 0.05}) for i in range(len(shapes))]
    assert len(shapes) > _rows.FUSED
    fused = [rng.standard_normal(s).astype(dtype) for s in shapes]
    alone = [w.copy() for w in fused]
    states = [[o.init_state(s, table=False, dtype=dtype) for o, s in zip(opts, shapes)] for _ in range(2)]
    for st in states:
        st[2]["t"] += 5                           # a parameter further on than the others
    for _ in range(3):
        grads = [rng.standard_normal(s).astype(dtype) for s in shapes]
        step_dense([(o, w, g, st, None) for o, w, g, st in zip(opts, fused, grads, states[0])])
        for o, w, g, st in zip(opts, alone, grads, states[1]):
            o.step(w, g, st)
    for i in range(len(shapes)):
        assert np.array_equal(fused[i], alone[i])
        for k in ("m", "v", "t"):
            assert np.array_equal(states[0][i][k], states[1][i][k])
    assert states[0][2]["t"][0] == 8 and states[0][0]["t"][0] == 3


def test_fused_dense_adam_steps_a_replaced_array():
    """The compiled pass keeps the flat weights and slots of a set of parameters between steps
    (``_rows._held``); a weight or slot array replaced by a new one between two steps is the one
    stepped next, and its numbers are each parameter's own ``step``'s."""
    from streamtrain.optim.base import step_dense
    rng = np.random.default_rng(5)
    opt = make_optimizer({"type": "adam", "lr": 0.01})
    shapes = [(6, 2), (2,)]
    ws = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    sts = [opt.init_state(s, table=False, dtype=np.float32) for s in shapes]
    ref_w = [w.copy() for w in ws]
    ref_st = [{k: a.copy() for k, a in st.items()} for st in sts]
    for step in range(3):
        if step == 1:
            ws[0] = ws[0].copy()                  # new arrays, same values
            sts[1]["m"] = sts[1]["m"].copy()
        grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        step_dense([(opt, w, g, st, None) for w, g, st in zip(ws, grads, sts)])
        for w, g, st in zip(ref_w, grads, ref_st):
            opt.step(w, g, st)
    for w, st, rw, rst in zip(ws, sts, ref_w, ref_st):
        assert np.array_equal(w, rw)
        assert all(np.array_equal(st[k], rst[k]) for k in ("m", "v", "t"))
    assert sts[0]["t"][0] == 3


def test_ftrl_carry_keeps_the_weights_copied_from_another_rate():
    """An AutoML challenger of another FTRL rate starts from its champion's (w, z, n): without
    ``carry`` its next step recomputes every weight from z with its own alpha (half the rate,
    half the weights); with it, a step by a zero gradient leaves the copied weights as they are,
    in both stores' copy (memory here; the base copy through a snapshot)."""
    def ftrl(alpha):
        return {"type": "ftrl", "alpha": alpha, "beta": 1.0, "l1": 0.1, "l2": 0.5}
    fast, slow = make_optimizer(ftrl(1.4)), make_optimizer(ftrl(0.7))
    w = np.zeros(3)
    state = fast.init_state(w.shape, table=False, dtype=np.float64)
    for g in ([0.5, -1.0, 0.05], [0.7, -0.2, 0.01]):
        fast.step(w, np.array(g), state)
    assert w[2] == 0.0 and abs(state["z"][2]) <= 0.1           # held at zero by L1
    copied = {k: v.copy() for k, v in state.items()}
    naive = w.copy()
    slow.step(naive, np.zeros(3), {k: v.copy() for k, v in copied.items()})
    slow.carry(fast, w, copied)
    kept = w.copy()
    slow.step(kept, np.zeros(3), copied)
    assert np.allclose(kept, w) and copied["z"][2] == state["z"][2]
    # without it: 0.58 and 0.57 of each weight (the half of the rate, less with L2)
    assert [round(float(r), 4) for r in naive[:2] / w[:2]] == [0.5792, 0.5738]

    specs = {n: ParamSpec(n, (2,), table=True, init="zeros", optimizer=ftrl(a)) for n, a in (("a.t", 1.4), ("b.t", 0.7))}
    store = MemoryStore(dtype=np.float64)
    store.declare(specs, {"type": "sgd", "lr": 0.1})
    ids = np.array([3, 8], np.uint64)
    store.push(Gradients(tables={"a.t": (ids, np.array([[0.5, -1.0], [0.3, 0.2]]))}))
    store.copy({"a.t": "b.t"}, carry=True)
    before = store.pull([], {"b.t": ids})["b.t"].copy()
    assert np.allclose(before, store.pull([], {"a.t": ids})["a.t"])
    store.push(Gradients(tables={"b.t": (ids, np.zeros((2, 2)))}))
    assert np.allclose(store.pull([], {"b.t": ids})["b.t"], before)
