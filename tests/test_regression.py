"""Regression as a user runs it: ``streamtrain run linear`` (sequential ``mse``) on a file of
numeric labels, the label rule following the loss, and what it learns against the baselines a
regression must beat (the labels' mean; the planted model of a synthetic stream)."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.cli import main


def _run(args, tmp_path, capsys) -> tuple[dict, str]:
    """(the ``--summary``, what the run wrote to stderr)."""
    summary = tmp_path / "summary.json"
    code = main(["run", *args, "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
                 "--summary", str(summary)])
    err = capsys.readouterr().err
    assert code == 0, err
    return json.loads(summary.read_text()), err


def _progressive_mean_rmse(y: np.ndarray) -> float:
    """RMSE of predicting each label by the mean of the labels before it (0 for the first)."""
    before = np.concatenate([[0.0], np.cumsum(y)[:-1] / np.arange(1, len(y))])
    return float(np.sqrt(np.mean((y - before) ** 2)))


def test_linear_on_movielens_ratings_beats_the_running_mean(ratings, tmp_path, capsys):
    path, y = ratings
    got, err = _run(["linear", "--set", f"reader.path={path}", "--set", "reader.label=rating"], tmp_path, capsys)
    assert "inferred reader.labels null: any number (the loss 'loss' is mse" in err
    assert got["examples"] == 100_000 and got["malformed"] == 0
    assert got["label_stddev"] == pytest.approx(y.std(), rel=1e-4)
    baseline = _progressive_mean_rmse(y)                 # 1.1258 on these rows
    assert got["rmse"] < baseline - 0.12, (got["rmse"], baseline)
    assert got["rmse"] < 0.953, got      # Vowpal Wabbit's native driver on these rows: 0.9534 (0.9499 here)
    assert got["mae"] < got["rmse"]


def test_a_planted_linear_model_is_learnt_from_a_csv(tmp_path, capsys):
    """y = 3·x0 − 2·x1 + 1.5·[kind = a] + noise 0.1 (label stddev 3.6): the progressive RMSE
    over 20,000 rows is near the noise (the earlier per-batch update diverged: RMSE 15.2)."""
    y, text = _planted()
    n = len(y)
    path = tmp_path / "planted.csv"
    path.write_text(text)
    got, _ = _run(["linear", "--set", f"reader.path={path}", "--set", "reader.label=y",
                   "--set", 'reader.numeric=["x0", "x1"]', "--set", "reader.numeric_transform=none"], tmp_path, capsys)
    assert got["examples"] == n and got["label_stddev"] == pytest.approx(y.std(), rel=1e-4)
    assert got["rmse"] < 0.3, got


def _planted(n=20_000, seed=0, scale=1.0, offset=0.0):
    """y = 3·x0 − 2·x1 + 1.5·[kind = a] + noise 0.1 (label stddev 3.6), then scaled and offset."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1, (n, 2))
    kind = rng.choice(["a", "b", "c"], n)
    y = (3 * x[:, 0] - 2 * x[:, 1] + 1.5 * (kind == "a") + rng.normal(0, 0.1, n)) * scale + offset
    return y, "y,x0,x1,kind\n" + "".join(f"{a:.6f},{b:.6f},{c:.6f},{k}\n" for a, (b, c), k in zip(y, x, kind))


PLAIN = ["--set", "layers.loss.label_offset=0", "--set", "layers.loss.label_scale=1"]     # linear.json's are "auto"


def test_labels_far_from_the_outputs_units_are_warned_about_and_learnt_once_scaled(tmp_path, capsys):
    """In the label's own units (offset 0, scale 1; ``linear.json`` settles them, below),
    a price around 50,000 (stddev 3,600): terms that move by about 1 a step end the stream
    50,000 away (as Vowpal Wabbit does: 50,555 on these rows); the first batch's warning names
    the offset and scale to set, and with them the model learns it as it learns the stream
    unscaled, and the drift detectors (fed scale-free errors) stay quiet."""
    y, text = _planted(scale=1000.0, offset=50_000.0)
    path = tmp_path / "prices.csv"
    path.write_text(text)
    args = ["linear", "--set", f"reader.path={path}", "--set", "reader.label=y", "--set", 'reader.numeric=["x0", "x1"]',
            "--set", "reader.numeric_transform=none"]
    got, err = _run([*args, *PLAIN], tmp_path, capsys)
    assert got["rmse"] > 40_000
    said = re.search(r"loss 'loss' \(mse\): the first batch's labels have mean \S+ and standard deviation \S+, far "
                     r"from the units its terms learn in \(steps of about 1\): set (layers.loss.label_offset=\S+) and "
                     r"(layers.loss.label_scale=\S+) \(", err)
    assert said, err
    got, err = _run([*args, "--set", said[1], "--set", said[2]], tmp_path, capsys)
    assert "far from the units" not in err
    assert got["rmse"] < 0.05 * got["label_stddev"] and got["drift_alarms"] == {"page_hinkley": 0, "adwin": 0}, got


