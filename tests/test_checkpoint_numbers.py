"""A model's numeric weights are learnt on the numbers as its reader gave them (csv's default:
sign(x)·log1p(|x|)); whatever uses the model later reads numbers the same way or says why not:
the checkpoint and the trainers on a Redis store record the transform, ``serve`` takes it for
JSON records, ``eval`` refuses a reader that reads them otherwise, a restored run warns."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain import config as configmod, shipped
from streamtrain.cli import main
from streamtrain.serve.saved import CheckpointModel
from streamtrain.serve.service import Service, StoreModel
from streamtrain.serve.settings import serve_settings

RECORDS = [{"x0": 0.0, "x1": 0.0, "kind": "a"}, {"x0": 2.0, "x1": -1.0, "kind": "c"}]
TRUTH = [51_500, 58_000]             # 1000 · (3·x0 − 2·x1 + 1.5·[kind = a]) + 50,000


@pytest.fixture(scope="module")
def prices(tmp_path_factory):
    rng = np.random.default_rng(0)
    n = 20_000
    x = rng.normal(0, 1, (n, 2))
    kind = rng.choice(["a", "b", "c"], n)
    y = (3 * x[:, 0] - 2 * x[:, 1] + 1.5 * (kind == "a") + rng.normal(0, 0.1, n)) * 1000 + 50_000
    path = tmp_path_factory.mktemp("prices") / "prices.csv"
    path.write_text("y,x0,x1,kind\n" + "".join(f"{a:.6f},{b:.6f},{c:.6f},{k}\n" for a, (b, c), k in zip(y, x, kind)))
    return path


def _reader(path):
    return ["--set", f"reader.path={path}", "--set", "reader.label=y", "--set", 'reader.numeric=["x0", "x1"]',
            "--set", "metrics.enabled=false"]


def _config(*sets) -> dict:
    return configmod.validate(configmod.load(shipped.resolve("linear"), ["serve.port=0", *sets]))


def _predict(source, cfg) -> list:
    service = Service(source, serve_settings(cfg), cfg["reader"])
    try:
        return service.predict(json.dumps({"records": RECORDS}).encode(), "application/json")["predictions"], \
            service.numeric_transform
    finally:
        source.close()


def _served_lr(ckpt, records) -> tuple[list, Service]:
    """``lr``'s checkpoint served with a config that names no reader: (its answers, the service)."""
    cfg = configmod.validate(configmod.load(shipped.resolve("lr"), ["serve.port=0"]))
    source = CheckpointModel(cfg, serve_settings(cfg), str(ckpt))
    service = Service(source, serve_settings(cfg), cfg["reader"])
    try:
        return service.predict(json.dumps({"records": records}).encode(), "application/json")["predictions"], service
    finally:
        source.close()


def test_a_checkpoint_is_served_and_scored_reading_numbers_as_it_was_trained(prices, tmp_path, capsys):
    ckpt = tmp_path / "ckpt"
    assert main(["run", "linear", *_reader(prices), "--set", f"checkpoint.dir={ckpt}"]) == 0
    (written,) = [p for p in ckpt.iterdir() if p.name.startswith("ckpt-")]
    assert json.loads((written / "meta.json").read_text())["numeric_transform"] == "log1p"
    bare = _config()                                           # names no stream: the checkpoint's way
    got, transform = _predict(CheckpointModel(bare, serve_settings(bare), str(ckpt)), bare)
    assert transform == "log1p"
    assert got == pytest.approx(TRUTH, rel=0.02), got          # as written: 62,870 for the second
    named = _config("reader.type=file", f"reader.path={prices}", "reader.format=csv", "reader.label=y")
    assert _predict(CheckpointModel(named, serve_settings(named), str(ckpt)), named)[0] == got
    capsys.readouterr()
    told = (f"checkpoint {written}: the model's numeric fields were learnt on numbers read with numeric_transform "
            "'log1p', this reader gives them as written: set --set reader.numeric_transform=log1p")
    none = ["--set", "reader.numeric_transform=none"]
    assert main(["eval", "linear", "--restore", str(ckpt), *_reader(prices), *none]) == 2
    assert told in capsys.readouterr().err
    assert main(["serve", "linear", "--restore", str(ckpt), *_reader(prices), *none]) == 2
    assert told in capsys.readouterr().err
    assert main(["run", "linear", "--restore", "latest", *_reader(prices), *none, "--set", f"checkpoint.dir={ckpt}"]) == 0
    assert told + " (the terms it concerns relearn meanwhile)" in capsys.readouterr().err
    assert main(["eval", "linear", "--restore", str(written), *_reader(prices)]) == 0


