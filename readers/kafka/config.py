"""The ``kafka`` reader's keys (``OPTIONS``: default, types, check and doc of each, stated once)
and the check of a whole reader config.

    "reader": {"type": "kafka", "bootstrap": "127.0.0.1:9092", "topic": "clicks",
               "group": "trainers", "format": "criteo", "max_wait_ms": 200}

Keys that are not Kafka keys are the format's options (as for the file reader), inline or in
``options``. Nothing here imports kafka-python: validating a config opens nothing. The
settings handed to kafka-python's clients are built in ``clients.py``.
"""
from __future__ import annotations

from streamtrain.schema import NUMBER, Option, check_options, non_negative, optional, positive

from ..formats import format_problems, split_format_options
from .clients import check_security


def _as_list(v):
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return list(v) if isinstance(v, (list, tuple)) else []


def _names(v) -> str | None:
    items = _as_list(v)
    if not items or not all(isinstance(s, str) and s for s in items):
        return f"expected a non-empty string or list of strings, got {v!r}"
    return None


def _servers(v) -> str | None:
    bad = [s for s in _as_list(v) if isinstance(s, str) and ":" not in s]
    return _names(v) or (f"expected host:port, got {bad[0]!r}" if bad else None)


def _non_empty(v) -> str | None:
    return None if v else "expected a non-empty string"


def _at_least_one(v) -> str | None:
    return None if v >= 1 else f"must be >= 1, got {v!r}"


def _no_auto_commit(v) -> str | None:
    if v.get("enable_auto_commit"):
        return "enable_auto_commit must stay false: offsets are committed only after the update is applied"
    return _known(v, "KafkaConsumer")


def _known(v: dict, client: str) -> str | None:
    """A key kafka-python's client does not take (it refuses it when the reader starts)."""
    import difflib

    import kafka
    from .clients import SECURITY_OPTIONS     # (checked as the security section's: clients.py)
    known = getattr(kafka, client).DEFAULT_CONFIG
    unknown = sorted(k for k in v if k not in known and k not in SECURITY_OPTIONS)
    if not unknown:
        return None
    near = {k: difflib.get_close_matches(k, list(known), 1) for k in unknown}
    hints = "; ".join(f"{k!r}" + (f" (did you mean {near[k][0]!r}?)" if near[k] else "") for k in unknown)
    return f"not a kafka-python {client} setting: {hints}"


OPTIONS = {
    "bootstrap": Option(check=_servers, doc="host:port of the brokers (a list, or comma-separated)"),
    "topic": Option(check=_names, doc="topic(s) to read (a list, or comma-separated)"),
    "group": Option(types=(str,), check=_non_empty, doc="consumer group: trainers sharing it split the partitions"),
    "format": Option("criteo", (str,), doc="the line format of the messages (checked with its options)"),
    "options": Option({}, (dict,), doc="the format's options (or give them inline)"),
    "max_wait_ms": Option(200, NUMBER, check=non_negative,
                          doc="a batch closes at batch_size lines or this long after its first line"),
    "lines_per_message": Option(1, NUMBER, check=_at_least_one,
                                doc="a hint (fetch sizing); every message is split on newlines anyway"),
    "dead_letter": Option(None, (str, type(None)), check=optional(_non_empty),
                          doc='topic receiving each bad line, its reason in header "reason"'),
    "stop_at_end": Option(False, (bool,), doc="end once every owned partition reached its end seen at assignment"),
    "idle_timeout_s": Option(None, (*NUMBER, type(None)), check=optional(positive),
                             doc="end after this long without a message (after joining)"),
    "auto_offset_reset": Option("earliest", (str,), choices=("earliest", "latest"),
                                doc="where a group with no committed offset starts"),
    "consumer": Option({}, (dict,), check=_no_auto_commit,
                       doc="extra kafka-python KafkaConsumer settings (applied last)"),
    "producer": Option({}, (dict,), check=lambda v: _known(v, "KafkaProducer"),
                       doc="extra KafkaProducer settings of the dead-letter producer"),
    "trace_file": Option(None, (str, type(None)), check=optional(_non_empty),
                         doc='debug: append "topic partition offset" of every applied row at commit'),
    "fast_decode": Option(True, (bool,), doc="decode record batches in bulk (fastpath.py)"),
    "security": Option(None, (dict, type(None)), nested=check_security,
                       doc="SASL/SSL settings of every client (clients.py)"),
}
DEFAULTS = {k: o.default for k, o in OPTIONS.items() if k not in ("bootstrap", "topic", "group")}
KAFKA_KEYS = ("type", *OPTIONS)


def split_options(cfg: dict) -> tuple[dict, dict]:
    """(format options, where each came from): inline non-Kafka keys merged with ``options``."""
    return split_format_options(cfg, KAFKA_KEYS)


def normalized(cfg: dict) -> dict:
    """The config with defaults filled in (``bootstrap`` and ``topic`` as lists)."""
    out = {**DEFAULTS, **cfg}
    out["bootstrap"] = _as_list(cfg.get("bootstrap"))
    out["topic"] = _as_list(cfg.get("topic"))
    out["format_options"], _ = split_options(cfg)
    return out


def validate(cfg: dict) -> list[tuple[str, str]]:
    """Every problem of a ``kafka`` reader config as (key, message)."""
    own = {k: v for k, v in cfg.items() if k in OPTIONS}
    problems = check_options(OPTIONS, own, what="reader type 'kafka'")
    problems += format_problems(cfg, KAFKA_KEYS, DEFAULTS["format"])
    problems += _dead_letter_problems(cfg)
    if cfg.get("format", DEFAULTS["format"]) == "csv":
        options, _ = split_options(cfg)
        if options.get("columns") is None:
            problems.append(("columns", "csv over Kafka has no header line: give the column "
                                        "names in option 'columns'"))
    return problems


def _dead_letter_problems(cfg: dict) -> list[tuple[str, str]]:
    """A dead-letter topic that is also a source topic would feed every bad line back to the
    reader, which sends it there again, for ever."""
    dead = cfg.get("dead_letter")
    if not isinstance(dead, str) or _names(cfg.get("topic")):
        return []
    if dead.strip() in _as_list(cfg.get("topic")):
        return [("dead_letter", f"{dead!r} is also a topic this reader reads: every bad line would "
                                "come back and be sent there again, for ever (give another topic)")]
    return []