def test_the_losses_the_detectors_see_are_the_squared_errors_over_the_labels_variance():
    from streamtrain.progressive import Regression
    r = Regression()
    y = np.array([1000.0, 1010.0, 990.0, 1000.0])
    losses = r.update(y, y + np.array([0.0, 10.0, -10.0, 5.0]))
    np.testing.assert_allclose(losses, np.array([0.0, 100.0, 100.0, 25.0]) / y.var())
    np.testing.assert_allclose(Regression().update(np.ones(2), np.zeros(2)), [1.0, 1.0])   # variance 0: as they are


def test_the_label_rule_follows_the_loss(tmp_path):
    """An mse loss on a file, Kafka or plug-in reader takes any number unless the reader says
    which; a logloss keeps [0, 1]; the synthetic reader (no label rule) is left alone."""
    (tmp_path / "r.csv").write_text("y,a\n2.5,x\n")

    def reader(name, *sets):
        cfg, found, said = configmod.load_listing(configmod_path(name), [f"reader.path={tmp_path / 'r.csv'}", *sets])
        assert not found
        return cfg["reader"], said

    got, said = reader("linear")
    assert got["labels"] is None and any("reader.labels null" in s for s in said)
    got, said = reader("linear", "reader.labels=[1, 2, 3, 4, 5]")
    assert got["labels"] == [1, 2, 3, 4, 5] and not any("labels" in s for s in said)
    got, _ = reader("lr")
    assert "labels" not in got
    cfg, _, said = configmod.load_listing(configmod_path("linear"))
    assert cfg["reader"]["type"] == "synthetic" and "labels" not in cfg["reader"] and not said
    kafka = ('reader={"type": "kafka", "bootstrap": "127.0.0.1:1", "topic": "t", "group": "g", "format": "csv", '
             '"columns": ["y", "a"], "label": "y"}')
    cfg, found, said = configmod.load_listing(configmod_path("linear"), [kafka])
    assert not found and cfg["reader"]["labels"] is None and said
    assert not configmod.problems(cfg)                          # and the reader takes it as given
    plugin = 'reader={"type": "plugin", "factory": "streamtrain.examples.plugin_reader:make_reader", "options": {"label_map": {"a": 1}}}'
    cfg, _, _ = configmod.load_listing(configmod_path("linear"), [plugin])
    assert cfg["reader"]["labels"] is None and not configmod.problems(cfg)
    cfg, _, said = configmod.load_listing(configmod_path("linear"), [plugin.replace('"label_map"', '"labels": [1, 2], "label_map"')])
    assert "labels" not in cfg["reader"] and cfg["reader"]["options"]["labels"] == [1, 2] and not said


def configmod_path(name: str) -> str:
    from streamtrain import shipped
    return shipped.resolve(name)


def test_numeric_labels_under_a_logloss_say_what_they_may_mean(ratings, tmp_path, capsys):
    """A user's first run on ratings with a click model: the lines are skipped as before (the
    label rule is the loss's), and a warning says the numbers are outside the labels and how to
    run a regression instead."""
    path, y = ratings
    got, err = _run(["lr", "--set", f"reader.path={path}", "--set", "reader.label=rating"], tmp_path, capsys)
    assert got["malformed"] == int((y > 1).sum())                 # ratings 2-5; a 1 is a click
    assert ("labels 2, 3, 4, 5 are numbers outside reader.labels [0, 1]: their lines are skipped (label). "
            "A numeric label (a rating, a price) is a regression: run the example linear, or set the loss "
            "to mse in the first batch's units (--set layers.loss.type=mse --set layers.loss.label_offset=auto "
            "--set layers.loss.label_scale=auto)") in err
    assert err.count("are numbers outside reader.labels") == 1