def test_a_server_on_the_trainers_store_reads_numbers_as_they_did(prices, redis_url, tmp_path):
    store = [f'store.urls=["{redis_url}"]', "store.backend=redis", f"store.namespace=numbers-{tmp_path.name}"]
    assert main(["run", "linear", *_reader(prices), "--set", "checkpoint.dir=null",
                 *[a for s in store for a in ("--set", s)]]) == 0
    cfg = _config(*store)                                      # names no stream: the trainers' way
    got, transform = _predict(StoreModel(cfg, serve_settings(cfg)), cfg)
    assert transform == "log1p"
    assert got == pytest.approx(TRUTH, rel=0.02), got


def test_a_served_checkpoint_splits_strings_as_its_csv_reader_did(tmp_path, capsys):
    """A csv ``multivalue`` column ("a|b": two ids) is recorded too: a server whose config names
    no reader splits a record's string there as training did (it took "a|b" for one unseen
    id: 0.255 where the model says 0.689), and eval with a reader that does not is refused."""
    rng = np.random.default_rng(0)
    tags = [rng.choice(list("abcde"), 2, replace=False) for _ in range(20_000)]
    clicked = [int(rng.random() < 0.05 + 0.8 * ({"a", "b"} <= set(t))) for t in tags]
    data = tmp_path / "tags.csv"
    data.write_text("clicked,tags,site\n" + "".join(f"{c},{'|'.join(t)},s{i % 3}\n"
                                                   for i, (c, t) in enumerate(zip(clicked, tags))))
    ckpt = tmp_path / "ckpt"
    reader = ["--set", f"reader.path={data}", "--set", "reader.label=clicked", "--set", "metrics.enabled=false"]
    assert main(["run", "lr", *reader, "--set", 'reader.multivalue={"tags": "|"}', "--set", f"checkpoint.dir={ckpt}"]) == 0
    records = [{"tags": "a|b", "site": "s1"}, {"tags": ["a", "b"], "site": "s1"}, {"tags": "c|d", "site": "s1"}]
    got, service = _served_lr(ckpt, records)
    assert service.separators == {"tags": "|"}
    assert got[0] == got[1] and got[0] > 0.6 and got[2] < 0.1, got
    capsys.readouterr()
    assert main(["eval", "lr", "--restore", str(ckpt), *reader]) == 2
    assert ("the model's ids were made with csv multivalue {\"tags\": \"|\"}, this reader splits no column: set "
            "--set 'reader.multivalue={\"tags\": \"|\"}'") in capsys.readouterr().err


def test_a_served_checkpoint_hashes_columns_as_its_csv_reader_did(tmp_path, capsys):
    """A csv ``hash_as`` (column ``to``'s values take column ``from``'s ids: one id space, as a
    graph's shared ids) is recorded too: a server whose config names no reader hashes a
    record's ``to`` as training did (it hashed it as itself: an unseen id, the bias alone),
    and eval with a reader that does not is refused naming the setting."""
    rng = np.random.default_rng(1)
    a, b = rng.choice(list("pqrstu"), (2, 20_000))
    clicked = (rng.random(20_000) < np.where(np.isin(b, ["p", "q"]), 0.8, 0.05)).astype(int)
    data = tmp_path / "pairs.csv"
    data.write_text("clicked,from,to\n" + "".join(f"{c},{x},{y}\n" for c, x, y in zip(clicked, a, b)))
    ckpt = tmp_path / "ckpt"
    reader = ["--set", f"reader.path={data}", "--set", "reader.label=clicked", "--set", "metrics.enabled=false"]
    assert main(["run", "lr", *reader, "--set", 'reader.hash_as={"to": "from"}', "--set", f"checkpoint.dir={ckpt}"]) == 0
    got, service = _served_lr(ckpt, [{"from": "s", "to": "p"}, {"from": "s", "to": "t"}])
    assert service.hash_as == {"to": "from"}
    assert got[0] > 0.6 and got[1] < 0.15, got
    capsys.readouterr()
    assert main(["eval", "lr", "--restore", str(ckpt), *reader]) == 2
    assert ("the model's ids were made with csv hash_as {\"to\": \"from\"}, this reader hashes every column as "
            "itself: set --set 'reader.hash_as={\"to\": \"from\"}'") in capsys.readouterr().err
    assert main(["eval", "lr", "--restore", str(ckpt), *reader, "--set", 'reader.hash_as={"to": "from"}']) == 0
