"""How every Redis client of streamtrain connects: the parameter store (``store``), the Redis
graph store (``graph.store``) and ``streamtrain-redis-migrate`` share these options (ACL user,
password from an environment variable or a file, TLS) and turn a URL plus them into redis-py's
keyword arguments with ``connection_kwargs``. Secrets never reach a message: ``redact``.

>>> redact("redis://app:s3cret@db:6380/2")
'redis://app:***@db:6380/2'
>>> kw = connection_kwargs("rediss://app:s3cret@db:6380/2", {"ssl_cert_reqs": "none"})
>>> kw["host"], kw["port"], kw["db"], kw["username"], kw["ssl"], kw["ssl_check_hostname"]
('db', 6380, 2, 'app', True, False)
"""
from __future__ import annotations

import os
import re
import socket
import ssl
from typing import Callable
from urllib.parse import unquote, urlsplit

from streamtrain.errors import StoreError
from streamtrain.schema import Option

SCHEMES = ("redis://", "rediss://")
# what an ACL user of the parameter store needs (docs/redis.md "URLs, users, passwords, TLS"; tested as
# written in tests/test_redis_acl.py): keys st:*, reads, writes, the compare-and-set script,
# PING (readiness) and INFO (the prediction server's replica)
ACL_RECIPE = "ACL SETUSER trainer on >PASSWORD ~st:* +@read +@write +@scripting +ping +info"
ACL_NEEDS = ("keys ~st:*, commands +@read +@write +@scripting +ping +info; +select for a database other "
             "than 0; +cluster|slots on a Cluster")
CERT_REQS = ("required", "optional", "none")
_STR = (str, type(None))
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")

CONNECTION_OPTIONS = {
    "username": Option(None, _STR, doc="ACL user (overrides the URLs' user)"),
    "password_env": Option(None, _STR, doc="environment variable holding the password"),
    "password_file": Option(None, _STR, doc="file holding the password (trailing newline ignored)"),
    "ssl_ca_certs": Option(None, _STR, doc="CA bundle that signed the servers' certificates (rediss://)"),
    "ssl_certfile": Option(None, _STR, doc="client certificate, when the servers ask for one"),
    "ssl_keyfile": Option(None, _STR, doc="the client certificate's key"),
    "ssl_cert_reqs": Option("required", (str,), choices=CERT_REQS, doc="check the servers' certificates"),
}


def section(prefix: str) -> Callable[[str], str]:
    """How a message names an option: ``section("graph.store.")("password_env")``."""
    return lambda key: prefix + key


def flag(key: str) -> str:
    """An option named as a command-line flag: ``password_env`` → ``--password-env``."""
    return "--" + key.replace("_", "-")


def redact(text: str) -> str:
    """``text`` with the password of every ``scheme://user:password@`` URL in it replaced by ``***``."""
    return re.sub(r"([a-zA-Z][\w+.-]*://[^:@/\s]*:)[^@\s]*@", r"\1***@", str(text))


def url_problem(url) -> str | None:
    """What is wrong with a Redis URL (redacted), or None."""
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


def connection_problems(opts: dict, urls: list) -> list[tuple[str, str]]:
    """Problems across the connection options and the URLs they serve, as (key, message)."""
    out = []
    if opts.get("password_env") and opts.get("password_file"):
        out.append(("password_file", "give either password_env or password_file, not both"))
    tls = [k for k in TLS_FILES if opts.get(k)]
    if tls and any(isinstance(u, str) and u.startswith("redis://") for u in urls):
        out.append((tls[0], "TLS options need rediss:// URLs (redis:// connects in plain text)"))
    return out


def password(opts: dict, name: Callable[[str], str] = section("store.")) -> str | None:
    """The password from ``password_env`` / ``password_file``; None when the URLs carry it."""
    env, path = opts.get("password_env"), opts.get("password_file")
    if env:
        value = os.environ.get(env)
        if value is None:
            raise StoreError(f"{name('password_env')}: environment variable {env} is not set")
        return value
    if path:
        try:
            with open(path) as fh:
                return fh.read().rstrip("\r\n")
        except OSError as err:
            raise StoreError(f"{name('password_file')}: cannot read {path}: {err.strerror}") from None
    return None


def connection_kwargs(url: str, opts: dict, name: Callable[[str], str] = section("store.")) -> dict:
    """redis-py keyword arguments for ``url`` under the connection options ``opts`` (absent
    keys take their defaults): host, port, db, user, password, TLS. ``name`` words the option
    in an error (``store.password_env``, ``--password-env``)."""
    parts = urlsplit(url)
    kw = {"host": parts.hostname or "127.0.0.1", "port": parts.port or 6379,
          "db": int(parts.path.strip("/") or 0)}
    username = opts.get("username") or (unquote(parts.username) if parts.username else None)
    secret = password(opts, name)
    if secret is None and parts.password is not None:
        secret = unquote(parts.password)
    kw.update(username=username, password=secret)
    if url.startswith("rediss://"):
        reqs = opts.get("ssl_cert_reqs") or CONNECTION_OPTIONS["ssl_cert_reqs"].default
        kw.update(ssl=True, ssl_cert_reqs=reqs, ssl_check_hostname=reqs == "required",
                  **{k: opts.get(k) for k in TLS_FILES})
    return kw


def protocol_mismatch(kw: dict, timeout_s: float = 1.0) -> str | None:
    """Whether the server at ``kw``'s address talks the other protocol than ``kw`` asks for
    (plain text where TLS is asked for, or TLS where plain text is): what to say, else None
    (it does not answer the other protocol either: down, slow, or something else)."""
    try:
        with socket.create_connection((kw["host"], kw["port"]), timeout=timeout_s) as sock:
            if kw.get("ssl"):
                sock.sendall(b"PING\r\n")
                if sock.recv(64)[:1] in (b"+", b"-"):        # a Redis reply: PONG, or NOAUTH...
                    return "answers in plain text, not TLS: use redis:// (or the server's tls-port)"
                return None
            tls = ssl.create_default_context()
            tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE     # only: does it speak TLS?
            with tls.wrap_socket(sock, server_hostname=kw["host"]):
                return "speaks TLS: use rediss:// (with ssl_ca_certs for a private CA)"
    except (OSError, ValueError):
        return None
