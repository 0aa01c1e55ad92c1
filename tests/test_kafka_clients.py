"""SASL/SSL settings reach every Kafka client the project makes; no secret is ever printed;
kafka-python's INFO chatter and the idempotence warning are gone (issue 15, defects 4 and 8)."""
from __future__ import annotations

import logging

import pytest

from streamtrain import cli
from streamtrain.errors import ReaderError
from streamtrain.readers.kafka import admin, clients, deadletter, source
from streamtrain.readers.kafka.config import validate

SECRET = "s3cret-hunter2"
SECURITY = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "trainer", "sasl_plain_password_env": "ST_TEST_KAFKA_PASSWORD",
            "ssl_cafile": "/etc/kafka/ca.pem", "ssl_certfile": "/etc/kafka/me.pem",
            "ssl_keyfile": "/etc/kafka/me.key"}
EXPECTED = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": "trainer", "sasl_plain_password": SECRET,
            "ssl_cafile": "/etc/kafka/ca.pem", "ssl_certfile": "/etc/kafka/me.pem",
            "ssl_keyfile": "/etc/kafka/me.key"}
PRODUCE_FLAGS = ["--security-protocol", "SASL_SSL", "--sasl-mechanism", "SCRAM-SHA-512",
                 "--sasl-username", "trainer", "--ssl-cafile", "/etc/kafka/ca.pem",
                 "--ssl-certfile", "/etc/kafka/me.pem", "--ssl-keyfile", "/etc/kafka/me.key"]


class Built(Exception):
    """Raised by the recording client classes once they have their keyword arguments."""


@pytest.fixture
def built(monkeypatch):
    """Every kafka-python client class the project instantiates, replaced by one that records
    the keyword arguments it is built with (no network: this checks the plumbing; the test
    against the real broker below checks that a real consumer uses them)."""
    seen = []

    def recorder(name):
        class Client:
            DEFAULT_CONFIG: dict = {}

            def __init__(self, **kwargs):
                seen.append((name, kwargs))
                raise Built(name)
        return Client

    import kafka
    monkeypatch.setattr(source, "KafkaConsumer", recorder("consumer"))
    monkeypatch.setattr(deadletter, "KafkaProducer", recorder("dead-letter producer"))
    monkeypatch.setattr(admin, "KafkaAdminClient", recorder("topic creation"))
    monkeypatch.setattr(kafka, "KafkaProducer", recorder("streamtrain produce"))
    monkeypatch.setenv("ST_TEST_KAFKA_PASSWORD", SECRET)
    monkeypatch.setenv("STREAMTRAIN_KAFKA_SASL_PASSWORD", SECRET)
    return seen


def _reader(**extra):
    return {"type": "kafka", "bootstrap": "127.0.0.1:1", "topic": "t", "group": "g",
            "format": "criteo", "security": dict(SECURITY), **extra}


def test_the_security_settings_reach_every_client(built, tmp_path):
    assert validate(_reader()) == []
    with pytest.raises(Built):
        source.KafkaSource(_reader(), 8).loop.open()     # (on the consumer thread, normally)
    with pytest.raises(Built):
        deadletter.DeadLetter("dead", clients.producer_settings(source.KafkaSource(_reader(), 8).cfg))
    with pytest.raises(Built):
        admin.create_topic("127.0.0.1:1", "t", 2, security=dict(SECURITY))
    lines = tmp_path / "x.tsv"
    lines.write_text("1\tx\n")
    with pytest.raises(Built):
        cli.main(["produce", str(lines), "--bootstrap", "127.0.0.1:1", "--topic", "t", *PRODUCE_FLAGS])
    with pytest.raises(Built):              # --partitions: the topic is created with them too
        cli.main(["produce", str(lines), "--bootstrap", "127.0.0.1:1", "--topic", "t",
                  "--partitions", "2", *PRODUCE_FLAGS])
    names = [name for name, _ in built]
    assert names == ["consumer", "dead-letter producer", "topic creation", "streamtrain produce",
                     "topic creation"]
    for name, kwargs in built:
        assert {k: kwargs.get(k) for k in EXPECTED} == EXPECTED, name
        assert kwargs["bootstrap_servers"] in ("127.0.0.1:1", ["127.0.0.1:1"]), name


