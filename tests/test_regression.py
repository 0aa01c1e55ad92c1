"""Regression as a user runs it: ``streamtrain run linear`` (sequential ``mse``) on a file of
numeric labels, the label rule following the loss, and what it learns against the baselines a
regression must beat (the labels' mean; the planted model of a synthetic stream)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain import config as configmod
from streamtrain.cli import main


def _run(args, tmp_path, capsys) -> tuple[dict, str]:
    """(the ``--summary``, what the run wrote to stderr)."""
    summary = tmp_path / "summary.json"
    code = main(["run", *args, "--summary", str(summary)])
    err = capsys.readouterr().err
    assert code == 0, err
    return json.loads(summary.read_text()), err


def _progressive_mean_rmse(y: np.ndarray) -> float:
    """RMSE of predicting each label by the mean of the labels before it (0 for the first)."""
    before = np.concatenate([[0.0], np.cumsum(y)[:-1] / np.arange(1, len(y))])
    return float(np.sqrt(np.mean((y - before) ** 2)))


@pytest.fixture(scope="module")
def ratings(data_dir, tmp_path_factory):
    """MovieLens 100K as a user would export it for a regression: the rating (1-5), user, item
    and the user's age decade, gender and occupation, in time order."""
    src = data_dir / "movielens_100k"
    data = np.loadtxt(src / "u.data", dtype=np.int64)
    data = data[np.argsort(data[:, 3], kind="stable")]
    users = {}
    for row in (src / "u.user").read_text(encoding="latin-1").splitlines():
        uid, age, gender, occupation, _ = row.split("|")
        users[int(uid)] = f"{int(age) // 10 * 10},{gender},{occupation}"
    path = tmp_path_factory.mktemp("ml") / "ratings.csv"
    path.write_text("rating,user,item,age,gender,occupation\n"
                    + "".join(f"{r},{u},{i},{users[u]}\n" for u, i, r, _ in data))
    return path, data[:, 2].astype(np.float64)


def test_linear_on_movielens_ratings_beats_the_running_mean(ratings, tmp_path, capsys):
    path, y = ratings
    got, err = _run(["linear", "--set", f"reader.path={path}", "--set", "reader.label=rating"], tmp_path, capsys)
    assert "inferred reader.labels null: any number (the loss 'loss' is mse" in err
    assert got["examples"] == 100_000 and got["malformed"] == 0
    assert got["label_stddev"] == pytest.approx(y.std(), rel=1e-4)
    baseline = _progressive_mean_rmse(y)                 # 1.1278 on these rows
    assert got["rmse"] < baseline - 0.12, (got["rmse"], baseline)
    assert got["mae"] < got["rmse"]


def test_a_planted_linear_model_is_learnt_from_a_csv(tmp_path, capsys):
    """y = 3·x0 − 2·x1 + 1.5·[kind = a] + noise 0.1 (label stddev 3.6): the progressive RMSE
    over 20,000 rows is near the noise (the earlier per-batch update diverged: RMSE 15.2)."""
    rng = np.random.default_rng(0)
    n = 20_000
    x = rng.normal(0, 1, (n, 2))
    kind = rng.choice(["a", "b", "c"], n)
    y = 3 * x[:, 0] - 2 * x[:, 1] + 1.5 * (kind == "a") + rng.normal(0, 0.1, n)
    path = tmp_path / "planted.csv"
    path.write_text("y,x0,x1,kind\n" + "".join(f"{a:.6f},{b:.6f},{c:.6f},{k}\n" for a, (b, c), k in zip(y, x, kind)))
    got, _ = _run(["linear", "--set", f"reader.path={path}", "--set", "reader.label=y",
                   "--set", 'reader.numeric=["x0", "x1"]', "--set", "reader.numeric_transform=none"], tmp_path, capsys)
    assert got["examples"] == n and got["label_stddev"] == pytest.approx(y.std(), rel=1e-4)
    assert got["rmse"] < 0.3, got


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
            "to mse (--set layers.loss.type=mse)") in err
    assert err.count("are numbers outside reader.labels") == 1
