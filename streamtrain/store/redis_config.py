"""The ``store`` section for ``"backend": "redis"``: defaults and every problem with its path.

>>> validate({"backend": "redis", "mode": "sink"})
[('mode', "expected one of 'async', 'sync', got 'sink'")]
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import redis_keys

DEFAULTS = {
    "urls": None, "cluster": None, "namespace": "default", "mode": "async", "trainers": 1,
    "worker": 0, "barrier_timeout_s": 60.0, "sync_combine": "mean", "buckets": 64,
    "timeout_s": 5.0, "retry": {"initial_s": 0.05, "max_s": 2.0, "give_up_s": 30.0},
    "max_push_attempts": 1000, "placement": "modulo",   # placement: redis_keys (standalone servers)
    "tables": {},   # tables: {param name | layer name | "*": {...}}
}
TABLE_OPTIONS = ("ttl_s", "admit_after", "max_rows")


@dataclass(frozen=True)
class TablePolicy:
    """Lifecycle of one table: expiry after ``ttl_s`` without update, admission after
    ``admit_after`` sightings, at most ``max_rows`` rows. All off by default."""

    ttl_s: float = 0.0
    admit_after: int = 0
    max_rows: int = 0

    @property
    def ttl_ms(self) -> int:
        return int(round(self.ttl_s * 1000))

    @property
    def gated(self) -> bool:
        """New rows are not created freely (admission or cap): missing rows read as zeros."""
        return self.admit_after > 1 or self.max_rows > 0


@dataclass
class RedisConfig:
    urls: list | None = None
    cluster: str | None = None
    namespace: str = "default"
    mode: str = "async"
    trainers: int = 1
    worker: int = 0
    barrier_timeout_s: float = 60.0
    sync_combine: str = "mean"
    buckets: int = 64
    timeout_s: float = 5.0
    retry: dict = field(default_factory=lambda: dict(DEFAULTS["retry"]))
    max_push_attempts: int = 1000
    placement: str = "modulo"       # standalone servers: redis_keys "modulo" | "rendezvous"
    tables: dict = field(default_factory=dict)

    @classmethod
    def from_dict(cls, cfg: dict) -> "RedisConfig":
        from streamtrain.errors import ConfigError
        problems = validate(cfg)
        if problems:
            raise ConfigError([(f"store.{p}" if p else "store", m) for p, m in problems])
        values = {k: cfg.get(k, v) for k, v in DEFAULTS.items()}
        values["retry"] = {**DEFAULTS["retry"], **(cfg.get("retry") or {})}
        return cls(**values)

    def policy(self, name: str) -> TablePolicy:
        """Options of a table: by parameter name (``emb.a``), else its layer (``emb``), else ``*``."""
        layer = name.rsplit(".", 1)[0]
        opts = self.tables.get(name, self.tables.get(layer, self.tables.get("*", {})))
        return TablePolicy(**{k: opts[k] for k in TABLE_OPTIONS if k in opts})


def _number(value, *, integer=False, minimum=0.0, strict=False) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int,) if integer else (int, float)):
        return False
    return value > minimum if strict else value >= minimum


def validate(cfg: dict) -> list[tuple[str, str]]:
    """Every problem in a redis store section, as (path inside ``store``, message)."""
    out = []
    for key in cfg:
        if key not in DEFAULTS and key != "backend":
            out.append((key, f"unknown option for the redis store (known: {', '.join(['backend', *DEFAULTS])})"))
    urls, cluster = cfg.get("urls"), cfg.get("cluster")
    if urls is not None and (not isinstance(urls, list) or not urls
                             or not all(isinstance(u, str) and u.startswith("redis://") for u in urls)):
        out.append(("urls", f"expected a non-empty list of 'redis://host:port' strings, got {urls!r}"))
    if cluster is not None and not (isinstance(cluster, str) and cluster.startswith("redis://")):
        out.append(("cluster", f"expected 'redis://host:port' of any cluster node, got {cluster!r}"))
    if urls and cluster:
        out.append(("cluster", "give either urls (standalone shards) or cluster, not both"))
    if "namespace" in cfg and (msg := redis_keys.check_name(cfg["namespace"], "namespace")):
        out.append(("namespace", msg))
    for key, choices in (("mode", ("async", "sync")), ("sync_combine", ("mean", "sum")),
                         ("placement", redis_keys.PLACEMENTS)):
        if key in cfg and cfg[key] not in choices:
            out.append((key, f"expected one of {', '.join(map(repr, choices))}, got {cfg[key]!r}"))
    for key, integer, strict in (("trainers", True, True), ("worker", True, False), ("buckets", True, True),
                                 ("barrier_timeout_s", False, True), ("timeout_s", False, True),
                                 ("max_push_attempts", True, True)):
        if key in cfg and not _number(cfg[key], integer=integer, strict=strict):
            out.append((key, f"expected a number {'> 0' if strict else '>= 0'}"
                             f"{' (integer)' if integer else ''}, got {cfg[key]!r}"))
    if _number(cfg.get("buckets", 64), integer=True, strict=True) and cfg.get("buckets", 64) > 16384:
        out.append(("buckets", f"at most 16384, got {cfg['buckets']}"))
    trainers, worker = cfg.get("trainers", 1), cfg.get("worker", 0)
    if isinstance(trainers, int) and isinstance(worker, int) and not 0 <= worker < max(trainers, 1):
        out.append(("worker", f"must be in 0..{trainers - 1} for {trainers} trainers, got {worker}"))
    retry = cfg.get("retry", {})
    if not isinstance(retry, dict):
        out.append(("retry", f"expected an object, got {retry!r}"))
    else:
        for key, value in retry.items():
            if key not in DEFAULTS["retry"]:
                out.append((f"retry.{key}", f"unknown option (known: {', '.join(DEFAULTS['retry'])})"))
            elif not _number(value, strict=True):
                out.append((f"retry.{key}", f"expected a number > 0, got {value!r}"))
    tables = cfg.get("tables", {})
    if not isinstance(tables, dict):
        return out + [("tables", f"expected an object {{table or '*': {{ttl_s, admit_after, max_rows}}}}, got {tables!r}")]
    for name, opts in tables.items():
        if not isinstance(opts, dict):
            out.append((f"tables.{name}", f"expected an object with {', '.join(TABLE_OPTIONS)}"))
            continue
        for key, value in opts.items():
            if key not in TABLE_OPTIONS:
                out.append((f"tables.{name}.{key}", f"unknown option (known: {', '.join(TABLE_OPTIONS)})"))
            elif not _number(value, integer=key != "ttl_s"):
                out.append((f"tables.{name}.{key}", f"expected a number >= 0, got {value!r}"))
    return out
