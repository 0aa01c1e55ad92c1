"""Checkpoints: atomic write, LATEST pointer, keep-K, round trip, a failed write keeps the old one."""
import json

import numpy as np
import pytest

from streamtrain import checkpoint
from streamtrain.errors import CheckpointError
from streamtrain.context import Gradients
from streamtrain.params import ParamSpec
from streamtrain.store.memory import MemoryStore

SPEC = ParamSpec("emb.table", (2,), table=True)
DENSE = ParamSpec("fc.b", (2,), init="zeros")


def trained_store():
    store = MemoryStore()
    store.declare({SPEC.name: SPEC, DENSE.name: DENSE}, {"type": "adam"})
    ids = np.array([4, 9, 100], np.uint64)
    store.pull([], {SPEC.name: ids})
    store.push(Gradients(dense={DENSE.name: np.ones(2, np.float32)},
                         tables={SPEC.name: (ids, np.ones((3, 2), np.float32))}))
    return store


def test_round_trip_with_offsets_and_state(tmp_path):
    store = trained_store()
    path = checkpoint.write(tmp_path, store.snapshot(), step=7, examples=70,
                            offsets={("clicks", 0): 123, ("clicks", 3): 5})
    assert checkpoint.resolve(tmp_path) == path
    snap, meta = checkpoint.read(tmp_path)
    assert meta["step"] == 7 and meta["examples"] == 70
    assert meta["offsets"] == {("clicks", 0): 123, ("clicks", 3): 5}
    fresh = MemoryStore()
    fresh.declare({SPEC.name: SPEC, DENSE.name: DENSE}, {"type": "adam"})
    fresh.restore(snap)
    a, b = store.snapshot(), fresh.snapshot()
    for k in ("ids", "value", "m", "v", "t"):
        assert np.array_equal(a.tables[SPEC.name][k], b.tables[SPEC.name][k])
    for k in ("value", "m", "v", "t"):
        assert np.array_equal(a.dense[DENSE.name][k], b.dense[DENSE.name][k])
    assert json.loads((path / "meta.json").read_text())["format"] == 1


def test_keep_last_k(tmp_path):
    store = trained_store()
    paths = [checkpoint.write(tmp_path, store.snapshot(), step=i, keep=2) for i in range(4)]
    left = sorted(p.name for p in tmp_path.glob("ckpt-*"))
    assert left == [paths[2].name, paths[3].name]
    assert checkpoint.resolve(tmp_path) == paths[3]


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    store = trained_store()
    good = checkpoint.write(tmp_path, store.snapshot(), step=1)

    def disk_full(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint.np, "savez", disk_full)
    with pytest.raises(OSError):
        checkpoint.write(tmp_path, store.snapshot(), step=2)
    assert checkpoint.resolve(tmp_path) == good
    assert not list(tmp_path.glob(".*tmp"))            # no half-written directory left behind
    snap, meta = checkpoint.read(tmp_path)
    assert meta["step"] == 1


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint"):
        checkpoint.read(tmp_path)
