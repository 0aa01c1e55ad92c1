"""The ``store`` section for ``"backend": "redis"``: its options (defaults stated once, in
``OPTIONS``), every problem with its path, and how to connect (URL, ACL user, password, TLS:
``redis_connection``, shared with the graph store and ``streamtrain-redis-migrate``).

>>> validate({"backend": "redis", "mode": "sink"})
[('mode', "expected one of async, sync, got 'sink'")]
>>> redact("redis://app:s3cret@db:6380/2")
'redis://app:***@db:6380/2'
"""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from streamtrain.errors import ConfigError
from streamtrain.schema import Option, check_options, non_negative, positive, with_defaults

from . import redis_keys
from .redis_connection import CONNECTION_OPTIONS, connection_kwargs, connection_problems, redact
from .redis_connection import url_problem as _url_problem

_STR = (str, type(None))


def _urls_problem(urls) -> str | None:
    if not urls:
        return "expected a non-empty list of 'redis://host:port' strings"
    return next((f"[{i}]: {m}" for i, u in enumerate(urls) if (m := _url_problem(u))), None)


def _buckets_problem(n) -> str | None:
    return positive(n) or (None if n <= 16384 else f"at most 16384, got {n}")


_NUMBER = (int, float)
RETRY_OPTIONS = {
    "initial_s": Option(0.05, _NUMBER, check=positive, doc="first pause after a failed store operation"),
    "max_s": Option(2.0, _NUMBER, check=positive, doc="longest pause between attempts"),
    "give_up_s": Option(30.0, _NUMBER, check=positive,
                        doc="an operation failing this long raises; the job then retries the step"),
}
TABLE_OPTIONS = {
    "ttl_s": Option(0.0, _NUMBER, check=non_negative, doc="expire a row not updated for this long (0 = never)"),
    "admit_after": Option(0, (int,), check=non_negative, doc="create a row on its N-th sighting"),
    "max_rows": Option(0, (int,), check=non_negative, doc="at most this many rows (0 = no cap)"),
}
OPTIONS = {
    "backend": Option("redis", (str,)),
    "urls": Option(None, (list, type(None)), check=lambda v: v is not None and _urls_problem(v) or None,
                   doc="standalone shards: redis://[user:password@]host:port[/db] or rediss://"),
    "cluster": Option(None, _STR, check=lambda v: v is not None and _url_problem(v) or None,
                      doc="any node of a Redis Cluster (same URL forms; database 0)"),
    **CONNECTION_OPTIONS,
    "namespace": Option("default", (str,), check=lambda v: redis_keys.check_name(v, "namespace")),
    "mode": Option("async", (str,), choices=("async", "sync")),
    "trainers": Option(1, (int,), check=positive),
    "worker": Option(0, (int,), check=non_negative),
    "barrier_timeout_s": Option(60.0, _NUMBER, check=positive),
    "sync_combine": Option("mean", (str,), choices=("mean", "sum")),
    "buckets": Option(64, (int,), check=_buckets_problem),
    "timeout_s": Option(5.0, _NUMBER, check=positive),
    "retry": Option(fields=RETRY_OPTIONS, doc="backoff of failed store operations"),
    "max_push_attempts": Option(1000, (int,), check=positive),
    "placement": Option("modulo", (str,), choices=redis_keys.PLACEMENTS,
                        doc="standalone servers: which server holds a row group (redis_keys)"),
    "feed_s": Option(2.0, _NUMBER, check=non_negative,
                     doc="keep the rows written in the last this many seconds in a change feed, from which "
                         "`streamtrain serve` replicates the tables (0 = no feed: servers read rows on demand)"),
    "write_back_s": Option(0.5, _NUMBER, check=non_negative,
                           doc="keep pulled rows locally and write the changed ones at most this often (a "
                               "flush; offsets are committed after it); 0 = write through every push"),
    "write_back_rows": Option(2_000_000, (int,), check=positive,
                              doc="the write-back cache is dropped after a flush when it holds more rows"),
    "tables": Option({}, (dict,), nested=lambda tables: _tables_problems(tables),
                     doc="{param name | layer name | '*': {ttl_s, admit_after, max_rows}}"),
}


@dataclass(frozen=True)
class TablePolicy:
    """Lifecycle of one table: expiry after ``ttl_s`` without update, admission after
    ``admit_after`` sightings, at most ``max_rows`` rows. All off by default."""

    ttl_s: float = TABLE_OPTIONS["ttl_s"].default
    admit_after: int = TABLE_OPTIONS["admit_after"].default
    max_rows: int = TABLE_OPTIONS["max_rows"].default

    @property
    def ttl_ms(self) -> int:
        return int(round(self.ttl_s * 1000))

    @property
    def gated(self) -> bool:
        """New rows are not created freely (admission or cap): missing rows read as zeros."""
        return self.admit_after > 1 or self.max_rows > 0


class RedisConfig:
    """A checked redis store section: every key of ``OPTIONS`` as an attribute."""

    def __init__(self, values: dict):
        for key, value in values.items():
            setattr(self, key, value)

    @classmethod
    def from_dict(cls, cfg: dict) -> "RedisConfig":
        problems = validate(cfg)
        if problems:
            raise ConfigError([(f"store.{p}" if p else "store", m) for p, m in problems])
        return cls(with_defaults(OPTIONS, cfg))

    def policy(self, name: str) -> TablePolicy:
        """Options of a table: by parameter name (``emb.a``), else its layer (``emb``), else ``*``."""
        layer = name.rsplit(".", 1)[0]
        opts = self.tables.get(name, self.tables.get(layer, self.tables.get("*", {})))
        return TablePolicy(**{k: opts[k] for k in TABLE_OPTIONS if k in opts})

    # ---- connecting --------------------------------------------------------------------------
    def connection(self, url: str) -> dict:
        """redis-py keyword arguments for ``url``: host, port, db, user, password, TLS."""
        return connection_kwargs(url, vars(self))


def validate(cfg: dict) -> list[tuple[str, str]]:
    """Every problem in a redis store section, as (path inside ``store``, message)."""
    out = check_options(OPTIONS, cfg, what="the redis store")
    urls, cluster = cfg.get("urls"), cfg.get("cluster")
    if urls and cluster:
        out.append(("cluster", "give either urls (standalone shards) or cluster, not both"))
    if isinstance(cluster, str) and not _url_problem(cluster) and urlsplit(cluster).path.strip("/") not in ("", "0"):
        out.append(("cluster", "a Redis Cluster has database 0 only"))
    out += connection_problems(cfg, (urls if isinstance(urls, list) else []) + [cluster])
    trainers, worker = cfg.get("trainers", 1), cfg.get("worker", 0)
    if isinstance(trainers, int) and isinstance(worker, int) and not 0 <= worker < max(trainers, 1):
        out.append(("worker", f"must be in 0..{trainers - 1} for {trainers} trainers, got {worker}"))
    wb = cfg.get("write_back_s")
    if cfg.get("mode") == "sync" and isinstance(wb, (int, float)) and wb > 0:
        out.append(("write_back_s", "sync mode writes through at every barrier: set 0 or leave it out"))
    return [(path, redact(msg)) for path, msg in out]         # messages may quote a URL given wrongly


def _tables_problems(tables: dict) -> list[tuple[str, str]]:
    out = []
    for name, opts in tables.items():
        if not isinstance(opts, dict):
            out.append((name, f"expected an object with {', '.join(TABLE_OPTIONS)}"))
            continue
        out += [(f"{name}.{k}", m) for k, m in check_options(TABLE_OPTIONS, opts, what="a table")]
    return out
