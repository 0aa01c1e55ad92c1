from streamtrain.layers_diff import differences, say


def test_layers_added_removed_and_changed_are_named_in_order():
    saved = [{"name": "a", "type": "fc", "dim": 4}, {"name": "b", "type": "relu"}]
    ours = [{"name": "a", "type": "fc", "dim": 4, "bias": False}, {"name": "c", "type": "tanh"}]
    assert differences(saved, ours) == ["layer 'b' only in the checkpoint", "layer 'c' only in this config",
                                        "layers.a.bias: absent in the checkpoint, false here"]
    assert say(saved, saved) is None and say(None, ours) is None      # a checkpoint that records none


def test_a_long_list_is_cut():
    saved = [{"name": "a", **{f"k{i}": i for i in range(9)}}]
    ours = [{"name": "a", **{f"k{i}": i + 1 for i in range(9)}}]
    said = say(saved, ours)
    assert said.startswith("its layers differ from this config's: layers.a.k0: 0 in the checkpoint, 1 here; ")
    assert said.endswith("layers.a.k5: 5 in the checkpoint, 6 here; and 3 more")
