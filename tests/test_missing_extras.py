"""A job that needs a package of an extra that is not installed (``serve``: uvicorn, starlette;
``compression``: lz4, zstandard, python-snappy) stops with exit code 2 and one line naming the
package and the ``pip install`` that adds it: never an ImportError's traceback, and never a
Kafka offset committed past what was trained.

The commands run as users run them (``streamtrain ...`` in a process of its own), with the
packages made unimportable in that process (an import hook raising ``ModuleNotFoundError``, as
a missing package does); the Kafka test uses a real broker.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from streamtrain.produce import produce
from tests.kafka_broker import committed_offsets, end_offsets

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]

# streamtrain's command line with some packages unimportable: python -c HIDING NAMES ARGS...
HIDING = """
import sys
from importlib.abc import MetaPathFinder

class Hidden(MetaPathFinder):
    def __init__(self, names):
        self.names = names

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Hidden(set(sys.argv[1].split(","))))
sys.argv = ["streamtrain", *sys.argv[2:]]
from streamtrain.__main__ import entry
entry()
"""


def without(names: str, *args, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDING, names, *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def last_line(done: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def test_serving_beside_training_without_the_serve_extra_is_exit_2_before_training():
    done = without("uvicorn", "run", "synthetic", "--max-examples", "256", "--set", "serve.enabled=true",
                   "--set", "serve.port=0", "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null")
    assert done.returncode == 2
    assert last_line(done) == ("streamtrain: serve.enabled (predictions served beside training) needs the 'serve' "
                               "extra, and uvicorn is not installed: pip install 'streamtrain[serve]'")
    assert "examples=" not in done.stderr                  # nothing trained


def test_streamtrain_serve_without_the_serve_extra_is_exit_2():
    done = without("uvicorn,starlette", "serve", "synthetic")
    assert done.returncode == 2
    assert last_line(done) == ("streamtrain: streamtrain serve needs the 'serve' extra, and uvicorn and starlette "
                               "are not installed: pip install 'streamtrain[serve]'")


def test_produce_refuses_a_codec_whose_package_is_missing(tmp_path):
    log = tmp_path / "x.tsv"
    log.write_text("1\t2\n")
    done = without("snappy,cramjam", "produce", "--bootstrap", "127.0.0.1:1", "--topic", "t",
                   "--compression", "snappy", log)
    assert done.returncode == 2
    assert last_line(done) == ("streamtrain produce: --compression snappy needs python-snappy, which is not "
                               "installed: pip install 'streamtrain[compression]'")


def _lines(start: int, n: int) -> list[bytes]:
    return [b"\t".join([str(i % 2).encode(), *[b"%d" % (i % 7)] * 13, *[b"%08x" % (i % 97)] * 26])
            for i in range(start, start + n)]


@pytest.mark.parametrize("codec,packages", [("lz4", "lz4"), ("snappy", "snappy,cramjam")])
def test_a_compressed_batch_without_its_codec_stops_the_trainer_after_committing_what_it_trained(
        codec, packages, kafka_bootstrap, kafka_topic, kafka_names, kafka_job_config, tmp_path):
    pytest.importorskip({"lz4": "lz4", "snappy": "snappy"}[codec])
    topic, group = kafka_topic(1), kafka_names("g")
    produce(_lines(0, 1000), kafka_bootstrap, topic)                                  # plain: offsets 0..999
    produce(_lines(1000, 500), kafka_bootstrap, topic, producer_settings={"compression_type": codec})
    cfg = tmp_path / "job.json"
    cfg.write_text(json.dumps(kafka_job_config(topic, group, batch_size=100, stop_at_end=True)))

    done = without(packages, "run", cfg)
    assert done.returncode == 2, done.stderr[-3000:]
    line = last_line(done)
    assert line.startswith(f"streamtrain: kafka reader: Libraries for {codec} compression codec not found "
                           f"(topic '{topic}' partition 0, record batch at offset 1000): the topic's record "
                           f"batches are {codec}-compressed"), line
    assert line.endswith("pip install 'streamtrain[compression]' (lz4, zstandard, python-snappy). What was trained "
                         "before it is committed; the reader resumes there once it is installed")
    assert committed_offsets(kafka_bootstrap, topic, group) == {0: 1000}   # all it trained, nothing past it

    # with the package: the restarted trainer resumes at the compressed batch and reads the rest
    done = subprocess.run([sys.executable, "-m", "streamtrain", "run", str(cfg), "--summary", str(tmp_path / "b.json")],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "b.json").read_text())["examples"] == 500
    assert committed_offsets(kafka_bootstrap, topic, group) == end_offsets(kafka_bootstrap, topic) == {0: 1500}
