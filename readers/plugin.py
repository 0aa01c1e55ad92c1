"""Plug-in readers: any reader factory, named by dotted path or by entry point.

    "reader": {"type": "plugin", "factory": "mypkg.readers:make_reader", "args": {"n": 1000}}
    "reader": {"type": "plugin", "entry_point": "clicks", "args": {...}, "format": "criteo"}

The factory is called as ``factory(**args)`` and returns a *reader* (Paddle's protocol: a
function returning a fresh iterator) or an iterable. Its items may be:

* ``Batch`` — passed through as they are (their ``offsets`` are what ``commit`` gets);
* ``dict`` records (``{"label": 1, "user": "u7", "age": 31.0, ...}``) — batched by
  ``batch_size`` and turned into a batch by ``records_to_batch`` (floats are dense columns,
  strings/ints categorical, lists multi-valued; the label under key ``label_key``, default
  ``"label"``); a record whose label is missing, not a number or not in the label set (option
  ``labels``, default [0, 1], after ``label_map``: both allowed without a ``format``) is counted
  as ``label`` and skipped, one whose dense column holds something else than a finite number (a
  string, NaN) as ``number``;
* ``bytes`` / ``str`` log lines — batched and parsed by ``format`` (``criteo``/``csv``/
  ``libsvm``, with its options inline or in ``options``), bad lines counted by reason.

If the object the factory returns has ``commit(offsets)``, ``seek(offsets)`` or ``close()``,
the trainer calls them (commit after each batch's update). Entry points are registered under
the group ``streamtrain.readers`` in the plug-in's packaging metadata::

    [project.entry-points."streamtrain.readers"]
    clicks = "mypkg.readers:make_reader"
"""
from __future__ import annotations

import importlib
import importlib.metadata as md
import logging
import os
import re
import sys

import numpy as np

from streamtrain.batch import Batch
from streamtrain.errors import ConfigError, ReaderError
from streamtrain.schema import check_options

from .formats import COMMON_OPTIONS, LabelRule, format_problems, make_parser, split_format_options
from .malformed import LABEL, Malformed
from .records import infer_schema, records_to_batch
from .source import Reader, Source, register

log = logging.getLogger("streamtrain")

GROUP = "streamtrain.readers"
RECORD_OPTIONS = {k: COMMON_OPTIONS[k] for k in ("labels", "label_map")}    # (dict records, no format)
PLUGIN_KEYS = ("type", "factory", "entry_point", "args", "format", "options", "label_key")
_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def load_factory(spec: str):
    """The object named ``package.module:attr`` (``attr`` may be dotted). A module that is not
    installed is looked for in the current directory too, as ``python -m`` does (the
    ``streamtrain`` console script alone would not: it puts only its own folder on the path)."""
    if not isinstance(spec, str) or not _SPEC.match(spec):
        raise ReaderError(f"plug-in factory {spec!r}: expected 'package.module:function'")
    mod_name, attr = spec.split(":", 1)
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)       # as ``python -m`` finds it; installed modules still come first
    try:
        obj = importlib.import_module(mod_name)
    except ImportError as err:
        raise ReaderError(f"plug-in factory {spec!r}: cannot import {mod_name!r}: {err}") from err
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ReaderError(f"plug-in factory {spec!r}: {mod_name!r} has no {attr!r}") from None
    if not callable(obj):
        raise ReaderError(f"plug-in factory {spec!r} is a {type(obj).__name__}, not callable")
    return obj


def entry_points() -> dict:
    """{name: entry point} of the ``streamtrain.readers`` group in the installed distributions."""
    return {ep.name: ep for ep in md.entry_points(group=GROUP)}


def load_entry_point(name: str):
    eps = entry_points()
    if name not in eps:
        raise ReaderError(f"no reader plug-in named {name!r} in entry-point group {GROUP!r} "
                          f"(installed: {', '.join(sorted(eps)) or 'none'})")
    try:
        return eps[name].load()
    except Exception as err:
        raise ReaderError(f"reader plug-in {name!r} ({eps[name].value}) failed to load: {err}") from err


def _options(cfg: dict) -> dict:
    return split_format_options(cfg, PLUGIN_KEYS)[0]


def validate(cfg: dict) -> list[tuple[str, str]]:
    problems = []
    has_f, has_e = "factory" in cfg, "entry_point" in cfg
    if has_f == has_e:
        problems.append(("factory", "give exactly one of 'factory' (package.module:function) "
                                    "or 'entry_point' (a name in group streamtrain.readers)"))
    elif has_f:
        try:
            load_factory(cfg["factory"])
        except ReaderError as err:
            problems.append(("factory", str(err)))
    else:
        name = cfg["entry_point"]
        if not isinstance(name, str) or name not in entry_points():
            problems.append(("entry_point", f"no plug-in {name!r} in group {GROUP!r} "
                                            f"(installed: {', '.join(sorted(entry_points())) or 'none'})"))
    if not isinstance(cfg.get("args", {}), dict):
        problems.append(("args", f"expected an object of keyword arguments, got {cfg.get('args')!r}"))
    if cfg.get("format") is not None:
        problems += format_problems(cfg, PLUGIN_KEYS)
    else:                                   # dict records: the label options apply to them too
        labels = {k: v for k, v in _options(cfg).items() if k in RECORD_OPTIONS}
        problems += check_options(RECORD_OPTIONS, labels, what="a plug-in's records")
        problems += [(key, f"unknown key for reader type 'plugin' (known: {', '.join(sorted(PLUGIN_KEYS))}, "
                           f"{', '.join(RECORD_OPTIONS)}; other keys are format options and need a 'format')")
                     for key in _options(cfg) if key not in RECORD_OPTIONS]
    return problems


