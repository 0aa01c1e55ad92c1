"""The ``serve`` section of the job config: where the prediction server listens and its limits.

>>> check_options(SERVE_OPTIONS, {"port": -1}, what="serve")
[('port', 'expected a port number 0..65535 (0 = any free port), got -1')]
"""
from __future__ import annotations

import importlib

from streamtrain.errors import MissingPackageError
from streamtrain.schema import NUMBER, Option, non_negative, port, positive, with_defaults


def _schema(v):
    if v is None:
        return None
    if not isinstance(v, dict) or set(v) - {"sparse", "dense"} or not all(
            isinstance(v.get(k, []), list) and all(isinstance(x, str) for x in v.get(k, []))
            for k in ("sparse", "dense")):
        return 'expected {"sparse": [field names], "dense": [column names]} or null'
    return None


SERVE_OPTIONS = {
    "enabled": Option(False, (bool,), doc="`streamtrain run`: also serve predictions from its own parameters"),
    "host": Option("127.0.0.1", (str,), doc="address to listen on (`0.0.0.0` in containers)"),
    "port": Option(8080, (int,), check=port,
                   doc="port (0 = any free one, logged as `serving predictions on http://HOST:PORT/v1/predict`)"),
    "max_staleness_s": Option(1.0, NUMBER, check=non_negative,
                              doc="oldest a cached parameter may be when a request uses it (redis store)"),
    "refresh_window_s": Option(10.0, NUMBER, check=non_negative,
                               doc="rows a request used within this many seconds are re-read in the background "
                                   "before they are `max_staleness_s` old, so requests rarely wait for the store "
                                   "(redis store; 0 = re-read on demand only)"),
    "replica": Option(True, (bool,),
                      doc="keep a complete copy of the tables from the trainers' change feed (`store.feed_s`), so "
                          "a request never waits for the store for rows it is the first to ask for (redis store)"),
    "replica_max_rows": Option(4_000_000, (int,), check=positive,
                               doc="a table with more rows than this is not copied (its rows are read on demand)"),
    "max_records": Option(1024, (int,), check=positive, doc="records (or lines) per request; more: 413"),
    "max_body_bytes": Option(8 << 20, (int,), check=positive, doc="request body size; more: 413"),
    "schema": Option(None, (dict, type(None)), check=_schema,
                     doc='the model\'s fields `{"sparse": [...], "dense": [...]}`; null = what the trainers published'),
    "store_give_up_s": Option(2.0, NUMBER, check=positive,
                              doc="how long a request waits for an unreachable store before its 503 (then every "
                                  "request gets its 503 at once for 0.25 s); also under `streamtrain run`"),
    "retry_after_s": Option(1, (int,), check=positive, doc="the `Retry-After` of a 503"),
    "max_connections": Option(1024, (int,), check=positive,
                              doc="open connections at most; one more is answered 503 and closed at once "
                                  "(lowered at start, with a warning, to fit the file descriptor limit less "
                                  "`reserve_fds`)"),
    "reserve_fds": Option(64, (int,), check=non_negative,
                          doc="file descriptors kept free of connections for everything else in the process "
                              "(a trainer's checkpoints, store and Kafka clients, the metrics port)"),
    "header_timeout_s": Option(10.0, NUMBER, check=positive,
                               doc="a request's headers must arrive within this long of the connection's "
                                   "opening (or its first byte after a response); else 408 and closed"),
    "body_timeout_s": Option(30.0, NUMBER, check=positive,
                             doc="a request's body must arrive within this long of its headers (else 408 and "
                                 "closed); a response the client stops reading is dropped after as long"),
    "keep_alive_s": Option(5.0, NUMBER, check=positive, doc="an idle keep-alive connection is closed after this long"),
    "max_header_bytes": Option(65536, (int,), check=positive, doc="request line and headers at most; more: 431"),
}


SERVE_PACKAGES = ("uvicorn", "starlette")     # what the server cannot run without (the serve extra)


def require_extra(what: str) -> None:
    """Raise ``MissingPackageError`` (exit 2) when the server's packages are not installed,
    before a job or a server starts, instead of an ImportError from inside them (imported
    here: the server imports them next anyway)."""
    missing = []
    for name in SERVE_PACKAGES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            if err.name != name:            # installed, but something it imports is not: its own error
                raise
            missing.append(name)
    if missing:
        raise MissingPackageError(f"{what} needs the 'serve' extra, and {' and '.join(missing)} "
                                  f"{'is' if len(missing) == 1 else 'are'} not installed: "
                                  f"pip install 'streamtrain[serve]'")


def serve_settings(config: dict) -> dict:
    """The ``serve`` section with every default filled in."""
    return with_defaults(SERVE_OPTIONS, config.get("serve") or {})
