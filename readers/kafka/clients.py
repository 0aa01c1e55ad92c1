"""The settings of every kafka-python client the project makes, built in one place.

The consumer (``consumer_settings``), the dead-letter producer (``producer_settings``),
``streamtrain produce`` and topic creation (``client_settings``) all take the same
``security`` section, so SASL/SSL reaches each of them:

    "security": {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
                 "sasl_plain_username": "trainer", "sasl_plain_password_env": "KAFKA_PASSWORD",
                 "ssl_cafile": "/etc/kafka/ca.pem"}

A secret (``sasl_plain_password``, ``ssl_password``) is given inline, or by the name of an
environment variable (``<key>_env``) or a file (``<key>_file``, one trailing newline
dropped). No secret is ever put in a message: problems name the key, never its value.

``quiet_library_logs()`` sets kafka-python's loggers to WARNING unless the root level is
DEBUG (a start or a rebalance otherwise logs ~40 INFO lines), and drops their lines about a
frame refused as too large (the reader says it once).
"""
from __future__ import annotations

import logging
import os

from streamtrain.errors import ReaderError
from streamtrain.schema import Option, check_options

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI")
SECRETS = ("sasl_plain_password", "ssl_password")
_path = Option(None, (str, type(None)), doc="a file path")


def _secret_check(value) -> str | None:
    if value is None or (isinstance(value, str) and value):
        return None
    return "expected a non-empty string (value not shown)"


SECURITY_OPTIONS = {
    "security_protocol": Option("PLAINTEXT", (str,), choices=PROTOCOLS),
    "sasl_mechanism": Option(None, (str, type(None)), choices=(None, *MECHANISMS)),
    "sasl_plain_username": Option(None, (str, type(None))),
    "sasl_kerberos_service_name": Option(None, (str, type(None))),
    "ssl_cafile": _path, "ssl_certfile": _path, "ssl_keyfile": _path, "ssl_crlfile": _path,
    "ssl_check_hostname": Option(True, (bool,)),
    **{k: Option(None, check=_secret_check, doc="a secret, inline") for k in SECRETS},
    **{f"{k}_env": Option(None, (str, type(None)), doc="environment variable holding it") for k in SECRETS},
    **{f"{k}_file": Option(None, (str, type(None)), doc="file holding it") for k in SECRETS},
}

# Tansu holds a join for about half the session timeout; these give ~3 s joins (docs/kafka.md).
CONSUMER_DEFAULTS = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
    "max_poll_interval_ms": 10000,
    "fetch_max_bytes": 16 << 20,       # a poll drains a whole fetch: bounds the work between polls
    "max_partition_fetch_bytes": 4 << 20,
    "fetch_max_wait_ms": 100,
}
# acks=1 without idempotence, said explicitly: kafka-python 3 otherwise enables idempotence by
# default and warns on every producer that it had to turn it off for acks=1
DEAD_LETTER_DEFAULTS = {"linger_ms": 20, "acks": 1, "enable_idempotence": False}


def check_security(sec) -> list[tuple[str, str]]:
    """Problems of a ``security`` section as (key, message); secrets never echoed."""
    if sec is None:
        return []
    if not isinstance(sec, dict):
        return [("", "expected an object of SASL/SSL settings")]
    problems = check_options(SECURITY_OPTIONS, sec, what="security")
    for key in SECRETS:
        given = [k for k in (key, f"{key}_env", f"{key}_file") if sec.get(k) is not None]
        if len(given) > 1:
            problems.append((key, f"give one of {', '.join(given)}, not several"))
    if str(sec.get("security_protocol", "")).startswith("SASL") and not sec.get("sasl_mechanism"):
        problems.append(("sasl_mechanism", "required with a SASL security_protocol"))
    return problems


def security_settings(sec: dict | None) -> dict:
    """kafka-python keyword arguments of a checked ``security`` section, secrets resolved."""
    out = {}
    for key, value in (sec or {}).items():
        if value is None or key.endswith(("_env", "_file")) or key in SECRETS:
            continue
        out[key] = value
    for key in SECRETS:
        secret = _secret(sec or {}, key)
        if secret is not None:
            out[key] = secret
    return out