class _Batcher:
    """Items of a plug-in → batches: dicts and lines are gathered, Batches pass through."""

    def __init__(self, batch_size: int, parser, labels: LabelRule, label_key: str, malformed, name):
        self.size, self.parser, self.labels = batch_size, parser, labels
        self.label_key, self.malformed, self.name = label_key, malformed, name
        self.kind, self.items = None, []
        self.schema: dict[str, str] = {}    # each record column's kind, fixed by the first batch it is in

    def add(self, item):
        if isinstance(item, Batch):
            yield from self.flush()
            if item.size:
                yield item
            return
        if isinstance(item, dict):
            kind = "record"
        elif isinstance(item, (bytes, bytearray, str)):
            kind = "line"
            if self.parser is None:
                raise ReaderError(f"plug-in {self.name} yields lines: give the reader a 'format'")
        else:
            raise ReaderError(f"plug-in {self.name} yielded an item of type {type(item).__name__}: "
                              "expected a Batch, a dict record or a log line")
        if kind != self.kind:
            yield from self.flush()
            self.kind = kind
        self.items.append(item)
        if len(self.items) >= self.size:
            yield from self.flush()

    def flush(self):
        items, self.items = self.items, []
        if not items:
            return
        batch = self.parser.parse(items) if self.kind == "line" else self._records(items)
        if batch.size:
            yield batch

    def _records(self, records):
        first = not self.schema
        for column, kind in infer_schema(records, self.label_key).items():
            if column in self.schema:                # (a dense column's string later: ``number``)
                continue
            if kind == "dense" and not first:        # the model's dense input is the first batch's columns
                log.warning("plug-in %s: dense column %r first appears after the first batch, whose columns "
                            "the model was built on: ignored (yield it from the first records, or give "
                            "its value as a string to make it categorical)", self.name, column)
                kind = "skip"
            self.schema[column] = kind
        if self.labels.words:               # text labels ({"yes": 1}): a loop over the records, as records_to_batch's
            records = [_worded(r, self.label_key, self.labels) for r in records]
        batch = records_to_batch(records, schema_hint=self.schema, label=self.label_key, malformed=self.malformed)
        y = batch.labels.astype(np.float64)
        batch.labels, ok = self.labels.apply(y, np.isfinite(y))     # label_map's numbers, then the allowed labels
        if not ok.all():
            self.malformed.add(LABEL, int((~ok).sum()))
            batch = batch.take(np.flatnonzero(ok))
        return batch


def _worded(record: dict, key: str, rule: LabelRule) -> dict:
    """The record with a label written as text replaced by ``label_map``'s number for it."""
    value = record.get(key)
    mapped = rule.word(value) if isinstance(value, str) else None
    return {**record, key: mapped} if mapped is not None else record


def _guarded(it, name: str):
    """The plug-in's items; an exception its code raises ends the run as a ``ReaderError``
    naming the plug-in and how far it got, its traceback logged first (it points into the
    plug-in's own code)."""
    n = 0
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except Exception as err:
            log.error("plug-in %s raised after %d items", name, n, exc_info=True)
            raise ReaderError(f"plug-in {name} raised {type(err).__name__}: {err} (after {n} items; "
                              f"its traceback is logged above)") from None
        n += 1
        yield item


def open_plugin(cfg: dict, batch_size: int, malformed: Malformed) -> Source:
    problems = validate(cfg)
    if problems:
        raise ConfigError(problems)
    if "factory" in cfg:
        name, factory = cfg["factory"], load_factory(cfg["factory"])
    else:
        name, factory = cfg["entry_point"], load_entry_point(cfg["entry_point"])
    obj = factory(**(cfg.get("args") or {}))
    options = _options(cfg)
    parser = make_parser(cfg["format"], options, malformed) if cfg.get("format") else None
    labels = parser.labels if parser is not None else LabelRule(options.get("labels", (0, 1)),
                                                                 options.get("label_map"))
    label_key = cfg.get("label_key", "label")

    def reader():
        it = obj() if callable(obj) and not hasattr(obj, "__iter__") else iter(obj)
        b = _Batcher(batch_size, parser, labels, label_key, malformed, name)
        for item in _guarded(it, name):
            yield from b.add(item)
        yield from b.flush()

    src = Source(reader, malformed, f"plugin {name}" + (f" format={cfg['format']}" if parser else ""),
                 commit=getattr(obj, "commit", None), close=getattr(obj, "close", None))
    if hasattr(obj, "seek"):
        src.seek = obj.seek
    src.plugin = obj
    return src


@register
class PluginReader(Reader):
    """Any reader factory, named by dotted path or by entry point (this module's docstring)."""

    kind = "plugin"

    @classmethod
    def check_config(cls, cfg):
        return validate(cfg)

    @classmethod
    def open(cls, cfg, batch_size, malformed):
        return open_plugin(cfg, batch_size, malformed)

    @classmethod
    def test_params(cls):
        return {"factory": "streamtrain.readers.plugin:example_records", "args": {"n": 50}}


def example_records(n: int = 50):
    """A plug-in factory for tests and the docs: ``n`` dict records, a reader function."""
    def reader():
        for i in range(n):
            yield {"label": i % 2, "user": f"u{i % 7}", "hour": float(i % 24)}
    return reader
