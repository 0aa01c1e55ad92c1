"""Logging for people (one line of text) and for collectors (one JSON object per line).

``--log-format json`` suits journald and container log collectors: every record becomes
``{"ts", "level", "logger", "msg", ...}`` plus the structured fields a call passed through
``extra={"fields": {...}}`` (the progress line carries examples/s, loss, AUC, lag that way).
"""
from __future__ import annotations

import json
import logging
import sys


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": round(record.created, 3), "level": record.levelname, "logger": record.name,
               "msg": record.getMessage()}
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            out.update({k: v for k, v in fields.items() if k not in out})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def setup_logging(fmt: str = "text", level: str = "INFO", stream=None) -> None:
    """Send every record to stderr (or ``stream``) in ``fmt`` (``text`` | ``json``)."""
    if fmt not in ("text", "json"):
        raise ValueError(f"log format must be 'text' or 'json', got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(str(level).upper())


def log_start(logger: logging.Logger, what: str) -> None:
    """The first line of every command that logs (run, eval, serve, graph load): what runs, with
    its versions (``streamtrain 0.1.0 (Python 3.11.7, numpy 2.4.6, numba 0.68.1): training job
    'lr'``), the versions also as fields of a JSON line."""
    from .version import build_info, describe
    logger.info("%s: %s", describe(), what, extra={"fields": build_info()})