def test_a_secret_comes_inline_from_an_environment_variable_or_a_file(tmp_path, monkeypatch):
    path = tmp_path / "password"
    path.write_text(SECRET + "\n")
    monkeypatch.setenv("ST_TEST_KAFKA_PASSWORD", SECRET)
    for how in ({"sasl_plain_password": SECRET}, {"sasl_plain_password_env": "ST_TEST_KAFKA_PASSWORD"},
                {"sasl_plain_password_file": str(path)}):
        sec = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", **how}
        assert clients.check_security(sec) == []
        assert clients.security_settings(sec)["sasl_plain_password"] == SECRET


def test_no_secret_in_any_error_message(tmp_path, monkeypatch):
    monkeypatch.setenv("ST_TEST_KAFKA_PASSWORD", SECRET)
    problems = validate(_reader(security={"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN",
                                          "sasl_plain_password": SECRET,
                                          "sasl_plain_password_env": "ST_TEST_KAFKA_PASSWORD",
                                          "ssl_password": 12345678987, "sasl_plain_pasword": SECRET}))
    keys = {k for k, _ in problems}
    assert {"security.sasl_plain_password", "security.ssl_password",
            "security.sasl_plain_pasword"} <= keys, problems
    assert SECRET not in repr(problems) and "12345678987" not in repr(problems)
    monkeypatch.delenv("ST_TEST_KAFKA_PASSWORD")
    with pytest.raises(ReaderError) as err:
        clients.security_settings({"sasl_plain_password_env": "ST_TEST_KAFKA_PASSWORD"})
    assert "ST_TEST_KAFKA_PASSWORD is not set" in str(err.value)
    with pytest.raises(ReaderError) as err:
        clients.security_settings({"ssl_password_file": str(tmp_path / "missing")})
    assert "security.ssl_password_file" in str(err.value)
    src = source.KafkaSource(_reader(security={"security_protocol": "SASL_PLAINTEXT",
                                               "sasl_mechanism": "PLAIN", "sasl_plain_password": SECRET}), 8)
    assert SECRET not in src.describe() and "SASL_PLAINTEXT" in src.describe()


SASL_CONSUMER = """
import logging, sys
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout)
from streamtrain.readers.kafka import source
src = source.KafkaSource({"type": "kafka", "bootstrap": sys.argv[1], "topic": "t", "group": "g",
                          "security": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                       "sasl_plain_username": "u", "sasl_plain_password": sys.argv[2]}}, 8)
next(src.batches())
"""


def test_a_real_consumer_uses_sasl_and_never_logs_the_secret(kafka_bootstrap, caplog, tmp_path):
    """Tansu speaks no SASL: a consumer told to use it fails its handshake (so the settings
    reached a real client), without the password anywhere in its debug log. A kafka-python
    with ``bootstrap_timeout_ms`` (3.0 on) gives up within it, and the reader reports that; an
    older one retries the handshake for ever (the pyproject floor, 2.2.21), so the process is
    watched until the handshake has failed and then stopped."""
    import subprocess
    import sys
    import time
    from kafka import KafkaConsumer
    log = tmp_path / "consumer.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", SASL_CONSUMER, kafka_bootstrap, SECRET],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "SaslHandshake" not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    assert "SaslHandshake" in log.read_text() and SECRET not in log.read_text()
    if "bootstrap_timeout_ms" not in KafkaConsumer.DEFAULT_CONFIG:
        return
    caplog.set_level(logging.DEBUG)
    src = source.KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": "t", "group": "g",
                              "security": {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN",
                                           "sasl_plain_username": "u", "sasl_plain_password": SECRET},
                              "consumer": {"bootstrap_timeout_ms": 1500}}, 8)
    with pytest.raises(ReaderError) as err:
        next(src.batches())
    src.close()
    assert kafka_bootstrap in str(err.value) and SECRET not in str(err.value)
    assert "SaslHandshake" in caplog.text
    assert SECRET not in caplog.text


