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


EXHAUST = r"""
import json, os, resource, sys
from streamtrain import checkpoint
from tests.test_checkpoint import trained_store

root, results = sys.argv[1], {}
snap = trained_store().snapshot()
checkpoint.write(root, snap, step=1)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
for free in range(8):
    held = []
    try:
        while True:
            held.append(os.open("/dev/null", os.O_RDONLY))
    except OSError:
        pass
    for _ in range(free):
        os.close(held.pop())
    try:
        results[free] = checkpoint.write(root, snap, step=10 + free, keep=3).name
    except OSError as err:
        results[free] = f"errno {err.errno}"
    for fd in held:
        os.close(fd)
    results[f"{free} left"] = sorted(p for p in os.listdir(root) if p.endswith(".tmp"))
print(json.dumps(results))
"""


def test_a_write_out_of_file_descriptors_leaves_no_temp_directory(tmp_path):
    """Issue 24 item 3: with the descriptor limit reached (a flood of connections in the same
    process), a checkpoint fails part-way; its temp directory was left behind (12 of them in
    the probe: the clean-up itself needs descriptors). The previous checkpoint stays LATEST."""
    import subprocess
    import sys
    from tests.conftest import ROOT
    out = subprocess.run([sys.executable, "-c", EXHAUST, str(tmp_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout)
    assert results["0"] == "errno 24"                     # EMFILE at once: nothing could be opened
    assert any(v.startswith("ckpt-") for k, v in results.items() if " " not in k)   # with room: written
    assert {k: v for k, v in results.items() if k.endswith("left") and v} == {}
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    snap, meta = checkpoint.read(tmp_path)               # LATEST names a whole checkpoint
    for path in tmp_path.glob("ckpt-*"):
        checkpoint.read(path)


@pytest.mark.parametrize("fails", ["savez", "fsync", "replace"])
def test_a_failed_write_removes_what_it_made_without_listing_directories(tmp_path, monkeypatch, fails):
    """Whatever step fails (a file, the fsyncs, the LATEST swap after the rename), the write's
    own files and directories are gone, even with ``shutil.rmtree`` unable to list anything."""
    import errno
    store = trained_store()
    good = checkpoint.write(tmp_path, store.snapshot(), step=1)

    def emfile(*a, **k):
        raise OSError(errno.EMFILE, "Too many open files")

    target = {"savez": (checkpoint.np, "savez"), "fsync": (checkpoint, "_fsync_file"),
              "replace": (checkpoint.os, "replace")}[fails]
    monkeypatch.setattr(*target, emfile)
    monkeypatch.setattr(checkpoint.shutil, "rmtree", lambda *a, **k: None)
    with pytest.raises(OSError):
        checkpoint.write(tmp_path, store.snapshot(), step=2, more_arrays={"graph": {"x": np.ones(3)}})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([good.name, "LATEST"])
    assert checkpoint.resolve(tmp_path) == good and checkpoint.read(tmp_path)[1]["step"] == 1
