"""Move a namespace's keys to where a new placement over standalone servers puts them: after
appending a server to ``store.urls``, removing one, or switching ``store.placement`` from
``modulo`` to ``rendezvous`` (redis_keys). Only keys whose server changes move, with
``MIGRATE ... KEYS`` (atomic per call, TTLs kept, never overwriting a key already there), so
adding a server to a rendezvous placement moves about ``1/(n+1)`` of the rows: no full restore.

Stop the trainers first (SIGTERM drains them): a trainer running meanwhile would read a row
that is being moved as absent. Then start them with the new ``store.urls`` and ``store.placement``.

    streamtrain-redis-migrate --namespace default \\
        --from-urls redis://r0:6379/0,redis://r1:6379/0 \\
        --to-urls redis://r0:6379/0,redis://r1:6379/0,redis://r2:6379/0 --placement rendezvous

The servers' user, password and TLS options are the store's (``redis_connection``), as flags
applied to every URL: ``--username``, ``--password-env``, ``--password-file``, ``--ssl-ca-certs``,
``--ssl-certfile``, ``--ssl-keyfile``, ``--ssl-cert-reqs``. The source servers log in to the
targets with the same user and password (``MIGRATE ... AUTH2``). No output carries a password.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict

import redis

from streamtrain.errors import StoreError

from . import redis_keys
from .redis_connection import CONNECTION_OPTIONS, connection_kwargs, flag, redact
from .redis_shards import new_client, refusal, refusal_hint

MIGRATE_KEYS = 500
MIGRATE_TIMEOUT_MS = 10_000


def _auth(kw: dict) -> tuple:
    """MIGRATE's login to a target server: ``AUTH2 user password``, ``AUTH password`` or none."""
    if kw.get("password") is None:
        return ()
    return ("AUTH2", kw["username"], kw["password"]) if kw.get("username") else ("AUTH", kw["password"])


def migrate(namespace: str, from_urls: list[str], to_urls: list[str], placement: str = "rendezvous",
            *, dry_run: bool = False, connection: dict | None = None) -> dict:
    """Move every key of ``namespace`` found on ``from_urls`` to its server under
    (``to_urls``, ``placement``), connecting with the ``connection`` options (``CONNECTION_OPTIONS``:
    user, password, TLS). Returns ``{"moved", "kept", "by_target": {url: n}}``."""
    if placement not in redis_keys.PLACEMENTS:
        raise ValueError(f"placement: expected one of {', '.join(redis_keys.PLACEMENTS)}, got {placement!r}")
    targets = [connection_kwargs(u, connection or {}, flag) for u in to_urls]
    sources = [connection_kwargs(u, connection or {}, flag) for u in from_urls]
    server = lambda kw: (kw["host"], kw["port"], kw["db"])  # noqa: E731 (a server's identity)
    clients = [new_client(kw, 2 * MIGRATE_TIMEOUT_MS / 1000) for kw in sources]  # refused: at once
    moved, kept, by_target = 0, 0, defaultdict(int)
    try:
        plans = []                 # every server is listed before any key moves: none is seen twice
        for source, client in zip(sources, clients):
            leaving = defaultdict(list)
            for key in set(client.scan_iter(match=redis_keys.namespace_pattern(namespace), count=5000)):
                j = redis_keys.shard_of_tag(redis_keys.tag_of_key(key), len(to_urls), placement)
                if server(targets[j]) == server(source):
                    kept += 1
                else:
                    leaving[j].append(key)
            plans.append(leaving)
        for client, leaving in zip(clients, plans):
            for j, keys in sorted(leaving.items()):
                target = targets[j]
                for start in range(0, len(keys), MIGRATE_KEYS):
                    chunk = keys[start:start + MIGRATE_KEYS]
                    if not dry_run:
                        client.execute_command("MIGRATE", target["host"], target["port"], "", target["db"],
                                               MIGRATE_TIMEOUT_MS, *_auth(target), "KEYS", *chunk)
                    moved += len(chunk)
                    by_target[to_urls[j]] += len(chunk)
    finally:
        for client in clients:
            client.close()
    return {"moved": moved, "kept": kept, "by_target": dict(by_target)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="streamtrain-redis-migrate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--namespace", default="default", help="store.namespace (default: default)")
    p.add_argument("--from-urls", required=True, help="comma-separated store.urls the rows are on now")
    p.add_argument("--to-urls", required=True, help="comma-separated store.urls of the new layout "
                                                    "(keep the old order, append new servers)")
    p.add_argument("--placement", default="rendezvous", choices=redis_keys.PLACEMENTS,
                   help="store.placement of the new layout (default: rendezvous)")
    p.add_argument("--dry-run", action="store_true", help="count what would move, move nothing")
    for key, opt in CONNECTION_OPTIONS.items():
        p.add_argument(flag(key), dest=key, default=opt.default, choices=opt.choices or None,
                       help=f"store.{key}, for every URL: {opt.doc}")
    args = p.parse_args(argv)
    if args.password_env and args.password_file:
        p.error("give either --password-env or --password-file, not both")
    try:
        out = migrate(args.namespace, args.from_urls.split(","), args.to_urls.split(","), args.placement,
                      dry_run=args.dry_run, connection={k: getattr(args, k) for k in CONNECTION_OPTIONS})
    except (redis.RedisError, OSError, StoreError) as err:
        refused = refusal(err)
        hint = f" ({refusal_hint(refused, flag)})" if refused is not None else ""
        print(f"streamtrain-redis-migrate: {redact(err)}{hint}", file=sys.stderr)
        return 1
    verb = "would move" if args.dry_run else "moved"
    print(f"namespace '{args.namespace}': {verb} {out['moved']} keys, kept {out['kept']} in place; "
          + ", ".join(f"{n} to {u}" for u, n in out["by_target"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