def _secret(sec: dict, key: str) -> str | None:
    if sec.get(key) is not None:
        return sec[key]
    var = sec.get(f"{key}_env")
    if var is not None:
        if var not in os.environ:
            raise ReaderError(f"kafka security.{key}_env: environment variable {var} is not set")
        return os.environ[var]
    path = sec.get(f"{key}_file")
    if path is not None:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as err:
            raise ReaderError(f"kafka security.{key}_file: cannot read {path} ({err.strerror})") from None
        return text[:-1] if text.endswith("\n") else text
    return None


def client_settings(bootstrap, sec: dict | None = None) -> dict:
    """What every client gets: the bootstrap servers and the security settings."""
    return {"bootstrap_servers": bootstrap, **security_settings(sec)}


def patient(cls) -> dict:
    """Settings giving a kafka-python client ``cls`` 15 s to reach a broker when it is made:
    kafka-python 2.2 gives 2 s (``api_version_auto_timeout_ms``) and then raises
    NoBrokersAvailable, which a loaded machine exceeds just after a broker (re)starts;
    kafka-python 3 already waits 30 s (``bootstrap_timeout_ms``)."""
    return {"api_version_auto_timeout_ms": 15_000} if "api_version_auto_timeout_ms" in cls.DEFAULT_CONFIG else {}


def reader_security(cfg: dict) -> dict | None:
    """A reader's security settings: its ``security`` section, and security keys given under
    ``consumer`` (so they reach the dead-letter producer too); the section wins."""
    inherited = {k: v for k, v in (cfg.get("consumer") or {}).items() if k in SECURITY_OPTIONS}
    return {**inherited, **(cfg.get("security") or {})} or None


def consumer_settings(cfg: dict) -> dict:
    """``KafkaConsumer`` keyword arguments for a normalized reader config."""
    return {
        **CONSUMER_DEFAULTS,
        **client_settings(cfg["bootstrap"], reader_security(cfg)),
        "group_id": cfg["group"],
        "enable_auto_commit": False,           # offsets are committed after the update, by us
        "auto_offset_reset": cfg["auto_offset_reset"],
        "client_id": f"streamtrain-{cfg['group']}",
        **(cfg.get("consumer") or {}),
    }


def producer_settings(cfg: dict) -> dict:
    """The dead-letter ``KafkaProducer``'s keyword arguments: it accepts a message as large as
    the consumer may fetch (a bad line is sent back whole), then the reader's ``producer``."""
    consumer = consumer_settings(cfg)
    largest = max(consumer["fetch_max_bytes"], consumer["max_partition_fetch_bytes"])
    return {
        **DEAD_LETTER_DEFAULTS,
        **client_settings(cfg["bootstrap"], reader_security(cfg)),
        "max_request_size": largest,
        **(cfg.get("producer") or {}),
    }


class _RefusedFrames(logging.Filter):
    """Drops kafka-python's lines about a network frame refused as too large (three or four
    ERROR lines per refused fetch, which it repeats): the reader's search for the record that
    makes it so says it once (``oversize.py``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except Exception:                   # a record that does not format: let it through
            return True
        if record.exc_info and record.exc_info[1] is not None:
            text += str(record.exc_info[1])
        return "Invalid frame length" not in text


REFUSED_FRAMES = _RefusedFrames()


def quiet_library_logs() -> None:
    """kafka-python's loggers at WARNING unless the root logger is at DEBUG (then they follow it);
    their lines about frames refused as too large dropped (said once by the reader instead)."""
    debug = logging.getLogger().getEffectiveLevel() <= logging.DEBUG
    logging.getLogger("kafka").setLevel(logging.NOTSET if debug else logging.WARNING)
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("kafka") and isinstance(logger, logging.Logger) and REFUSED_FRAMES not in logger.filters:
            logger.addFilter(REFUSED_FRAMES)
