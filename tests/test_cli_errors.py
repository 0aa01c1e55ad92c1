"""Bad input to the ``streamtrain`` command: a clear message, exit 2, never a traceback
(issue 24, items 5 and 10). Every case runs the real command in a subprocess."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
QUIET = ["--set", "metrics.enabled=false", "--set", "checkpoint.dir=null", "--log-level", "WARNING"]


def streamtrain(*args, env=None, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "streamtrain", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})


def assert_refused(out: subprocess.CompletedProcess, *needles: str) -> None:
    assert out.returncode == 2, (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    for needle in needles:
        assert needle in out.stderr, (needle, out.stderr[-2000:])


@pytest.fixture(scope="module")
def fm_checkpoint(tmp_path_factory) -> Path:
    """A real checkpoint of examples/fm.json on the synthetic stream."""
    where = tmp_path_factory.mktemp("fm-ckpt")
    out = streamtrain("run", EXAMPLES / "fm.json", "--max-examples", 4096, "--set", "metrics.enabled=false",
                      "--set", f"checkpoint.dir={where}", "--log-level", "WARNING")
    assert out.returncode == 0, out.stderr
    assert (where / "LATEST").exists()
    return where


@pytest.fixture
def busy_port():
    """A port something else listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def kafka_config(tmp_path, **reader) -> Path:
    path = tmp_path / "kafka.json"
    path.write_text(json.dumps({
        "layers": json.loads((EXAMPLES / "lr.json").read_text())["layers"],
        "reader": {"type": "kafka", "bootstrap": "127.0.0.1:1", "group": "g", **reader}}))
    return path


# ---- the config file ------------------------------------------------------------------------
def test_a_config_that_is_not_utf8(tmp_path):
    bad = tmp_path / "latin1.json"
    bad.write_bytes('{"name": "caf\u00e9", "layers": []}'.encode("latin-1"))
    assert_refused(streamtrain("validate", bad), "not UTF-8 text: byte 0xe9 at byte offset 13")


