"""``streamtrain.heap``: glibc's malloc keeps large buffers for every job (Kafka or file), unless
the user chose malloc settings (each case in a fresh process: the setting is process-wide)."""
import os
import platform
import subprocess
import sys

import pytest

PROBE = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
from streamtrain import startup
from streamtrain import heap
startup.for_job({"reader": {"type": sys.argv[1]}})
print(json.dumps({"applied": heap._applied, "again": heap.keep_large_buffers() if sys.argv[1] == "kafka" else None}))
"""


def _run(reader: str, **env):
    clean = {k: v for k, v in os.environ.items() if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                                                                "GLIBC_TUNABLES")}
    out = subprocess.run([sys.executable, "-c", PROBE, reader], capture_output=True, text=True, timeout=60,
                         env={**clean, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout


glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


@glibc
def test_a_kafka_job_keeps_large_buffers_in_the_heap():
    assert '"applied": true, "again": true' in _run("kafka")


@glibc
def test_a_file_job_keeps_large_buffers_in_the_heap_too():
    assert '"applied": true' in _run("file")


@pytest.mark.parametrize("env", [{"MALLOC_MMAP_THRESHOLD_": "131072"}, {"MALLOC_TRIM_THRESHOLD_": "131072"},
                                 {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}])
def test_the_users_malloc_settings_win(env):
    out = _run("kafka", **env)
    assert '"applied": false' in out and "malloc settings left as" in out
