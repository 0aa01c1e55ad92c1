"""What ``streamtrain`` tells a user: help without reStructuredText quotes, ``run``'s description
and exit codes, and a ``done:`` line whose examples/s is the whole run's (issue 15, defect 8)."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streamtrain.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("argv", [[], ["run"], ["eval"], ["serve"], ["validate"], ["produce"]])
def test_help_has_no_rst_quotes(argv, capsys):
    with pytest.raises(SystemExit) as stop:
        build_parser().parse_args([*argv, "--help"])
    assert stop.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text and "usage: streamtrain" in text


def test_run_help_has_a_description_and_the_exit_codes(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--help"])
    text = capsys.readouterr().out
    assert "Train the model of CONFIG" in text and "SIGHUP" in text
    codes = text.split("exit codes:")[1]
    for code in ("0", "1", "2"):
        assert re.search(rf"^\s+{code}\s+\S", codes, re.M), code


def test_exit_code_2_for_an_invalid_config_and_a_bad_command_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"batch_size": -1}))
    assert main(["run", str(bad)]) == 2
    assert "batch_size" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["run", "--max-examples", "many"])
    assert stop.value.code == 2


def test_eval_without_a_checkpoint_is_a_command_line_error(tmp_path, capsys):
    assert main(["eval", str(ROOT / "examples" / "synthetic.json")]) == 2
    assert "--restore" in capsys.readouterr().err
    assert main(["eval", str(ROOT / "examples" / "synthetic.json"), "--restore", str(tmp_path / "none")]) == 2
    assert f"cannot read checkpoint {tmp_path / 'none'}" in capsys.readouterr().err


def test_done_line_reports_the_whole_runs_rate(tmp_path):
    summary = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(ROOT / "examples" / "synthetic.json"),
                           "--max-examples", "12800", "--summary", str(summary), "--set", "metrics.enabled=false",
                           "--set", f"checkpoint.dir={tmp_path / 'ckpt'}", "--set", "log.every_seconds=0.05"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    done = [line for line in proc.stderr.splitlines() if " done: " in line]
    assert len(done) == 1
    rate = float(re.search(r"ex/s=(\d+)", done[0]).group(1))
    whole = json.loads(summary.read_text())
    assert "examples=12800" in done[0] and re.search(r"elapsed=[\d.]+s", done[0])
    assert rate == pytest.approx(whole["examples_per_s"], rel=0.2), (done[0], whole["examples_per_s"])
