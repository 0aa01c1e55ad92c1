"""Declarative options: what a config key accepts, its default, and the check of a whole section.

Every configurable thing (a layer kind, an optimizer, a format, a reader type, a store
backend, a top-level section of the job config) states its keys once as a ``dict`` of
``Option``; ``check_options`` lists every problem with its key, unknown keys included.

>>> schema = {"port": Option(9464, (int,), check=non_negative), "host": Option("127.0.0.1", (str,))}
>>> check_options(schema, {"port": -1, "hots": "x"}, what="metrics")
[('hots', 'unknown key for metrics (known: host, port)'), ('port', 'must be >= 0, got -1')]
>>> with_defaults(schema, {"port": 0})
{'port': 0, 'host': '127.0.0.1'}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

REQUIRED = object()


@dataclass(frozen=True)
class Option:
    """One key: default (or REQUIRED), accepted types, choices, an extra check, a doc line."""

    default: Any = REQUIRED
    types: tuple = ()
    choices: tuple = ()
    check: Callable[[Any], str | None] | None = None
    doc: str = ""

    def problem(self, value) -> str | None:
        if self.types:
            wrong = not isinstance(value, self.types) or (isinstance(value, bool) and bool not in self.types)
            if wrong:
                names = "/".join("null" if t is type(None) else t.__name__ for t in self.types)
                return f"expected {names}, got {type(value).__name__} {value!r}"
        if self.choices and value not in self.choices:
            return f"expected one of {', '.join(map(str, self.choices))}, got {value!r}"
        if self.check is not None:
            return self.check(value)
        return None


def check_options(schema: dict[str, Option], values: dict, *, what: str) -> list[tuple[str, str]]:
    """Every problem of ``values`` against ``schema`` as (key, message); empty when fine."""
    problems = []
    for key in values:
        if key not in schema:
            problems.append((key, f"unknown key for {what} (known: {', '.join(sorted(schema)) or 'none'})"))
    for key, opt in schema.items():
        if key not in values:
            if opt.default is REQUIRED:
                problems.append((key, f"required by {what}"))
            continue
        msg = opt.problem(values[key])
        if msg:
            problems.append((key, msg))
    return problems


def with_defaults(schema: dict[str, Option], values: dict) -> dict:
    """``values`` completed by the defaults of the keys it does not set."""
    out = dict(values)
    for key, opt in schema.items():
        if key not in out and opt.default is not REQUIRED:
            out[key] = opt.default
    return out


def positive(value) -> str | None:
    return None if value > 0 else f"must be > 0, got {value!r}"


def non_negative(value) -> str | None:
    return None if value >= 0 else f"must be >= 0, got {value!r}"


def probability(value) -> str | None:
    return None if 0 <= value < 1 else f"must be in [0, 1), got {value!r}"
