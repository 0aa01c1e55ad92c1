"""A checkpoint holds the whole AutoML search (streamtrain/automl/attach.py, replay.py): a job
stopped mid-stream and restored into a new job goes on exactly as the uninterrupted job did:
the same replay buffer, the same examples replayed by the next cold newborn, the same decisions
and the same progressive predictions, to the bit."""
from __future__ import annotations

import json

import numpy as np
import pytest

from streamtrain import checkpoint
from streamtrain.automl.trainer import AutoTrainer
from streamtrain.job import Job

from .automl_helpers import planted_stream, small_job

ROWS, STOP = 12_000, 3_000
REPLAY = AutoTrainer._replay


def write_csv(tmp_path) -> None:
    """The planted stream (automl_helpers) as CSV files: ``planted.csv``, and ``rest.csv``, its
    rows after the first ``STOP`` (a file source does not seek: a restored job reads on there)."""
    lines = []
    stream = planted_stream(seed=5)
    while len(lines) < ROWS:
        b = next(stream)
        ids = np.stack([b.sparse[f"f{i}"].ids for i in range(4)], axis=1)
        lines += [",".join([str(int(y))] + [str(int(v)) for v in row]) for y, row in zip(b.labels, ids)]
    for name, rows in (("planted.csv", lines[:ROWS]), ("rest.csv", lines[STOP:ROWS])):
        (tmp_path / name).write_text("\n".join(["label,f0,f1,f2,f3"] + rows) + "\n")


def job_config(tmp_path, name: str, data: str = "planted.csv", span: bool = False) -> dict:
    """The job on ``data``, its checkpoints in ``tmp_path / name`` (one directory per job;
    ``span``: the start set spans the terms, + deep and + FM live from the first example)."""
    if not (tmp_path / data).exists():
        write_csv(tmp_path)
    over = {"reader": {"type": "file", "path": str(tmp_path / data), "format": "csv", "label": "label"},
            "checkpoint": {"dir": str(tmp_path / name), "every_seconds": 0}}
    # deep_batch 100 (not 10): a cold deep newborn replays 3,000 examples in steps of 100
    cfg = small_job(over, replay=3000, grace=500, patience=1500, explore=0.9, seed=1, span=span)
    space = cfg["automl"]["space"]
    space[1]["values"] = [0.03, 0.1, 0.3, 1.0, 3.0]
    space[2]["values"] = [0.001, 0.003, 0.01, 0.03]
    space[3]["values"], space[3]["start"] = [100, 1000], 100
    return cfg


def recorded(job: Job, monkeypatch) -> dict:
    """Run ``job``; what it did after its first example: each step's served predictions, each
    cold newborn's replay (its epoch, and the labels and ids of every batch it learnt)."""
    out = {"predictions": [], "replays": []}

    def spy(self, cand):
        out["replays"].append((cand.epoch, [np.concatenate([b.labels] + [s.ids.astype(np.float64)
                                                                         for s in b.sparse.values()])
                                            for b in self.recent]))
        REPLAY(self, cand)
    monkeypatch.setattr(AutoTrainer, "_replay", spy)
    job.hooks.append(lambda job, batch, result: out["predictions"].append(np.array(result.predictions)))
    out["summary"] = job.run()
    out["search"] = job.trainer.search.to_json()
    return out


@pytest.mark.parametrize("span", [False, True])
def test_a_restored_search_goes_on_as_the_uninterrupted_one(tmp_path, monkeypatch, span):
    whole = recorded(Job(job_config(tmp_path, "whole", span=span)), monkeypatch)

    first = Job(job_config(tmp_path, "first", span=span), max_examples=STOP)
    part = recorded(first, monkeypatch)
    assert part["summary"]["examples"] == STOP
    buffer = list(first.trainer.recent)
    assert sum(b.size for b in buffer) == 3000 and first.trainer.replayed > 0
    _, meta = checkpoint.read(first.last_checkpoint)
    assert meta["automl_replay"]["replayed"] == first.trainer.replayed
    assert sum(b["rows"] for b in meta["automl_replay"]["batches"]) == 3000

    again = Job(job_config(tmp_path, "again", span=span), restore=first.last_checkpoint)
    again._build(next(iter(again.source.batches())))
    try:    # the buffer, array by array, and the search as the first job left them
        restored = list(again.trainer.recent)
        assert [b.size for b in restored] == [b.size for b in buffer]
        for mine, theirs in zip(restored, buffer):
            np.testing.assert_array_equal(mine.labels, theirs.labels)
            assert mine.sparse.keys() == theirs.sparse.keys() and mine.dense_names == theirs.dense_names
            for f, s in theirs.sparse.items():
                np.testing.assert_array_equal(mine.sparse[f].ids, s.ids)
                np.testing.assert_array_equal(mine.sparse[f].offsets, s.offsets)
        assert again.trainer.replayed == first.trainer.replayed
        assert again.trainer.search.to_json() == json.loads(json.dumps(first.trainer.search.to_json()))
    finally:
        again.finish()

    rest = recorded(Job(job_config(tmp_path, "rest", "rest.csv", span), restore=first.last_checkpoint), monkeypatch)
    assert rest["summary"]["examples"] == ROWS
    # the next cold newborns replay what they replayed without the restart ...
    later = [r for r in whole["replays"] if r[0] >= part["search"]["next_epoch"]]
    assert later and len(rest["replays"]) == len(later)
    for (epoch, batches), (epoch_then, batches_then) in zip(rest["replays"], later):
        assert epoch == epoch_then and len(batches) == len(batches_then) >= 3
        for mine, theirs in zip(batches, batches_then):
            np.testing.assert_array_equal(mine, theirs)
    # ... and everything else of the search is restored too: the slots, their progressive
    # losses, the pair sums of the bounds, the proposals' random state, the champion
    assert rest["search"] == whole["search"]
    steps = STOP // 1000
    assert len(rest["predictions"]) == len(whole["predictions"]) - steps
    for mine, theirs in zip(rest["predictions"], whole["predictions"][steps:]):
        np.testing.assert_array_equal(mine, theirs)


def test_a_checkpoint_without_a_replay_buffer_still_restores(tmp_path, monkeypatch):
    """A checkpoint written before the buffer was saved: the search restores, the buffer
    starts empty and refills."""
    first = Job(job_config(tmp_path, "first"), max_examples=STOP)
    first.run()
    meta_file = checkpoint.resolve(first.last_checkpoint) / "meta.json"
    meta = json.loads(meta_file.read_text())
    del meta["automl_replay"], meta["files"]["arrays"]
    meta_file.write_text(json.dumps(meta))
    again = Job(job_config(tmp_path, "again"), max_examples=STOP + 2000, restore=first.last_checkpoint)
    summary = again.run()
    assert summary["examples"] == STOP + 2000
    assert again.trainer.search.next_epoch >= first.trainer.search.next_epoch
    assert sum(b.size for b in again.trainer.recent) == 2000
