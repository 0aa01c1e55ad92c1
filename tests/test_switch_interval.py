"""``switch_interval_ms``: ``streamtrain run`` sets Python's thread switch interval while the job
runs (the parse thread waits at most that long for the GIL after each compiled call) and puts
the previous one back when the run ends."""
from __future__ import annotations

import sys

import pytest

from streamtrain.cli import main

SEEN: list[float] = []


def make_reader(n: int = 64):
    """A plug-in reader that notes the switch interval while the job reads it."""
    def reader():
        for i in range(n):
            SEEN.append(sys.getswitchinterval())
            yield {"label": i % 2, "user": f"u{i % 7}"}
    return reader


LAYERS = ('[{"name": "sparse", "type": "sparse_input"},'
          ' {"name": "wide", "type": "embedding", "inputs": ["sparse"], "dim": 1, "shared": true},'
          ' {"name": "logit", "type": "sum_pooling", "inputs": ["wide"]},'
          ' {"name": "loss", "type": "logloss", "inputs": ["logit"]}]')


@pytest.mark.parametrize("sets, expected", [([], 0.001), (["switch_interval_ms=0.25"], 0.00025)])
def test_the_run_sets_the_switch_interval_and_restores_it(tmp_path, sets, expected):
    config = tmp_path / "job.json"
    config.write_text('{"reader": {"type": "plugin", "factory": "tests.test_switch_interval:make_reader"},'
                      f' "batch_size": 16, "layers": {LAYERS}}}')
    before = sys.getswitchinterval()
    SEEN.clear()
    args = ["run", str(config), "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
            "--log-level", "WARNING"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    assert len(SEEN) == 64 and SEEN == pytest.approx([expected] * 64)
    assert sys.getswitchinterval() == before


def test_a_switch_interval_that_is_not_positive_is_a_config_error(tmp_path, capsys):
    config = tmp_path / "job.json"
    config.write_text(f'{{"reader": {{"type": "synthetic"}}, "switch_interval_ms": 0, "layers": {LAYERS}}}')
    assert main(["validate", str(config)]) == 2
    assert "switch_interval_ms" in capsys.readouterr().err
