"""The end of a ``streamtrain`` process (``cli.entry``): it skips the interpreter's teardown, and
still does what that teardown would have done that matters (threads, atexit, streams)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

EXIT = """
import atexit, sys, threading, time
from pathlib import Path
from streamtrain import cli
out = Path(sys.argv[1])
atexit.register(lambda: (out / "atexit").write_text("ran"))
def late():
    time.sleep(0.3)
    (out / "thread").write_text("finished")
threading.Thread(target=late).start()              # not a daemon: the interpreter would wait
sys.stdout.write("no newline, still buffered")
cli._exit(3)
"""


def test_exit_waits_for_threads_runs_atexit_flushes_and_keeps_the_code(tmp_path):
    out = subprocess.run([sys.executable, "-c", EXIT, str(tmp_path)], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 3, out.stderr
    assert out.stdout == "no newline, still buffered"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "finished"


def test_a_run_with_the_embedded_redis_server_leaves_no_server_behind(tmp_path):
    """The embedded redis-server (stopped when the job closes its store, and by an atexit
    function should that not happen) is not running after the process ends, and its directory
    is gone."""
    summary = tmp_path / "summary.json"
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-m", "streamtrain", "run", "examples/synthetic.json",
                          "--max-examples", "2000", "--summary", str(summary), "--log-level", "WARNING",
                          "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
                          "--set", "store.backend=redis"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr
    assert '"examples": 2000' in summary.read_text()
    assert not list(tmp_path.glob("streamtrain-redis-*"))
    running = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            running.append(cmdline.read_bytes())
        except OSError:
            continue
    assert not [c for c in running if str(tmp_path).encode() in c]
