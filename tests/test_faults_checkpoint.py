"""Disk full while checkpointing: the old checkpoint is kept, training goes on, the failure is counted."""
from __future__ import annotations

import errno
import os
import subprocess

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from streamtrain import checkpoint
from streamtrain.job import Job
from streamtrain.metrics import Metrics
from tests.fixtures_prometheus import job_config


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """A 2 MiB tmpfs (as root) at tmp/ckpt, and ``fill()`` to use up its space. Without the
    right to mount, ``fill()`` makes every later write of a checkpoint file raise ENOSPC."""
    where = tmp_path / "ckpt"
    where.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)], capture_output=True).returncode == 0

    def fill():
        if mounted:
            with open(where / "filler", "wb") as fh:
                try:
                    while True:
                        fh.write(b"\0" * 4096)
                        fh.flush()
                except OSError as err:
                    assert err.errno == errno.ENOSPC
        else:
            def full(*a, **k):
                raise OSError(errno.ENOSPC, "No space left on device (simulated)")
            monkeypatch.setattr(checkpoint.np, "savez", full)
    yield where, fill
    if mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_disk_full_keeps_the_old_checkpoint(tmp_path, fake_stream, small_disk, caplog):
    where, fill = small_disk
    fake_stream(batch_size=64, batches=9)
    job = Job(job_config(tmp_path, checkpoint={"dir": str(where), "every_batches": 3, "keep": 2}))
    metrics = Metrics(CollectorRegistry(), refresh_seconds=0)
    attempts = []

    def after_checkpoint(job, path, ok):
        attempts.append(ok)
        if len(attempts) == 1:
            fill()

    job.hooks.append(metrics.on_step)
    job.checkpoint_hooks += [metrics.on_checkpoint, after_checkpoint]
    summary = job.run()                          # the final checkpoint at shutdown fails too: said, not raised
    assert "No space left on device" in job.checkpoint_error == summary["checkpoint_error"]
    assert "final checkpoint failed" in caplog.text
    assert attempts == [True, False, False, False]           # after batches 3, 6, 9, and at the end
    assert job.trainer.batches == 9                          # training went on past the failures
    assert "checkpoint failed, keeping the previous one" in caplog.text
    v = metrics.registry.get_sample_value
    assert v("streamtrain_checkpoint_failures_total") == 3   # the final one is the job's to raise
    assert v("streamtrain_checkpoint_last_success_timestamp_seconds") > 0
    kept = sorted(p.name for p in where.iterdir() if p.name not in ("filler", "lost+found"))
    assert kept == ["LATEST", checkpoint.resolve(where).name], kept          # no temp dirs left over
    snap, meta = checkpoint.read(where)
    assert meta["step"] == 3 and meta["offsets"] == {("fake", 0): 3}
    assert all(np.isfinite(a["value"]).all() for a in snap.tables.values())
    assert job.source.closed                                  # teardown ran despite the failure
