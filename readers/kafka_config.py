"""The ``kafka`` reader's config: keys, defaults, validation, and the consumer settings.

    "reader": {"type": "kafka", "bootstrap": "127.0.0.1:9092", "topic": "clicks",
               "group": "trainers", "format": "criteo", "max_wait_ms": 200}

Keys that are not Kafka keys are the format's options (as for the file reader), inline or in
``options``. Nothing here imports kafka-python: validating a config opens nothing.
"""
from __future__ import annotations

from .formats import format_problems, split_format_options

DEFAULTS = {
    "format": "criteo",
    "max_wait_ms": 200,          # a batch closes at batch_size lines or this long after its first line
    "lines_per_message": 1,      # a hint (fetch sizing); every message is split on newlines anyway
    "dead_letter": None,         # topic receiving each bad line, its reason in header "reason"
    "stop_at_end": False,        # end once every owned partition reached its high watermark seen at assignment
    "idle_timeout_s": None,      # end after this long without a message (after joining)
    "auto_offset_reset": "earliest",
    "consumer": {},              # extra kafka-python KafkaConsumer settings (override the ones below)
    "producer": {},              # extra KafkaProducer settings for the dead-letter producer
    "trace_file": None,          # debug: append "partition offset" of every applied row at commit
    "fast_decode": True,         # decode record batches in bulk (see kafka_records.py)
    "options": {},
}
KAFKA_KEYS = ("type", "bootstrap", "topic", "group", *DEFAULTS)

# INFRA.md: Tansu holds a join for about half the session timeout; these give ~3 s joins.
CONSUMER_DEFAULTS = {
    "session_timeout_ms": 6000,
    "heartbeat_interval_ms": 500,
    "max_poll_interval_ms": 10000,
    "fetch_max_bytes": 16 << 20,       # a poll drains a whole fetch: bounds the work between polls
    "max_partition_fetch_bytes": 4 << 20,
    "fetch_max_wait_ms": 100,
}
# what tests use (INFRA.md: ~1 s joins)
TEST_CONSUMER = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 300,
                 "max_poll_interval_ms": 5000}


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


def consumer_settings(cfg: dict) -> dict:
    """kafka-python ``KafkaConsumer`` keyword arguments for a normalized config."""
    return {
        **CONSUMER_DEFAULTS,
        "bootstrap_servers": cfg["bootstrap"],
        "group_id": cfg["group"],
        "enable_auto_commit": False,           # offsets are committed after the update, by us
        "auto_offset_reset": cfg["auto_offset_reset"],
        "client_id": f"streamtrain-{cfg['group']}",
        **(cfg.get("consumer") or {}),
    }


def _as_list(v):
    if isinstance(v, str):
        return [s.strip() for s in v.split(",") if s.strip()]
    return list(v) if isinstance(v, (list, tuple)) else []


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate(cfg: dict) -> list[tuple[str, str]]:
    """Every problem of a ``kafka`` reader config as (key, message)."""
    problems = []
    for key in ("bootstrap", "topic"):
        v = cfg.get(key)
        items = _as_list(v)
        if not items or not all(isinstance(s, str) and s for s in items):
            problems.append((key, f"required: a non-empty string or list of strings, got {v!r}"))
    for s in _as_list(cfg.get("bootstrap")):
        if isinstance(s, str) and ":" not in s:
            problems.append(("bootstrap", f"expected host:port, got {s!r}"))
    if not isinstance(cfg.get("group"), str) or not cfg.get("group"):
        problems.append(("group", f"required: a consumer group name, got {cfg.get('group')!r}"))
    if "options" in cfg and not isinstance(cfg["options"], dict):
        problems.append(("options", f"expected an object, got {cfg['options']!r}"))
    problems += format_problems(cfg, KAFKA_KEYS, DEFAULTS["format"])
    if cfg.get("format", DEFAULTS["format"]) == "csv":
        options, _ = split_options(cfg)
        if options.get("columns") is None:
            problems.append(("columns", "csv over Kafka has no header line: give the column "
                                        "names in option 'columns'"))
    for key, lo in (("max_wait_ms", 0), ("lines_per_message", 1)):
        v = cfg.get(key, DEFAULTS[key])
        if not _is_num(v) or v < lo:
            problems.append((key, f"expected a number >= {lo}, got {v!r}"))
    v = cfg.get("idle_timeout_s")
    if v is not None and (not _is_num(v) or v <= 0):
        problems.append(("idle_timeout_s", f"expected null or a number > 0, got {v!r}"))
    for key in ("stop_at_end", "fast_decode"):
        if not isinstance(cfg.get(key, DEFAULTS[key]), bool):
            problems.append((key, f"expected true or false, got {cfg.get(key)!r}"))
    if cfg.get("auto_offset_reset", "earliest") not in ("earliest", "latest"):
        problems.append(("auto_offset_reset", "expected 'earliest' or 'latest'"))
    for key in ("dead_letter", "trace_file"):
        v = cfg.get(key)
        if v is not None and (not isinstance(v, str) or not v):
            problems.append((key, f"expected null or a non-empty string, got {v!r}"))
    for key in ("consumer", "producer"):
        if not isinstance(cfg.get(key, {}), dict):
            problems.append((key, f"expected an object of kafka-python settings, got {cfg.get(key)!r}"))
    if isinstance(cfg.get("consumer"), dict) and cfg["consumer"].get("enable_auto_commit"):
        problems.append(("consumer.enable_auto_commit", "must stay false: offsets are committed "
                                                        "only after the update is applied"))
    return problems