def test_served_predictions_are_in_the_labels_units():
    """Serving (no labels, not training) predicts offset + scale · output, as training does."""
    from streamtrain.graph import Graph, Schema
    from streamtrain.testing import random_batch
    layers = [{"name": "bias", "type": "bias"},
              {"name": "loss", "type": "mse", "inputs": ["bias"], "label_offset": 50_000, "label_scale": 3_000}]
    graph = Graph.from_config(layers, Schema(sparse=("a",), dense=()))
    batch = random_batch(3, fields=("a",), dense=0)
    batch.labels[:] = np.nan                                   # a served request has none
    ctx = graph.context(training=False, dtype=np.float64)
    graph.feed(ctx, batch)
    ctx.values = {"bias.b": np.array([0.5])}
    np.testing.assert_allclose(graph.forward(ctx).reshape(-1), 50_000 + 3_000 * 0.5)


def test_an_automl_job_on_a_price_warns_once_with_the_configs_own_layer_name(tmp_path, capsys):
    """auto.json's candidates each build a loss of their own name: the warning is said once,
    naming the job config's loss, so the --set it gives works."""
    y, text = _planted(scale=1000.0, offset=50_000.0)
    path = tmp_path / "prices.csv"
    path.write_text(text)
    _, err = _run(["auto", "--set", f"reader.path={path}", "--set", "reader.label=y", "--set",
                   'reader.numeric=["x0", "x1"]', "--set", "layers.loss.type=mse"], tmp_path, capsys)
    assert err.count("far from the units") == 1 and "set layers.loss.label_offset=" in err, err


def test_a_checkpoint_keeps_its_label_units_and_refuses_others(tmp_path, capsys):
    """The weights of a scaled regression are in its units: the checkpoint records them, and
    restoring it (run, eval, serve) under other units is refused with the settings to give;
    with them, eval scores the stream in the labels' units. A checkpoint written before the
    units were recorded restores as before."""
    y, text = _planted(scale=1000.0, offset=50_000.0)
    path = tmp_path / "prices.csv"
    path.write_text(text)
    ckpt = tmp_path / "ckpt"
    reader = ["--set", f"reader.path={path}", "--set", "reader.label=y", "--set", 'reader.numeric=["x0", "x1"]',
              "--set", "reader.numeric_transform=none", "--set", "metrics.enabled=false"]
    units = ["--set", "layers.loss.label_offset=50000", "--set", "layers.loss.label_scale=3000"]
    assert main(["run", "linear", *reader, *units, "--set", f"checkpoint.dir={ckpt}"]) == 0
    (written,) = [p for p in ckpt.iterdir() if p.name.startswith("ckpt-")]
    meta = json.loads((written / "meta.json").read_text())
    assert meta["label_units"] == {"loss": "loss", "offset": 50_000.0, "scale": 3_000.0}
    capsys.readouterr()
    told = (f"checkpoint {written} was trained with label_offset 50000.0 and label_scale 3000.0, this job's loss "
            "'loss' has 0.0 and 1.0: its weights are in the checkpoint's units, so set --set "
            "layers.loss.label_offset=50000.0 --set layers.loss.label_scale=3000.0")
    for command in (["eval", "linear", "--restore", str(ckpt), *reader, *PLAIN],
                    ["serve", "linear", "--restore", str(ckpt), "--set", "metrics.enabled=false", *PLAIN],
                    ["run", "linear", "--restore", "latest", *reader, "--set", f"checkpoint.dir={ckpt}", *PLAIN]):
        assert main(command) == 2, command
        assert told in capsys.readouterr().err, command
    assert [p.name for p in ckpt.iterdir() if p.name.startswith("ckpt-")] == [written.name]   # nothing written
    summary = tmp_path / "eval.json"
    assert main(["eval", "linear", "--restore", str(ckpt), *reader, *units, "--summary", str(summary)]) == 0
    scored = json.loads(summary.read_text())
    assert scored["rmse"] < 0.05 * y.std(), scored              # the labels' units: ~50,000 off otherwise
    assert main(["eval", "linear", "--restore", str(ckpt), *reader, "--summary", str(summary)]) == 0
    assert json.loads(summary.read_text())["rmse"] == scored["rmse"]     # "auto": the checkpoint's units
    del meta["label_units"]                                     # as an earlier version wrote it
    (written / "meta.json").write_text(json.dumps(meta))
    assert main(["eval", "linear", "--restore", str(ckpt), *reader, *units, "--summary", str(summary)]) == 0
    assert main(["eval", "linear", "--restore", str(ckpt), *reader, "--summary", str(summary)]) == 0
    assert json.loads(summary.read_text())["rmse"] > 40_000     # "auto" reads it as trained in the labels' units


