"""The ``serve`` section of the job config: where the prediction server listens and its limits.

>>> serve_problems({"port": -1, "max_record": 5})[0]
('max_record', 'unknown key for serve (known: enabled, host, max_body_bytes, max_records, max_staleness_s, port, retry_after_s, schema, store_give_up_s)')
"""
from __future__ import annotations

from streamtrain.schema import Option, check_options, non_negative, positive, with_defaults


def _port(v):
    return None if 0 <= v < 65536 else f"expected a port number 0..65535 (0 = any free port), got {v!r}"


def _schema(v):
    if v is None:
        return None
    if not isinstance(v, dict) or set(v) - {"sparse", "dense"} or not all(
            isinstance(v.get(k, []), list) and all(isinstance(x, str) for x in v.get(k, []))
            for k in ("sparse", "dense")):
        return 'expected {"sparse": [field names], "dense": [column names]} or null'
    return None


SERVE_OPTIONS = {
    "enabled": Option(False, (bool,), doc="streamtrain run: also serve predictions from its own parameters"),
    "host": Option("127.0.0.1", (str,), doc="address to listen on (0.0.0.0 in containers)"),
    "port": Option(8080, (int,), check=_port, doc="port (0 = any free port, logged)"),
    "max_staleness_s": Option(1.0, (int, float), check=non_negative,
                              doc="oldest a cached parameter may be when it is used (redis store)"),
    "max_records": Option(1024, (int,), check=positive, doc="records per request (more: 413)"),
    "max_body_bytes": Option(8 << 20, (int,), check=positive, doc="request body size (more: 413)"),
    "schema": Option(None, (dict, type(None)), check=_schema,
                     doc="fields the model is built on; null = what the trainers published"),
    "store_give_up_s": Option(2.0, (int, float), check=positive,
                              doc="how long a request retries an unreachable store before its 503"),
    "retry_after_s": Option(1, (int,), check=positive, doc="Retry-After of a 503"),
}


def serve_problems(cfg) -> list[tuple[str, str]]:
    if not isinstance(cfg, dict):
        return [("", f"expected an object, got {cfg!r}")]
    return check_options(SERVE_OPTIONS, cfg, what="serve")


def serve_settings(config: dict) -> dict:
    """The ``serve`` section with every default filled in."""
    return with_defaults(SERVE_OPTIONS, config.get("serve") or {})
