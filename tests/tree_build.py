"""``python -m build`` of the checkout, one at a time across pytest-xdist's workers.

setuptools writes into the source tree while it builds (``streamtrain.egg-info``, ``build/``):
two builds of the same tree at once (``-n 2``: tests/test_wheel.py's and
tests/test_daemon_packaging.py's) race there, and one fails copying a file the other removed
("error: [Errno 2] No such file or directory"). An exclusive ``flock`` on a file named for the
tree serialises them, whatever process they run in.
"""
from __future__ import annotations

import fcntl
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m build ARGS ROOT``, holding the tree's lock while it runs."""
    name = hashlib.sha1(str(ROOT).encode()).hexdigest()[:12]
    with open(Path(tempfile.gettempdir()) / f"streamtrain-build-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return subprocess.run([sys.executable, "-m", "build", *args, str(ROOT)],
                              capture_output=True, text=True, timeout=timeout)