def test_linear_settles_its_label_units_from_the_first_batch_and_keeps_them(tmp_path, capsys):
    """``linear.json``'s units are "auto": the first batch's mean and standard deviation, so a
    price learns out of the box as a rating does, and a restored run keeps the checkpoint's
    units whatever its own first batch says."""
    y, text = _planted(scale=1000.0, offset=50_000.0)
    path = tmp_path / "prices.csv"
    path.write_text(text)
    ckpt = tmp_path / "ckpt"
    args = ["linear", "--set", f"reader.path={path}", "--set", "reader.label=y", "--set", 'reader.numeric=["x0", "x1"]',
            "--set", "reader.numeric_transform=none", "--set", "metrics.enabled=false", "--set", f"checkpoint.dir={ckpt}"]
    first = y[:8192]                                            # linear.json's batch
    offset, scale = float(f"{first.mean():.6g}"), float(f"{first.std():.6g}")
    summary = tmp_path / "s.json"
    assert main(["run", *args, "--summary", str(summary)]) == 0
    err = capsys.readouterr().err
    assert (f"loss 'loss' (mse): label_offset {offset!r} and label_scale {scale!r}, from the first batch's 8192 "
            "labels") in err
    assert "far from the units" not in err and "first batch of only" not in err
    got = json.loads(summary.read_text())
    assert got["rmse"] < 0.05 * got["label_stddev"], got      # 50,543 in the labels' own units
    (written,) = [p for p in ckpt.iterdir() if p.name.startswith("ckpt-")]
    assert json.loads((written / "meta.json").read_text())["label_units"] == {"loss": "loss", "offset": offset,
                                                                             "scale": scale}
    other = tmp_path / "cheaper.csv"                            # another stream's first batch
    other.write_text(_planted(n=9000, seed=1, scale=10.0, offset=100.0)[1])
    assert main(["run", *args, "--set", f"reader.path={other}", "--restore", "latest"]) == 0
    assert f"label_offset {offset!r} and label_scale {scale!r}, from the checkpoint restored" in capsys.readouterr().err


def test_label_units_of_labels():
    from streamtrain.label_units import from_labels
    assert from_labels(np.array([2.0, 4.0, np.nan])) == {"offset": 3.0, "scale": 1.0}
    assert from_labels(np.full(5, 7.0)) == {"offset": 7.0, "scale": 7.0}            # one value: its size
    assert from_labels(np.full(5, 0.5)) == {"offset": 0.5, "scale": 1.0}            # ... at least 1
    assert from_labels(np.array([50_000.123456, 50_010.0])) == {"offset": 50_005.1, "scale": 4.93827}


def test_trainers_of_one_redis_store_agree_on_the_units_and_serving_reads_them(redis_url, tmp_path, capsys):
    """The first trainer's units stay the store's (SET NX): a second trainer whose first batch
    says otherwise takes them, one given other numbers is refused, and a server reading the
    store predicts in them (503 before any trainer settled them)."""
    from streamtrain.serve.service import NotReady, Service, StoreModel
    from streamtrain.serve.settings import serve_settings
    y, text = _planted(scale=1000.0, offset=50_000.0)
    path = tmp_path / "prices.csv"
    path.write_text(text)
    other = tmp_path / "other.csv"
    other.write_text(_planted(n=9000, seed=1, scale=1000.0, offset=60_000.0)[1])
    namespace = f"units-{tmp_path.name}"
    store = ["--set", "store.backend=redis", "--set", f'store.urls=["{redis_url}"]', "--set", f"store.namespace={namespace}"]
    common = ["linear", "--set", "reader.label=y", "--set", 'reader.numeric=["x0", "x1"]', "--set",
              "reader.numeric_transform=none", "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null", *store]
    cfg = configmod.validate(configmod.load(configmod_path("linear"), [
        "store.backend=redis", f'store.urls=["{redis_url}"]', f"store.namespace={namespace}",
        "reader.type=file", f"reader.path={path}", "reader.format=csv", "reader.label=y",
        'reader.numeric=["x0", "x1"]', "reader.numeric_transform=none", "serve.port=0"]))
    early = StoreModel(cfg, serve_settings(cfg))
    try:
        with pytest.raises(NotReady, match=r'no trainer has settled the label units \("auto"\) on this store yet'):
            early.graph()
    finally:
        early.close()
    assert main(["run", *common, "--set", f"reader.path={path}"]) == 0
    said = re.search(r"label_offset (\S+) and label_scale (\S+), from the first batch's 8192 labels",
                     capsys.readouterr().err)
    assert said and float(said[1]) == pytest.approx(50_000, rel=0.02)
    assert main(["run", *common, "--set", f"reader.path={other}"]) == 0
    assert f"label_offset {said[1]} and label_scale {said[2]}, from the trainers already on this store" \
        in capsys.readouterr().err
    assert main(["run", *common, "--set", f"reader.path={other}", *PLAIN]) == 2     # numbers: checked against them
    assert (f"the trainers on this store settled label_offset {said[1]} and label_scale {said[2]}, this job's loss "
            "'loss' has 0.0 and 1.0: the store's weights are in its units, so set --set layers.loss.label_offset=auto "
            "--set layers.loss.label_scale=auto") in capsys.readouterr().err
    source = StoreModel(cfg, serve_settings(cfg))
    try:
        service = Service(source, serve_settings(cfg), cfg["reader"])
        body = json.dumps({"records": [{"x0": 0.0, "x1": 0.0, "kind": "b"}, {"x0": 1.0, "x1": 0.0, "kind": "a"}]})
        got = service.predict(body.encode(), "application/json")["predictions"]
    finally:
        source.close()
    # planted: 1000 · (3·x0 − 2·x1 + 1.5·[kind = a]) + 60,000 on the stream learnt last
    assert got == pytest.approx([60_000, 64_500], abs=1_000), got


