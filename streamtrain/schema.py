"""Declarative options: what a config key accepts, its default, and the check of a whole section.

Every configurable thing (a layer kind, an optimizer, a format, a reader type, a store
backend, a top-level section of the job config) states its keys once as a ``dict`` of
``Option``; ``check_options`` lists every problem with its key, unknown keys included. An
option may itself be a section (``fields``: a nested schema), a polymorphic section
(``kinds``: a ``Registry`` whose kind, named by the ``tag`` key, brings its own ``options``),
or anything else checked by ``nested`` (a function returning problems with their sub-paths).

>>> schema = {"port": Option(9464, (int,), check=non_negative), "host": Option("127.0.0.1", (str,))}
>>> check_options(schema, {"port": -1, "hots": "x"}, what="metrics")
[('hots', 'unknown key for metrics (known: host, port)'), ('port', 'must be >= 0, got -1')]
>>> with_defaults(schema, {"port": 0})
{'port': 0, 'host': '127.0.0.1'}
>>> outer = {"metrics": Option(fields=schema)}
>>> check_options(outer, {"metrics": {"port": "x"}}, what="config")
[('metrics.port', "expected int, got str 'x'")]
>>> with_defaults(outer, {})
{'metrics': {'port': 9464, 'host': '127.0.0.1'}}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

REQUIRED = object()
NUMBER = (int, float)


@dataclass(frozen=True)
class Option:
    """One key: default (or REQUIRED), accepted types, choices, an extra check, a doc line.

    ``fields`` makes the key a section checked against that schema (its default is then the
    defaults of its fields); ``kinds`` a section whose schema is the ``options`` of the kind
    registered under ``value[tag]``; ``nested(value) -> [(sub-path, message)]`` any other
    structured check (a list of layers, say)."""

    default: Any = REQUIRED
    types: tuple = ()
    choices: tuple = ()
    check: Callable[[Any], str | None] | None = None
    doc: str = ""
    fields: dict | None = None
    kinds: Any = None                 # a streamtrain.registry.Registry
    tag: str = "type"
    nested: Callable[[Any], list] | None = None

    def __post_init__(self):
        if self.fields is not None and self.default is REQUIRED:
            object.__setattr__(self, "default", {})
        if self.fields is not None or self.kinds is not None:
            object.__setattr__(self, "types", self.types or (dict,))

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

    def problems(self, value, what: str = "this section") -> list[tuple[str, str]]:
        """Every problem of ``value`` (the key ``what``) as (sub-path, message); "" is the key."""
        msg = self.problem(value)
        if msg:
            return [("", msg)]
        found = []
        if self.fields is not None:
            found += check_options(self.fields, value, what=what)
        if self.kinds is not None:
            found += kind_problems(self.kinds, value, tag=self.tag, default=_tag_default(self))
        if self.nested is not None:
            found += self.nested(value)
        return found


def join(path: str, key: str) -> str:
    """``a`` + ``b`` → ``a.b``; an empty part is left out; ``[i]`` needs no dot."""
    if not key:
        return path
    if not path:
        return key
    return f"{path}{key}" if key.startswith("[") else f"{path}.{key}"


def check_options(schema: dict[str, Option], values: dict, *, what: str,
                  noun: str = "key") -> list[tuple[str, str]]:
    """Every problem of ``values`` against ``schema`` as (key path, message); empty when fine."""
    problems = []
    for key in values:
        if key not in schema:
            problems.append((key, f"unknown {noun} for {what} (known: {', '.join(sorted(schema)) or 'none'})"))
    for key, opt in schema.items():
        if key not in values:
            if opt.default is REQUIRED:
                problems.append((key, f"required by {what}"))
            continue
        problems += [(join(key, sub), msg) for sub, msg in opt.problems(values[key], key)]
    return problems


def kind_problems(registry, values: dict, *, tag: str = "type", default=None) -> list[tuple[str, str]]:
    """Problems of a polymorphic section: its ``tag`` names a kind of ``registry``, whose
    ``check_config(values)`` (or, without one, its ``options``) judges the other keys."""
    name = values.get(tag, default)
    if name is None:
        return [(tag, f"required: one of {', '.join(registry.names())}")]
    if name not in registry:
        return [(tag, registry.unknown(name))]
    cls, rest = registry[name], {k: v for k, v in values.items() if k != tag}
    own = getattr(cls, "check_config", None)         # a kind with checks across its keys
    if own is not None:
        return own(rest)
    return check_options(cls.options, rest, what=f"{registry.what} '{name}'")


def _tag_default(opt: Option):
    return opt.default.get(opt.tag) if isinstance(opt.default, dict) else None


def with_defaults(schema: dict[str, Option], values: dict) -> dict:
    """``values`` completed by the defaults of the keys it does not set (sections included)."""
    out = dict(values)
    for key, opt in schema.items():
        if opt.fields is not None and isinstance(out.get(key, {}), dict):
            out[key] = with_defaults(opt.fields, out.get(key, {}))
        elif key not in out and opt.default is not REQUIRED:
            out[key] = _copy(opt.default)
        elif (opt.kinds is not None and isinstance(out.get(key), dict) and opt.tag not in out[key]
              and _tag_default(opt) is not None):
            out[key] = {opt.tag: _tag_default(opt), **out[key]}     # the kind, not its options
    return out


def _copy(value):
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, dict) else (
        list(value) if isinstance(value, list) else value)


def optional(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    """``check`` for a value that may also be null."""
    return lambda value: None if value is None else check(value)


def positive(value) -> str | None:
    return None if value > 0 else f"must be > 0, got {value!r}"


def non_negative(value) -> str | None:
    return None if value >= 0 else f"must be >= 0, got {value!r}"


def probability(value) -> str | None:
    return None if 0 <= value < 1 else f"must be in [0, 1), got {value!r}"


def port(value) -> str | None:
    return None if 0 <= value < 65536 else f"expected a port number 0..65535 (0 = any free port), got {value!r}"
