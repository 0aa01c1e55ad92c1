"""``Source``: what the trainer holds (batches, commit, close), and the reader-type registry.

``READER_TYPES`` maps ``reader.type`` to a ``ReaderType(validate, open)``; the Kafka and
plug-in readers add themselves here (``register_reader_type``).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from streamtrain.errors import ConfigError

from .files import file_reader
from .formats import check_format_options, format_classes
from .malformed import Malformed
from .synthetic import SyntheticStream, check_synthetic


class Source:
    """A started reader: ``batches()`` yields ``Batch``; ``commit(offsets)`` after the update."""

    def __init__(self, reader: Callable, malformed: Malformed, description: str,
                 commit: Callable[[dict], None] | None = None,
                 close: Callable[[], None] | None = None):
        self._reader = reader
        self.malformed = malformed
        self._description = description
        self._commit = commit
        self._close = close
        self._live = []

    def batches(self):
        gen = self._reader()
        self._live.append(gen)
        return gen

    def commit(self, offsets: dict) -> None:
        """Record that everything up to ``offsets`` is trained (no-op for files / synthetic)."""
        if self._commit is not None:
            self._commit(offsets)

    def close(self) -> None:
        for gen in self._live:
            close = getattr(gen, "close", None)
            if close:
                close()
        self._live.clear()
        if self._close is not None:
            self._close()

    def describe(self) -> str:
        return self._description

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ReaderType(NamedTuple):
    validate: Callable[[dict], list]                       # cfg -> [(key path, message)]
    open: Callable[[dict, int, Malformed], Source]         # cfg, batch_size, malformed -> Source


# -- file ---------------------------------------------------------------------------------
FILE_KEYS = ("type", "path", "format", "options", "loop", "limit")


def _file_options(cfg: dict) -> tuple[dict, dict]:
    """(format options, where each came from) merging inline keys and ``options``."""
    inline = {k: v for k, v in cfg.items() if k not in FILE_KEYS}
    nested = cfg.get("options") or {}
    where = {k: k for k in inline}
    where.update({k: f"options.{k}" for k in nested} if isinstance(nested, dict) else {})
    return {**inline, **(nested if isinstance(nested, dict) else {})}, where


def validate_file(cfg: dict) -> list[tuple[str, str]]:
    problems = []
    if not isinstance(cfg.get("path"), str) or not cfg.get("path"):
        problems.append(("path", f"expected a file path, got {cfg.get('path')!r}"))
    fmt = cfg.get("format")
    if fmt not in format_classes():
        problems.append(("format", f"unknown format {fmt!r} (known: "
                                   f"{', '.join(sorted(format_classes()))})"))
    if "options" in cfg and not isinstance(cfg["options"], dict):
        problems.append(("options", f"expected an object, got {cfg['options']!r}"))
    limit = cfg.get("limit")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        problems.append(("limit", f"expected null or an integer >= 0, got {limit!r}"))
    if not isinstance(cfg.get("loop", False), bool):
        problems.append(("loop", f"expected true or false, got {cfg.get('loop')!r}"))
    if fmt in format_classes():
        options, where = _file_options(cfg)
        for key, msg in check_format_options(fmt, options):
            problems.append((where.get(key.split(".")[0], key) +
                             key[len(key.split(".")[0]):], msg))
    return problems


def open_file(cfg: dict, batch_size: int, malformed: Malformed) -> Source:
    options, _ = _file_options(cfg)
    reader = file_reader(cfg["path"], cfg["format"], options, batch_size, malformed,
                         loop=cfg.get("loop", False), limit=cfg.get("limit"))
    desc = f"file {cfg['path']} format={cfg['format']}" + (" loop" if cfg.get("loop") else "")
    return Source(reader, malformed, desc)


# -- synthetic ------------------------------------------------------------------------------
def open_synthetic(cfg: dict, batch_size: int, malformed: Malformed) -> Source:
    stream = SyntheticStream(cfg, batch_size)
    src = Source(stream.reader(), malformed, stream.describe())
    src.truth = stream.truth
    src.stream = stream
    return src


READER_TYPES: dict[str, ReaderType] = {
    "file": ReaderType(validate_file, open_file),
    "synthetic": ReaderType(check_synthetic, open_synthetic),
}


def register_reader_type(name: str, validate, open_fn) -> None:
    """Add a ``reader.type`` (used by the Kafka and plug-in readers)."""
    READER_TYPES[name] = ReaderType(validate, open_fn)


def validate_reader_config(cfg, prefix: str = "reader") -> list[tuple[str, str]]:
    """Every problem of a reader config as (json path, message), opening nothing."""
    if not isinstance(cfg, dict):
        return [(prefix, f"expected an object, got {cfg!r}")]
    kind = cfg.get("type")
    if kind not in READER_TYPES:
        return [(f"{prefix}.type", f"unknown reader type {kind!r} "
                                   f"(known: {', '.join(sorted(READER_TYPES))})")]
    return [(f"{prefix}.{key}" if key else prefix, msg)
            for key, msg in READER_TYPES[kind].validate(cfg)]


def open_reader(reader_cfg: dict, batch_size: int, malformed: Malformed | None = None) -> Source:
    """Validate ``reader_cfg`` (raising ``ConfigError`` with every problem) and open it."""
    problems = validate_reader_config(reader_cfg)
    if not isinstance(batch_size, int) or batch_size < 1:
        problems.append(("batch_size", f"expected an integer >= 1, got {batch_size!r}"))
    if problems:
        raise ConfigError(problems)
    malformed = malformed if malformed is not None else Malformed()
    return READER_TYPES[reader_cfg["type"]].open(reader_cfg, batch_size, malformed)