def test_library_logs_at_warning_unless_debug():
    root, kafka_log = logging.getLogger(), logging.getLogger("kafka")
    old = root.level
    try:
        root.setLevel(logging.INFO)
        clients.quiet_library_logs()
        assert kafka_log.level == logging.WARNING
        root.setLevel(logging.DEBUG)
        clients.quiet_library_logs()
        assert kafka_log.getEffectiveLevel() == logging.DEBUG
    finally:
        root.setLevel(old)
        kafka_log.setLevel(logging.NOTSET)


def test_a_reader_start_and_our_producers_log_no_kafka_info_and_no_idempotence_warning(
        kafka_bootstrap, kafka_topic, kafka_names, kafka_test_consumer, caplog):
    from streamtrain.produce import produce
    caplog.set_level(logging.INFO)
    topic = kafka_topic(2)
    produce([b"1\tnot criteo"] * 3, kafka_bootstrap, topic)              # bad lines: dead-lettered
    src = source.KafkaSource({"type": "kafka", "bootstrap": kafka_bootstrap, "topic": topic,
                              "group": kafka_names("g"), "format": "criteo", "stop_at_end": True,
                              "dead_letter": kafka_names("dead"), "max_wait_ms": 50,
                              "consumer": kafka_test_consumer}, 8)
    try:
        # no good line: the batch is empty, handed out only so that the job commits its offsets
        # once every batch before it is durable (never ahead of them, which could lose them)
        assert [b.size for b in src.batches()] == [0]
    finally:
        src.close()
    assert src.stats["dead_lettered"] == 3
    from_kafka = [r for r in caplog.records if r.name.startswith("kafka") and r.levelno < logging.WARNING]
    assert from_kafka == []
    assert not [r for r in caplog.records if "idempoten" in r.getMessage().lower()]
    assert any(r.name == "streamtrain.kafka" and "assigned" in r.getMessage() for r in caplog.records)


def test_security_keys_under_consumer_reach_the_dead_letter_producer_too():
    cfg = source.KafkaSource(_reader(security=None, consumer={"security_protocol": "SSL",
                                                               "ssl_cafile": "/ca.pem"}), 8).cfg
    for settings in (clients.consumer_settings(cfg), clients.producer_settings(cfg)):
        assert settings["security_protocol"] == "SSL" and settings["ssl_cafile"] == "/ca.pem"


def test_the_librarys_own_metrics_are_off_unless_the_consumer_settings_ask(monkeypatch):
    """kafka-python's sensors (recorded on every socket read and fetch) are never read by
    streamtrain: the consumer is built with ``metrics_enabled`` False where the installed
    kafka-python has the setting, and a reader's ``consumer`` section still wins."""
    seen = []

    class Client:
        DEFAULT_CONFIG = {"metrics_enabled": True}

        def __init__(self, **kwargs):
            seen.append(kwargs)
            raise Built("consumer")

    monkeypatch.setattr(source, "KafkaConsumer", Client)
    reader = {"type": "kafka", "bootstrap": "127.0.0.1:1", "topic": "t", "group": "g", "format": "criteo"}
    for extra, want in (({}, False), ({"consumer": {"metrics_enabled": True}}, True)):
        with pytest.raises(Built):
            source.KafkaSource({**reader, **extra}, 8).loop.open()
        assert seen[-1]["metrics_enabled"] is want
    Client.DEFAULT_CONFIG = {}                  # a kafka-python without the setting is not given it
    with pytest.raises(Built):
        source.KafkaSource(reader, 8).loop.open()
    assert "metrics_enabled" not in seen[-1]
