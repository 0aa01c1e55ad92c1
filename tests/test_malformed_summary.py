"""The end of a run says which lines it skipped and why; a stream whose every line was skipped
trained nothing and says so (exit 1), instead of ``done: waiting for the first batch`` and exit 0.
Every case runs the real command on a CSV as a user writes it."""
from __future__ import annotations

import doctest
import json
import subprocess
import sys
from pathlib import Path

from streamtrain.readers import malformed

ROOT = Path(__file__).resolve().parents[1]
QUIET = ["--set", "metrics.enabled=false", "--set", "checkpoint.dir=null"]
LABEL = "label {} (a label missing, not a number, or not in the reader's labels; label_map maps other values, numbers or text, to them)"


def run_csv(path: Path, summary: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamtrain", "run", "lr", "--set", "reader.type=file",
                           "--set", f"reader.path={path}", "--set", "reader.format=csv", "--set", "reader.label=clicked",
                           "--summary", str(summary), *QUIET], capture_output=True, text=True, timeout=120, cwd=ROOT)


def write(path: Path, labels: list[str]) -> Path:
    path.write_text("a,b,clicked\n" + "".join(f"{i % 7},{i % 11},{y}\n" for i, y in enumerate(labels)))
    return path


def test_every_line_malformed_is_an_error_naming_the_reason(tmp_path):
    done = run_csv(write(tmp_path / "yes_no.csv", ["yes", "no"] * 600), tmp_path / "s.json")
    assert done.returncode == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "done: nothing trained" in done.stderr
    assert f"1200 lines skipped as malformed: {LABEL.format(1200)}" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"streamtrain: nothing was trained: every one of the 1200 lines of the stream was malformed: "
        f"{LABEL.format(1200)}")
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["examples"] == 0 and summary["malformed_by_reason"]["label"] == 1200


def test_eval_of_a_stream_whose_every_line_is_malformed_is_the_same_error(tmp_path):
    """``eval`` ended such a stream with ``done: waiting for the first batch`` and exit 0, and the
    lines it skipped were not said."""
    ckpt = tmp_path / "ckpt"
    done = subprocess.run([sys.executable, "-m", "streamtrain", "run", "lr", "--set", f"reader.path={write(tmp_path / 'ok.csv', ['1', '0'] * 600)}",
                           "--set", "reader.label=clicked", "--set", "metrics.enabled=false", "--set", f"checkpoint.dir={ckpt}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", "streamtrain", "eval", "lr", "--restore", str(ckpt), "--set",
                           f"reader.path={write(tmp_path / 'yes_no.csv', ['yes', 'no'] * 600)}", "--set", "reader.label=clicked",
                           "--set", "metrics.enabled=false"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"1200 lines skipped as malformed: {LABEL.format(1200)}" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"streamtrain: nothing was scored: every one of the 1200 lines of the stream was malformed: {LABEL.format(1200)}")
    assert "done: nothing scored" in done.stderr
    (tmp_path / "empty.csv").write_text("a,b,clicked\n")        # a header alone: said, exit 0 (as run)
    done = subprocess.run([sys.executable, "-m", "streamtrain", "eval", "lr", "--restore", str(ckpt), "--set",
                           f"reader.path={tmp_path / 'empty.csv'}", "--set", "reader.label=clicked",
                           "--set", "metrics.enabled=false"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1].endswith(
        f"WARNING streamtrain: nothing was scored: {tmp_path / 'empty.csv'} holds no example line (it is empty, or a header alone)")


def test_some_lines_malformed_are_counted_by_reason_at_the_end(tmp_path):
    done = run_csv(write(tmp_path / "mixed.csv", ["1", "0", "yes"] * 400), tmp_path / "s.json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done: examples=800 " in done.stderr and " malformed=400 " in done.stderr
    assert f"WARNING streamtrain: 400 lines skipped as malformed: {LABEL.format(400)}" in done.stderr


def test_an_empty_stream_trains_nothing_and_says_so_in_a_warning(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    done = run_csv(empty, tmp_path / "s.json")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "done: nothing trained" in done.stderr and "malformed" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(
        f"WARNING streamtrain: nothing was trained: {empty} holds no example line (it is empty, or a header alone)")


def test_describe_doctest():
    assert doctest.testmod(malformed).failed == 0


def test_the_same_file_trains_with_label_maps_text_keys(tmp_path):
    path = write(tmp_path / "yes_no.csv", ["yes", "no"] * 600)
    done = subprocess.run([sys.executable, "-m", "streamtrain", "run", "lr", "--set", "reader.type=file",
                           "--set", f"reader.path={path}", "--set", "reader.format=csv", "--set", "reader.label=clicked",
                           "--set", 'reader.label_map={"yes": 1, "no": 0}', "--summary", str(tmp_path / "s.json"),
                           *QUIET], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["examples"] == 1200 and summary["malformed"] == 0