def test_units_from_a_few_labels_are_said_to_be_rough(tmp_path, capsys):
    path = tmp_path / "few.csv"
    path.write_text(_planted(n=40, scale=1000.0, offset=50_000.0)[1])
    _, err = _run(["linear", "--set", f"reader.path={path}", "--set", "reader.label=y"], tmp_path, capsys)
    assert ("loss 'loss' (mse): its label units come from a first batch of only 40 labels; if the labels' mean and "
            "spread are far from these, set them: --set layers.loss.label_offset=<mean> --set "
            "layers.loss.label_scale=<standard deviation>") in err


def test_an_automl_regressions_checkpoint_is_refused_under_another_loss_naming_the_jobs_layers(tmp_path, capsys):
    """``auto.json`` as a regression: its checkpoint holds the champion (a candidate whose layers
    carry a prefix, ``a3g41_loss``). Evaluated or served under the job's logloss, its outputs
    were scored as logits with a warning only (logloss 1.40 on MovieLens' ratings); under other
    units the refusal named the candidate's layer (``--set layers.a3g41_loss.label_offset``), a
    path the job does not have. Both are refused naming the job's own layer, and with the
    settings it was trained with eval scores the stream in the labels' units."""
    y, text = _planted(n=8000, scale=1000.0, offset=50_000.0)
    path = tmp_path / "prices.csv"
    path.write_text(text)
    ckpt = tmp_path / "ckpt"
    reader = ["--set", f"reader.path={path}", "--set", "reader.label=y", "--set", 'reader.numeric=["x0", "x1"]',
              "--set", "reader.numeric_transform=none", "--set", "metrics.enabled=false", "--set", "automl.grace=1000",
              "--set", "task=null"]         # the job's loss as written (``task: auto`` takes the checkpoint's)
    mse = ["--set", "layers.loss.type=mse", "--set", "layers.loss.label_offset=auto", "--set", "layers.loss.label_scale=auto"]
    assert main(["run", "auto", *reader, *mse, "--set", f"checkpoint.dir={ckpt}", "--log-level", "ERROR"]) == 0
    (written,) = [p for p in ckpt.iterdir() if p.name.startswith("ckpt-")]
    units = json.loads((written / "meta.json").read_text())["label_units"]
    capsys.readouterr()
    for command, told in (
            (["eval", "auto", "--restore", str(ckpt), *reader],
             f"checkpoint {written} was trained with loss 'loss' of type 'mse', this job's is 'logloss': the "
             "model's output means something else under it, so set --set layers.loss.type=mse"),
            (["serve", "auto", "--restore", str(ckpt), "--set", "metrics.enabled=false", "--set", "task=null"],
             "so set --set layers.loss.type=mse"),
            (["eval", "auto", "--restore", str(ckpt), *reader, "--set", "layers.loss.type=mse"],
             f"this job's loss 'loss' has 0.0 and 1.0: its weights are in the checkpoint's units, so set --set "
             f"layers.loss.label_offset={units['offset']!r} --set layers.loss.label_scale={units['scale']!r}")):
        assert main(command) == 2, command
        assert told in capsys.readouterr().err, command
    summary = tmp_path / "eval.json"
    assert main(["eval", "auto", "--restore", str(ckpt), *reader, *mse, "--summary", str(summary)]) == 0
    assert json.loads(summary.read_text())["rmse"] < 0.05 * y.std()
