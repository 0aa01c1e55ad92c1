"""Config loading, --set overrides by dotted path, and validation that lists every problem."""
import json

import pytest

from streamtrain import config as cfgmod
from streamtrain.cli import main
from streamtrain.errors import ConfigError

LR = {"layers": [
    {"name": "sparse", "type": "sparse_input"},
    {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 4},
    {"name": "fc1", "type": "fc", "inputs": ["emb"], "dim": 1},
    {"name": "loss", "type": "logloss", "inputs": ["fc1"]},
]}


def write(tmp_path, cfg, name="job.json"):
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return path


def test_set_overrides_by_dotted_path_and_layer_name(tmp_path):
    cfg = cfgmod.load(write(tmp_path, LR), ["layers.emb.dim=16", "batch_size=512",
                                            "reader.path=/data/x.tsv.gz", "layers.2.activation=relu",
                                            "store.urls=[\"redis://127.0.0.1:7000\"]"])
    assert cfg["layers"][1]["dim"] == 16
    assert cfg["layers"][2]["activation"] == "relu"
    assert cfg["batch_size"] == 512
    assert cfg["reader"]["path"] == "/data/x.tsv.gz"
    assert cfg["store"]["urls"] == ["redis://127.0.0.1:7000"]
    assert cfg["default_optimizer"]["type"] == "adagrad"      # defaults filled in


def test_set_unknown_layer_lists_names(tmp_path):
    with pytest.raises(ConfigError, match=r"layers.emb2.dim: no item named 'emb2' in layers \(names: sparse, emb, fc1, loss\)"):
        cfgmod.load(write(tmp_path, LR), ["layers.emb2.dim=3"])


def test_every_problem_is_listed_with_its_path(tmp_path):
    bad = {
        "batch_size": 0,
        "bogus": 1,
        "default_optimizer": {"type": "adamw"},
        "store": {"backend": "cassandra"},
        "layers": [
            {"name": "sparse", "type": "sparse_input"},
            {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": -2, "colour": "red"},
            {"name": "fc1", "type": "fc", "inputs": ["fc9"], "dim": 1},
            {"name": "loss", "type": "logloss", "inputs": ["fc1"], "optimizer": {"type": "sgd", "lr": -1}},
        ],
    }
    cfg = cfgmod.load(write(tmp_path, bad))
    found = dict(cfgmod.problems(cfg))
    assert "batch_size" in found
    assert "bogus" in found
    assert found["default_optimizer.type"].startswith("unknown optimizer 'adamw'")
    assert found["store.backend"].startswith("unknown store backend 'cassandra'")
    assert found["layers[1].dim"] == "must be > 0, got -2"
    assert "unknown option" in found["layers[1].colour"]
    # fix the layer options to reach the topology checks
    bad["layers"][1] = {"name": "emb", "type": "embedding", "inputs": ["sparse"], "dim": 2}
    found = dict(cfgmod.problems(cfgmod.load(write(tmp_path, bad))))
    assert found["layers[2].inputs[0]"] == "unknown layer 'fc9' (known: sparse, emb, fc1, loss)"
    assert found["layers[3].optimizer.lr"] == "must be >= 0, got -1"


def test_cycle_and_loss_count(tmp_path):
    cfg = cfgmod.load(write(tmp_path, {"layers": [
        {"name": "a", "type": "fc", "inputs": ["b"], "dim": 1},
        {"name": "b", "type": "fc", "inputs": ["a"], "dim": 1},
    ]}))
    found = dict(cfgmod.problems(cfg))
    assert "need exactly one loss layer, found 0" in found["layers"]


def test_bad_json_names_line_and_column(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{"batch_size": 3,\n "layers": [}')
    with pytest.raises(ConfigError, match=r"not valid JSON: .* line 2 column"):
        cfgmod.load(path)


def test_validate_command(tmp_path, capsys):
    good = write(tmp_path, LR, "good.json")
    assert main(["validate", str(good)]) == 0
    bad = write(tmp_path, {**LR, "batch_size": -1}, "bad.json")
    assert main(["validate", str(bad), "--set", "layers.emb.dim=0"]) == 2
    err = capsys.readouterr().err
    assert "batch_size: must be > 0, got -1" in err
    assert "layers[1].dim: must be > 0, got 0" in err


def test_every_example_validates():
    from pathlib import Path
    for path in sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.json")):
        assert cfgmod.problems(cfgmod.load(path)) == [], path.name
