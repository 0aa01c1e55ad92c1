"""A batch whose loss or gradient is NaN/inf is skipped and counted; parameters stay untouched."""
from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry

from streamtrain.job import Job
from streamtrain.metrics import Metrics
from tests.fixtures_prometheus import job_config


def nan_dense(batch):
    batch.dense[3] = np.nan           # one example: its logit, hence the loss, becomes NaN


def values(snapshot, like=None) -> dict:
    """Every parameter value (table rows by id), restricted to the ids of ``like``."""
    out = {f"{name}::{slot}": a.copy() for name, arrays in snapshot.dense.items() for slot, a in arrays.items()}
    for name, arrays in snapshot.tables.items():
        ids = arrays["ids"]
        keep = np.ones(len(ids), bool) if like is None else np.isin(ids, like[f"{name}::ids"])
        for slot, a in arrays.items():
            out[f"{name}::{slot}"] = a[keep]
    return out


def test_nonfinite_loss_and_gradient_skip_the_update(tmp_path, fake_stream):
    source = fake_stream(batch_size=64, batches=8, poison={3: nan_dense})
    job = Job(job_config(tmp_path))
    metrics = Metrics(CollectorRegistry(), refresh_seconds=0)
    seen = []

    def spoil_gradients_of_batch_5(job, batch, result):
        n = len(seen)
        seen.append((values(job.store.snapshot()), result))
        if n == 4:                      # wrap before batch 5 runs: a NaN in one table row
            real = job.graph.gradients

            def gradients(ctx):
                grads = real(ctx)
                if len(seen) == 5 and grads.tables:
                    name = next(iter(grads.tables))
                    grads.tables[name][1][0, 0] = np.inf
                return grads
            job.graph.gradients = gradients
            engine = job.trainer.engine
            if engine is not None and engine.assign:    # its rows are assigned, not pushed as gradients
                real_push = engine.push

                def push(ctx):
                    assigned = real_push(ctx)
                    if len(seen) == 5:
                        next(v for ids, v, _ in assigned.values() if ids is not None)[0, 0] = np.inf
                    return assigned
                engine.push = push

    job.hooks += [spoil_gradients_of_batch_5, metrics.on_step]
    summary = job.run()

    results = [r for _, r in seen]
    assert [r.applied for r in results] == [True, True, True, False, True, False, True, True]
    assert results[3].reason == "non-finite loss" and results[5].reason == "non-finite gradient"
    assert summary["nonfinite_batches"] == 2
    assert metrics.registry.get_sample_value("streamtrain_nonfinite_batches_total") == 2
    for skipped in (3, 5):
        before, after = seen[skipped - 1][0], seen[skipped][0]
        after = {k: v for k, v in after.items()}
        for key, value in before.items():         # rows that existed before are bit-identical
            if key.endswith("::ids"):
                continue
            table = key.split("::")[0]
            if f"{table}::ids" in before:
                ids_after = after[f"{table}::ids"]
                pos = np.searchsorted(ids_after, before[f"{table}::ids"])
                np.testing.assert_array_equal(after[key][pos], value, err_msg=key)
            else:
                np.testing.assert_array_equal(after[key], value, err_msg=key)
    changed = [k for k, v in seen[6][0].items() if k in seen[5][0] and not np.array_equal(v, seen[5][0][k])]
    assert changed, "a normal batch after the skipped ones updates parameters again"
    # every batch's offsets were committed exactly once, in order, after its step
    assert [c[("fake", 0)] for c in source.committed] == list(range(1, 9))
    assert np.isfinite(summary["logloss"])


def test_all_finite_finds_one_bad_number_in_any_array():
    """Small arrays are checked joined, large ones one by one: a NaN or an infinity anywhere,
    in either precision, is found; finite numbers whose sum overflows are not flagged."""
    from streamtrain.context import Gradients

    def grads():
        return Gradients(dense={"w": np.full((40, 40), 3e38, np.float32), "b": np.ones(3, np.float32)},
                         tables={"t": (np.arange(5, dtype=np.uint64), np.ones((5, 2), np.float32))},
                         squares={"t": np.ones((5, 2), np.float32)},
                         assigned={"e": (None, np.zeros((2000, 1)), {"n": np.zeros(7)})})
    assert grads().all_finite()
    for where in ("w", "b", "t", "sq", "e", "n"):
        for bad in (np.nan, np.inf, -np.inf):
            g = grads()
            a = {"w": g.dense["w"], "b": g.dense["b"], "t": g.tables["t"][1], "sq": g.squares["t"],
                 "e": g.assigned["e"][1], "n": g.assigned["e"][2]["n"]}[where]
            a.reshape(-1)[-1] = bad
            assert not g.all_finite(), (where, bad)


