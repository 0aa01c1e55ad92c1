"""The ``store`` section for ``"backend": "redis"``: its options (defaults stated once, in
``OPTIONS``), every problem with its path, and how to connect (URL, ACL user, password, TLS).

>>> validate({"backend": "redis", "mode": "sink"})
[('mode', "expected one of async, sync, got 'sink'")]
>>> redact("redis://app:s3cret@db:6380/2")
'redis://app:***@db:6380/2'
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from streamtrain.errors import ConfigError, StoreError
from streamtrain.schema import Option, check_options, non_negative, positive, with_defaults

from . import redis_keys

SCHEMES = ("redis://", "rediss://")
CERT_REQS = ("required", "optional", "none")
_STR = (str, type(None))


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` URL in it replaced by ``***``."""
    return re.sub(r"([a-zA-Z][\w+.-]*://[^:@/\s]*:)[^@\s]*@", r"\1***@", str(text))


def _url_problem(url) -> str | None:
    if not isinstance(url, str) or not url.startswith(SCHEMES):
        return f"expected 'redis://[user:password@]host:port[/db]' or 'rediss://...', got {redact(repr(url))}"
    try:
        parts = urlsplit(url)
        parts.port                                   # noqa: B018 (raises on a bad port)
    except ValueError as err:
        return f"{err} in {redact(url)}"
    if not parts.hostname:
        return f"no host in {redact(url)}"
    db = parts.path.strip("/")
    if db and not db.isdigit():
        return f"the database after '/' must be a number, got {db!r} in {redact(url)}"
    return None


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
    "username": Option(None, _STR, doc="ACL user (overrides the URLs' user)"),
    "password_env": Option(None, _STR, doc="environment variable holding the password"),
    "password_file": Option(None, _STR, doc="file holding the password (trailing newline ignored)"),
    "ssl_ca_certs": Option(None, _STR, doc="CA bundle that signed the servers' certificates (rediss://)"),
    "ssl_certfile": Option(None, _STR, doc="client certificate, when the servers ask for one"),
    "ssl_keyfile": Option(None, _STR, doc="the client certificate's key"),
    "ssl_cert_reqs": Option("required", (str,), choices=CERT_REQS, doc="check the servers' certificates"),
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
    def password(self) -> str | None:
        """The password from ``password_env`` / ``password_file``; None when the URLs carry it."""
        if self.password_env:
            value = os.environ.get(self.password_env)
            if value is None:
                raise StoreError(f"store.password_env: environment variable {self.password_env} is not set")
            return value
        if self.password_file:
            try:
                with open(self.password_file) as fh:
                    return fh.read().rstrip("\r\n")
            except OSError as err:
                raise StoreError(f"store.password_file: cannot read {self.password_file}: "
                                 f"{err.strerror}") from None
        return None

    def connection(self, url: str) -> dict:
        """redis-py keyword arguments for ``url``: host, port, db, user, password, TLS."""
        parts = urlsplit(url)
        kw = {"host": parts.hostname or "127.0.0.1", "port": parts.port or 6379,
              "db": int(parts.path.strip("/") or 0)}
        username = self.username or (unquote(parts.username) if parts.username else None)
        password = self.password()
        if password is None and parts.password is not None:
            password = unquote(parts.password)
        kw.update(username=username, password=password)
        if url.startswith("rediss://"):
            kw.update(ssl=True, ssl_cert_reqs=self.ssl_cert_reqs, ssl_ca_certs=self.ssl_ca_certs,
                      ssl_certfile=self.ssl_certfile, ssl_keyfile=self.ssl_keyfile,
                      ssl_check_hostname=self.ssl_cert_reqs == "required")
        return kw


def validate(cfg: dict) -> list[tuple[str, str]]:
    """Every problem in a redis store section, as (path inside ``store``, message)."""
    out = check_options(OPTIONS, cfg, what="the redis store")
    urls, cluster = cfg.get("urls"), cfg.get("cluster")
    if urls and cluster:
        out.append(("cluster", "give either urls (standalone shards) or cluster, not both"))
    if isinstance(cluster, str) and not _url_problem(cluster) and urlsplit(cluster).path.strip("/") not in ("", "0"):
        out.append(("cluster", "a Redis Cluster has database 0 only"))
    if cfg.get("password_env") and cfg.get("password_file"):
        out.append(("password_file", "give either password_env or password_file, not both"))
    tls = [k for k in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile") if cfg.get(k)]
    plain = [u for u in (urls if isinstance(urls, list) else []) + [cluster] if isinstance(u, str)
             and u.startswith("redis://")]
    if tls and plain:
        out.append((tls[0], "TLS options need rediss:// URLs (redis:// connects in plain text)"))
    trainers, worker = cfg.get("trainers", 1), cfg.get("worker", 0)
    if isinstance(trainers, int) and isinstance(worker, int) and not 0 <= worker < max(trainers, 1):
        out.append(("worker", f"must be in 0..{trainers - 1} for {trainers} trainers, got {worker}"))
    return [(path, redact(msg)) for path, msg in out]         # messages may quote a URL given wrongly


def _tables_problems(tables: dict) -> list[tuple[str, str]]:
    out = []
    for name, opts in tables.items():
        if not isinstance(opts, dict):
            out.append((name, f"expected an object with {', '.join(TABLE_OPTIONS)}"))
            continue
        out += [(f"{name}.{k}", m) for k, m in check_options(TABLE_OPTIONS, opts, what="a table")]
    return out
