"""The example jobs ship inside the package (``streamtrain.examples``): a bare name runs one from
any directory, ``streamtrain examples`` lists, prints and copies them (issue 30, item 3)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from streamtrain import shipped
from streamtrain.cli import main

ROOT = Path(__file__).resolve().parents[1]
IN_REPO = sorted(p.stem for p in (ROOT / "examples").glob("*.json"))


def test_every_example_of_the_repository_is_shipped_and_valid_by_name(tmp_path, monkeypatch, capsys):
    assert shipped.names() == IN_REPO and len(IN_REPO) >= 10
    monkeypatch.chdir(tmp_path)                  # no examples/ folder here
    for name in IN_REPO:
        assert main(["validate", name]) == 0, capsys.readouterr().err
        assert main(["validate", name + ".json"]) == 0
        assert json.loads(shipped.text(name)) == json.loads((ROOT / "examples" / f"{name}.json").read_text())
    assert capsys.readouterr().out.splitlines()[0] == "auto: ok"


def test_a_file_that_exists_wins_over_the_shipped_name(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lr.json").write_text(json.dumps({"batch_size": -1}))
    assert main(["validate", "lr.json"]) == 2                    # the local file, invalid
    assert "batch_size: must be > 0, got -1" in capsys.readouterr().err
    assert main(["validate", "lr"]) == 0                         # no file "lr": the shipped one
    assert shipped.resolve("lr.json") == "lr.json"
    (tmp_path / "fm").mkdir()                                    # a folder is not a config file
    assert main(["validate", "fm"]) == 0
    assert main(["validate", str(tmp_path)]) == 2
    assert f"{tmp_path} is a directory, not a config file" in capsys.readouterr().err
    assert Path(shipped.resolve("lr")).read_text() == (ROOT / "examples" / "lr.json").read_text()


def test_a_missing_path_says_how_to_run_the_shipped_example(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "examples/fm.json"]) == 2
    assert ("config file not found: examples/fm.json (the shipped example is run by its name: "
            "streamtrain run fm)") in capsys.readouterr().err
    assert main(["validate", "nosuch.json"]) == 2
    assert f"(shipped examples, run by name: {', '.join(IN_REPO)})" in capsys.readouterr().err


def test_examples_lists_prints_and_copies_without_overwriting(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["examples"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == IN_REPO
    assert listed[IN_REPO.index("lr")].split(None, 1)[1].startswith("Logistic regression")
    assert main(["examples", "fm"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "fm"
    assert main(["examples", "fm", "--copy", "job.json"]) == 0
    assert "job.json: copied from the shipped example 'fm'" in capsys.readouterr().out
    assert json.loads((tmp_path / "job.json").read_text())["name"] == "fm"
    (tmp_path / "jobs").mkdir()
    assert main(["examples", "lr.json", "--copy", "jobs"]) == 0
    assert json.loads((tmp_path / "jobs" / "lr.json").read_text())["name"] == "lr"
    (tmp_path / "job.json").write_text("{}")
    assert main(["examples", "dcn", "--copy", "job.json"]) == 1               # never overwrites
    assert "job.json exists: not overwritten" in capsys.readouterr().err
    assert (tmp_path / "job.json").read_text() == "{}"


@pytest.mark.parametrize("argv, said", [(["examples", "nope"], "no example named 'nope' (known: auto, dcn, "),
                                        (["examples", "--copy", "x.json"], "--copy needs a NAME (known: auto, dcn, ")])
def test_examples_names_the_known_ones_on_a_wrong_name(argv, said, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert said in capsys.readouterr().err and not (tmp_path / "x.json").exists()


def test_the_plugin_example_imports_from_the_package_not_the_working_directory():
    cfg = json.loads(shipped.text("plugin_reader"))
    assert cfg["reader"]["factory"] == "streamtrain.examples.plugin_reader:make_reader"
