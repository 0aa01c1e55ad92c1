"""``"task": "auto"`` (``examples/auto.json``): the first batch says what the label is. Ratings
make the job a regression with no setting given; a click log keeps the click loss, and a later
label that is neither 0 nor 1 is a bad line; a checkpoint says what was decided to a restored
run, ``eval`` and ``serve --restore``; trainers on one Redis store keep the first one's decision."""
from __future__ import annotations

import json
import types

import numpy as np

from streamtrain import task
from streamtrain.cli import main
from streamtrain.store import make_store

QUIET = ["--set", "metrics.enabled=false", "--log-level", "WARNING"]


def test_auto_learns_ratings_as_a_regression_with_no_setting_given(ratings, tmp_path, capsys):
    """Before, ``auto.json`` on ratings skipped the 93,890 lines rated 2-5 (labels outside [0, 1])
    and trained the 6,110 rated 1, every label 1, with a warning; a regression needed three
    settings. It now decides from the first batch, and a checkpoint carries the decision to
    eval and serve --restore, which take it with no setting either."""
    path, y = ratings
    ckpt, summary = tmp_path / "ckpt", tmp_path / "s.json"
    reader = ["--set", f"reader.path={path}", "--set", "reader.label=rating"]
    assert main(["run", "auto", *reader, *QUIET, "--set", f"checkpoint.dir={ckpt}", "--log-level", "INFO",
                 "--summary", str(summary)]) == 0
    err = capsys.readouterr().err
    assert "task auto: a regression (labels other than 0 and 1): the loss is mse, from the first batch's 1024 labels" in err
    got = json.loads(summary.read_text())
    assert got["examples"] == len(y) and got["malformed"] == 0
    assert got["rmse"] < 0.95 < float(np.std(y))           # (measured 0.9459; linear.json 0.9499)
    assert main(["eval", "auto", "--restore", str(ckpt), *reader, *QUIET, "--summary", str(summary)]) == 0
    assert json.loads(summary.read_text())["rmse"] < 0.95
    from streamtrain.saved import read
    graph, _ = read(str(ckpt)).build(json.loads(json.dumps(_auto())), read(str(ckpt)).schema, serving=True)
    assert graph.loss.kind == "mse"


def _auto() -> dict:
    from streamtrain import config as configmod, shipped
    return configmod.load(shipped.resolve("auto"))


def test_a_click_log_keeps_the_click_loss_and_a_later_odd_label_is_a_bad_line(tmp_path, capsys):
    """The reader takes any number until the first batch decides: labels 0 and 1 keep the
    logloss, and a row read later whose label is 2 is dropped and counted (``label``), as under
    any click model, never fed to the logloss."""
    rng = np.random.default_rng(0)
    rows = [f"{int(rng.random() < 0.3)},s{rng.integers(0, 20)},a{rng.integers(0, 9)}" for _ in range(6000)]
    rows[4000] = "2,s1,a1"
    data = tmp_path / "clicks.csv"
    data.write_text("clicked,site,app\n" + "\n".join(rows) + "\n")
    summary = tmp_path / "s.json"
    assert main(["run", "auto", "--set", f"reader.path={data}", "--set", "reader.label=clicked", *QUIET,
                 "--set", "checkpoint.dir=null", "--summary", str(summary)]) == 0
    got = json.loads(summary.read_text())
    assert got["examples"] == 5999 and got["malformed_by_reason"]["label"] == 1
    assert 0.3 < got["logloss"] < 0.7 and "rmse" not in got


def test_trainers_on_one_redis_store_keep_the_first_ones_decision(redis_url, redis_namespace):
    """The first trainer's first batch decides (``SET NX``); a trainer joining later whose own
    first batch would say otherwise follows it; a server of the store reads it."""
    store = make_store({"backend": "redis", "urls": [redis_url], "namespace": redis_namespace})
    try:
        assert task.agreed(store) is None
        first = types.SimpleNamespace(store=store, config=_auto())
        task.settle(first, np.array([1.0, 4.0, 3.0]), None)
        assert first.config["task"] == task.REGRESSION and first.config["layers"][-1]["type"] == "mse"
        second = types.SimpleNamespace(store=store, config=_auto())
        task.settle(second, np.array([0.0, 1.0, 1.0]), None)
        assert second.config["task"] == task.REGRESSION and not second.binary_labels
        assert task.agreed(store) == task.REGRESSION
    finally:
        store.close()


def test_a_task_that_says_otherwise_than_the_loss_is_refused(capsys):
    """"click" and "regression" are what ``auto`` decides; given by hand, they must agree with
    the loss (a logloss job told it is a regression would train a click model)."""
    from streamtrain import shipped
    assert main(["validate", shipped.resolve("lr"), "--set", "task=regression"]) == 2
    assert ("task: 'regression' is what task auto decides for a job whose loss is mse, and this job's is not: set "
            '"auto" (the first batch decides) or null (the loss as written)') in capsys.readouterr().err
    assert main(["validate", shipped.resolve("lr"), "--set", "task=click"]) == 0
    assert main(["validate", shipped.resolve("linear"), "--set", "task=regression"]) == 0