def test_a_config_nested_100k_deep(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"layers": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert_refused(streamtrain("validate", deep), "JSON nested too deeply")


# ---- values validate used to accept ------------------------------------------------------------
@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("setting, where, needle", [
    ("batch_size=100000000000000000000", "batch_size: 100000000000000000000 is too large", "GiB of memory here"),
    ("layers.deep1.dim=1000000000", "layers[10]: the model needs at least", "layer 'deep1': output [1024, 1000000000]"),
    ("layers.emb.dim=1000000000", "layers[7]: the model needs at least", "layer 'emb': output [1024, 1, 1000000000]"),
])
def test_a_model_larger_than_the_memory_is_refused(command, setting, where, needle):
    args = (*QUIET, "--max-examples", 1000) if command == "run" else ()
    out = streamtrain(command, EXAMPLES / "deepfm.json", "--set", setting, *args)
    assert_refused(out, where, needle)


def test_the_memory_estimate_passes_every_example():
    for path in sorted(EXAMPLES.glob("*.json")):
        if path.name != "plugin_reader.json":           # imports from the repository root: checked elsewhere
            out = streamtrain("validate", path)
            assert out.returncode == 0, (path, out.stderr)


@pytest.mark.parametrize("labels, where", [
    ('reader.labels=null', "reader.labels"),
    ('reader.options={"labels": [-1, 1]}', "reader.options.labels"),
])
def test_logloss_with_labels_other_than_0_and_1(labels, where, tmp_path):
    out = streamtrain("validate", EXAMPLES / "lr.json", "--set", "reader.type=file", "--set", "reader.path=x.txt",
                      "--set", "reader.format=libsvm", "--set", labels)
    assert_refused(out, f"{where}: loss 'loss' is a logloss, which needs labels 0 and 1")
    mapped = streamtrain("validate", EXAMPLES / "lr.json", "--set", "reader.type=file", "--set",
                         "reader.path=x.txt", "--set", "reader.format=libsvm", "--set", 'reader.label_map={"-1": 0}')
    assert mapped.returncode == 0, mapped.stderr


@pytest.mark.parametrize("topics, dead", [("clicks", "clicks"), ("views,clicks", "clicks"), (["a", "b"], "b")])
def test_a_dead_letter_topic_that_is_a_source_topic(topics, dead, tmp_path):
    out = streamtrain("validate", kafka_config(tmp_path, topic=topics, dead_letter=dead))
    assert_refused(out, f"reader.dead_letter: '{dead}' is also a topic this reader reads")
    ok = streamtrain("validate", kafka_config(tmp_path, topic=topics, dead_letter=dead + "-bad"))
    assert ok.returncode == 0, ok.stderr


# ---- the command line and the environment -------------------------------------------------------
@pytest.mark.parametrize("args, env, needle", [
    (["--max-examples", "-5"], {}, "--max-examples: must be >= 1, got -5"),
    (["--max-examples", "0"], {}, "--max-examples: must be >= 1, got 0"),
    ([], {"STREAMTRAIN_MAX_EXAMPLES": "abc"}, "expected a whole number >= 1 (flag or env STREAMTRAIN_MAX_EXAMPLES), got 'abc'"),
    ([], {"STREAMTRAIN_LOG_FORMAT": "xml"}, "env STREAMTRAIN_LOG_FORMAT: expected text or json, got 'xml'"),
    ([], {"STREAMTRAIN_LOG_LEVEL": "loud"}, "env STREAMTRAIN_LOG_LEVEL: expected DEBUG, INFO, WARNING or ERROR"),
])
def test_bad_flags_and_environment_variables(args, env, needle):
    out = streamtrain("run", EXAMPLES / "synthetic.json", "--set", "metrics.enabled=false", "--set", "checkpoint.dir=null",
                      *args, env=env)
    assert_refused(out, needle)


@pytest.mark.parametrize("var, value, flag", [("RATE", "fast", "--rate"), ("LIMIT", "1e3", "--limit"),
                                              ("PARTITIONS", "four", "--partitions")])
def test_bad_environment_variables_of_produce(var, value, flag, tmp_path):
    out = streamtrain("produce", tmp_path / "x.tsv", "--bootstrap", "127.0.0.1:1", "--topic", "t",
                      env={f"STREAMTRAIN_{var}": value})
    assert_refused(out, f"argument {flag}: invalid", repr(value))


# ---- ports ------------------------------------------------------------------------------------
def test_metrics_port_in_use(busy_port):
    out = streamtrain("run", EXAMPLES / "synthetic.json", "--max-examples", 1000, "--set", "checkpoint.dir=null",
                      "--set", f"metrics.port={busy_port}")
    assert_refused(out, f"metrics.port: 127.0.0.1:{busy_port} is already in use by another process")


def test_serve_port_in_use_beside_a_run(busy_port):
    out = streamtrain("run", EXAMPLES / "synthetic.json", *QUIET, "--max-examples", 1000,
                      "--set", "serve.enabled=true", "--set", f"serve.port={busy_port}")
    assert_refused(out, f"serve.port: 127.0.0.1:{busy_port} is already in use by another process")


def test_serve_port_in_use(busy_port, redis_url, tmp_path):
    schema = json.dumps({"sparse": ["f0"], "dense": []})
    out = streamtrain("serve", EXAMPLES / "lr.json", "--set", "store.backend=redis",
                      "--set", f'store.urls=["{redis_url}"]', "--set", f"serve.port={busy_port}",
                      "--set", f"serve.schema={schema}", "--log-level", "WARNING")
    assert_refused(out, f"serve.port: 127.0.0.1:{busy_port} is already in use by another process")


# ---- --restore -------------------------------------------------------------------------------
def test_restore_a_missing_directory(tmp_path):
    out = streamtrain("run", EXAMPLES / "fm.json", *QUIET, "--restore", tmp_path / "nope")
    assert_refused(out, f"no checkpoint at {tmp_path / 'nope'}: no such directory")


def test_restore_a_dangling_latest(tmp_path, fm_checkpoint):
    (tmp_path / "LATEST").write_text("ckpt-000000000009-1\n")
    out = streamtrain("run", EXAMPLES / "fm.json", *QUIET, "--restore", tmp_path)
    assert_refused(out, "LATEST names ckpt-000000000009-1, which is not a complete checkpoint")
    latest = streamtrain("run", EXAMPLES / "fm.json", "--set", "metrics.enabled=false",
                         "--set", f"checkpoint.dir={tmp_path}", "--restore", "latest")
    assert_refused(latest, "LATEST names ckpt-000000000009-1")


def test_restore_a_damaged_archive(tmp_path, fm_checkpoint):
    import shutil
    copy = tmp_path / "ckpt"
    shutil.copytree(fm_checkpoint, copy)
    latest = copy / (copy / "LATEST").read_text().strip()
    (latest / "tables" / "0.npz").write_bytes((latest / "tables" / "0.npz").read_bytes()[:100])
    out = streamtrain("run", EXAMPLES / "fm.json", *QUIET, "--max-examples", 1000, "--restore", copy)
    assert_refused(out, "tables/0.npz is damaged (BadZipFile")


@pytest.mark.parametrize("model, sets, needle", [
    ("fm.json", ["--set", "layers.emb.dim=16"],
     "parameter 'emb.table' is a table of rows [8] in the checkpoint but a table of rows [16] in this model"),
    ("deepfm.json", [], "this model's parameter(s) deep1.W, deep1.b, deep2.W, deep2.b, deep_out.W, deep_out.b "
                        "are not in the checkpoint"),
])
def test_restore_a_checkpoint_of_another_model(model, sets, needle, fm_checkpoint, tmp_path):
    ckpt_dir = tmp_path / "own"
    out = streamtrain("run", EXAMPLES / model, *sets, "--set", "metrics.enabled=false", "--max-examples", 1000,
                      "--set", f"checkpoint.dir={ckpt_dir}", "--restore", fm_checkpoint)
    assert_refused(out, "is of another model", needle)
    assert not ckpt_dir.exists()                  # no final checkpoint of the untrained model


def test_a_csv_whose_categorical_columns_are_all_dropped_is_refused_naming_its_numeric_ones(tmp_path):
    data = tmp_path / "numeric.csv"
    data.write_text("a,b,c,clicked\n0.5,0.25,x,1\n0.1,0.75,y,0\n")
    out = streamtrain("run", "lr", "--set", "reader.type=file", "--set", f"reader.path={data}", "--set",
                      "reader.format=csv", "--set", "reader.label=clicked", "--set", 'reader.numeric=["a","b"]',
                      "--set", 'layers.0.exclude=["c"]', *QUIET)
    assert_refused(out, "layers.sparse: layer 'sparse': no categorical fields to read: the stream has only "
                        "excluded ones (its numeric columns: a, b); this model needs at least one")


def test_a_home_relative_path_in_the_config_is_the_home_directorys(tmp_path):
    """'~/clicks.csv' in a config was read as a file under a directory named '~' (no such file), and
    checkpoint.dir '~/ckpts' made a directory named '~' in the working directory."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "clicks.csv").write_text("clicked,a\n" + "".join(f"{i % 2},{i % 5}\n" for i in range(300)))
    out = streamtrain("run", "lr", "--set", "reader.type=file", "--set", "reader.path=~/clicks.csv", "--set",
                      "reader.format=csv", "--set", "reader.label=clicked", "--set", "metrics.enabled=false",
                      "--set", "checkpoint.dir=~/ckpts", env={"HOME": str(home)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert (home / "ckpts" / "LATEST").exists() and not (ROOT / "~").exists()
    out = streamtrain("run", "lr", "--set", "reader.type=file", "--set", f"reader.path={tmp_path}/*.csv", "--set",
                      "reader.format=csv", *QUIET)
    assert out.returncode == 1 and "no such file (a pattern is not expanded: a reader reads one file)" in out.stderr


def test_produce_names_a_missing_file_before_it_waits_for_the_broker(tmp_path):
    """It tried the broker first and, with none answering, said only 'Unable to bootstrap'."""
    out = streamtrain("produce", "--bootstrap", "127.0.0.1:1", "--topic", "t", tmp_path / "nope.tsv", timeout=30)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines()[-1] == f"streamtrain produce: cannot open '{tmp_path / 'nope.tsv'}': no such file"


def test_a_misspelt_kafka_client_setting_is_a_config_error_with_its_near_name():
    """'check_crc' passed validate and stopped the run when the consumer was built (exit 1)."""
    reader = json.dumps({"type": "kafka", "bootstrap": "127.0.0.1:1", "topic": "t", "group": "g", "format": "criteo",
                         "consumer": {"check_crc": False, "check_crcs": False}, "producer": {"lingerms": 5}})
    out = streamtrain("validate", "lr", "--set", f"reader={reader}")
    assert_refused(out, "reader.consumer: not a kafka-python KafkaConsumer setting: 'check_crc' (did you mean "
                        "'check_crcs'?)", "reader.producer: not a kafka-python KafkaProducer setting: 'lingerms' "
                        "(did you mean 'linger_ms'?)")


def test_a_summary_that_cannot_be_written_is_refused_before_the_run_or_said_after_it(tmp_path):
    """--summary in a directory that does not exist ended the run, after all of its training,
    with a traceback; a disk that fills up at the end did the same."""
    out = streamtrain("run", "synthetic", "--set", "reader.examples=2000", "--summary", str(tmp_path / "no" / "s.json"),
                      *QUIET)
    assert_refused(out, f"--summary: cannot write the summary to {tmp_path / 'no' / 's.json'}: its directory "
                        f"{tmp_path / 'no'} does not exist")
    if os.path.exists("/dev/full"):
        out = streamtrain("run", "synthetic", "--set", "reader.examples=2000", "--summary", "/dev/full", *QUIET)
        assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr[-2000:]
        assert out.stderr.strip().splitlines()[-1] == \
            "streamtrain: cannot write the summary to /dev/full: No space left on device"


def test_a_checkpoint_dir_that_cannot_be_made_is_refused_before_the_run(tmp_path):
    """Under a file the final checkpoint failed after the whole run (exit 3); nothing is made
    before the run (a refused run leaves no directory behind)."""
    (tmp_path / "afile").write_text("")
    out = streamtrain("run", "synthetic", "--set", "reader.examples=2000", "--set", "metrics.enabled=false",
                      "--set", f"checkpoint.dir={tmp_path / 'afile' / 'ckpt'}", "--log-level", "WARNING")
    assert_refused(out, f"checkpoint.dir: cannot write checkpoints to {tmp_path / 'afile' / 'ckpt'}: "
                        f"{tmp_path / 'afile'} is a file, not a directory")
    out = streamtrain("run", "synthetic", "--set", "reader.examples=2000", "--set", "metrics.enabled=false",
                      "--set", f"checkpoint.dir={tmp_path / 'new' / 'ckpt'}", "--log-level", "WARNING")
    assert out.returncode == 0 and (tmp_path / "new" / "ckpt").is_dir(), out.stderr[-2000:]


def test_restore_a_checkpoint_of_other_fields_says_which(fm_checkpoint, tmp_path):
    """A column added to (or renamed in) the log keeps the weights of the fields both have; the
    run says which fields differ instead of carrying on silently."""
    data = tmp_path / "clicks.csv"
    data.write_text("clicked,f0,f1,site,d0,d1,d2,d3\n"
                    + "".join(f"{i % 2},{i % 7},{i % 5},s{i % 3},0.5,1,2,3\n" for i in range(300)))
    out = streamtrain("run", EXAMPLES / "fm.json", "--set", f"reader.path={data}", "--set", "reader.label=clicked",
                      "--set", 'reader.numeric=["d0", "d1", "d2", "d3"]', "--set", "reader.numeric_transform=none",
                      *QUIET, "--restore", fm_checkpoint)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("was trained on other categorical fields than this stream's: only in the checkpoint f2, f3, f4, f5, "
            "f6, f7, only in this stream site (the weights of the fields both have carry over)") in out.stderr
    assert "numeric fields" not in out.stderr          # the same ones, read as the synthetic stream gave them


def test_restore_a_checkpoint_of_other_layers_says_what_differs(fm_checkpoint):
    """Weights of the same shapes fit layers that compute something else: the run restores,
    naming what changed since the checkpoint (eval and serve --restore say the same)."""
    out = streamtrain("run", EXAMPLES / "fm.json", "--set", "layers.wide.optimizer.alpha=0.3", "--set",
                      "layers.fm.reduce=false", "--set", 'layers.logit.inputs=["wide_sum", "linear", "bias"]',
                      *QUIET, "--max-examples", 5000, "--restore", fm_checkpoint)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ("its layers differ from these: layers.wide.optimizer.alpha: 0.7 in the checkpoint, 0.3 here; "
            'layers.fm.reduce: true in the checkpoint, false here; layers.logit.inputs: ["wide_sum", "linear", '
            '"fm", "bias"] in the checkpoint, ["wide_sum", "linear", "bias"] here') in out.stderr
    same = streamtrain("eval", EXAMPLES / "fm.json", *QUIET, "--max-examples", 1000, "--restore", fm_checkpoint)
    assert same.returncode == 0 and "layers differ" not in same.stderr, same.stderr[-2000:]
