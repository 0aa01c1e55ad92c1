import subprocess
import sys

from streamtrain.layers_diff import differences, say


def test_layers_added_removed_and_changed_are_named_in_order():
    saved = [{"name": "a", "type": "fc", "dim": 4}, {"name": "b", "type": "relu"}]
    ours = [{"name": "a", "type": "fc", "dim": 4, "bias": False}, {"name": "c", "type": "tanh"}]
    assert differences(saved, ours) == ["layer 'b' only in the checkpoint", "layer 'c' only here",
                                        "layers.a.bias: absent in the checkpoint, false here"]
    assert say(saved, saved) is None and say(None, ours) is None      # a checkpoint that records none


def test_a_long_list_is_cut():
    saved = [{"name": "a", **{f"k{i}": i for i in range(9)}}]
    ours = [{"name": "a", **{f"k{i}": i + 1 for i in range(9)}}]
    said = say(saved, ours)
    assert said.startswith("its layers differ from these: layers.a.k0: 0 in the checkpoint, 1 here; ")
    assert said.endswith("layers.a.k5: 5 in the checkpoint, 6 here; and 3 more")


def test_a_trainer_joining_a_store_whose_trainers_train_other_layers_says_what_differs(redis_url, tmp_path, capsys):
    """A rolling change of the config (or two jobs given one namespace) mixes two models' updates
    in one store: the trainer that joins names the differences (layers, how its reader makes
    features) at its first publication, and so does a server whose config differs from the
    newest trainer's."""
    from streamtrain.cli import main
    common = ["fm", "--set", "store.backend=redis", "--set", f'store.urls=["{redis_url}"]', "--set",
              f"store.namespace=layers-{tmp_path.name}", "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
              "--max-examples", "3000"]
    first = subprocess.run([sys.executable, "-m", "streamtrain", "run", *common], capture_output=True, text=True,
                           timeout=120)                         # another process: another trainer
    assert first.returncode == 0 and "trains other layers" not in first.stderr, first.stderr[-2000:]
    assert main(["run", *common, "--set", "layers.wide.optimizer.alpha=0.3"]) == 0
    err = capsys.readouterr().err
    assert ("on this store trains other layers (its layers differ from these: layers.wide.optimizer.alpha: 0.7 in "
            "its config, 0.3 here); their updates meet in one store") in err, err
    assert "reads its input otherwise" not in err
    data = tmp_path / "clicks.csv"                              # the same fields, from a csv reader
    data.write_text("clicked," + ",".join(f"f{i}" for i in range(8)) + ",d0,d1,d2,d3\n"
                    + "".join(f"{i % 2}," + ",".join(str(i % 7) for _ in range(8)) + ",1,2,3,4\n" for i in range(3000)))
    assert main(["run", *common, "--set", "layers.wide.optimizer.alpha=0.3", "--set", f"reader.path={data}", "--set",
                 "reader.label=clicked", "--set", 'reader.numeric=["d0", "d1", "d2", "d3"]']) == 0
    assert ('on this store reads its input otherwise (numeric_transform "none" there, "log1p" here); their updates '
            "meet in one store") in capsys.readouterr().err
    from streamtrain import config as configmod, shipped
    from streamtrain.serve.service import StoreModel
    from streamtrain.serve.settings import serve_settings
    cfg = configmod.validate(configmod.load(shipped.resolve("fm"), [
        "store.backend=redis", f'store.urls=["{redis_url}"]', f"store.namespace=layers-{tmp_path.name}", "serve.port=0"]))
    source = StoreModel(cfg, serve_settings(cfg))
    try:
        source.graph()
    finally:
        source.close()
    assert ("the trainers publishing to this store train other layers (its layers differ from these: "
            "layers.wide.optimizer.alpha: 0.3 in theirs, 0.7 here): predictions will not match theirs") in capsys.readouterr().err