def test_all_finite_takes_any_number_of_arrays_and_any_kind():
    """More arrays of one precision than one compiled call takes, a read-only one and an
    integer one: a NaN in any of them is found, in the last one of a full call too (numba
    loaded by the import: the compiled check)."""
    from streamtrain._finite_kernels import CHUNK
    from streamtrain.context import Gradients
    n = 2 * CHUNK + 3

    def grads():
        dense = {f"w{i}": np.full((i + 1, 3), float(i), np.float32) for i in range(n)}
        ro = np.ones(4)
        ro.flags.writeable = False
        dense.update(ro=ro, ints=np.arange(3), f64=np.zeros((4, 2)).T)     # read-only, int, strided
        return Gradients(dense=dense)
    assert grads().all_finite()
    for name in ("w0", f"w{CHUNK - 1}", f"w{CHUNK}", f"w{n - 1}", "f64"):
        g = grads()
        g.dense[name][-1, -1] = np.nan
        assert not g.all_finite(), name
    g = grads()
    g.dense["ro"] = np.array([1.0, np.inf])
    g.dense["ro"].flags.writeable = False
    assert not g.all_finite()


def test_all_finite_with_a_limit_refuses_what_the_store_could_not_keep():
    """``limit``: a number at or beyond it is refused in any array, either precision; below it
    passes (an integer array, a float16 one: numpy's path)."""
    from streamtrain.context import Gradients
    from streamtrain.trainer import LIMIT
    limit = LIMIT[np.dtype(np.float32)]
    for big in (1e30, -limit, 2.0 ** 65):
        for dtype in (np.float32, np.float64):
            g = Gradients(dense={"w": np.array([1.0, big], dtype)})
            assert g.all_finite() and not g.all_finite(limit), (big, dtype)
    assert Gradients(dense={"w": np.array([2.0 ** 63], np.float32), "i": np.arange(3)}).all_finite(limit)
    assert not Gradients(dense={"h": np.array([1.0, np.inf], np.float16)}).all_finite(limit)    # (numpy's path)


def test_a_huge_number_read_as_written_skips_its_batch_and_leaves_the_model_learning(tmp_path, capsys):
    """A value of 1e30 in a numeric column read as written (``numeric_transform: none``): the
    first example's finite float64 rows held squares float32 cannot (n = 1e60): stored, the
    model's state was infinite and every later batch was skipped (256 of 5,000 examples
    trained). Now that batch is skipped and said, naming the column; the rest learn."""
    import json
    from streamtrain.cli import main
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, 5000)
    x[::500] = 1e30
    y = (rng.random(5000) < 1 / (1 + np.exp(-np.clip(x, -5, 5)))).astype(int)
    data = tmp_path / "huge.csv"
    data.write_text("label,x,c\n" + "".join(f"{a},{b},c{i % 7}\n" for i, (a, b) in enumerate(zip(y, x))))
    summary = tmp_path / "s.json"
    assert main(["run", "lr", "--set", "reader.type=file", "--set", f"reader.path={data}", "--set",
                 "reader.format=csv", "--set", 'reader.numeric=["x"]', "--set", "reader.numeric_transform=none",
                 "--set", "batch_size=256", "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
                 "--summary", str(summary)]) == 0
    got = json.loads(summary.read_text())
    assert got["nonfinite_batches"] >= 1 and got["examples"] + got["nonfinite_examples"] == 5000
    assert got["examples"] >= 4000 and got["logloss"] < 0.65, got          # 4,744 examples, 0.602
    said = [line for line in capsys.readouterr().err.splitlines() if "skipped so far" in line]
    assert said and "(the parameters are untouched); its numeric inputs reach 1e+30 (column 'x')" in said[0], said
