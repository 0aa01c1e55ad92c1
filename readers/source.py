"""``Source``: the contract every reader implements (batches, commit, close; seek, stop, lag
and the idle hook with defaults), and the reader types.

``READERS`` maps ``reader.type`` to a ``Reader`` class (``kind``, ``options``, ``open``):
``file`` here, ``kafka``, ``synthetic`` and ``plugin`` in their modules; a new type is one
class with ``@register``.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from streamtrain.errors import ConfigError
from streamtrain.registry import Registry
from streamtrain.schema import REQUIRED, Option, check_options, join, kind_problems, non_negative, optional

from .compose import Prepare
from .files import PARSE_AHEAD, file_reader
from .formats import FORMATS, format_problems, split_format_options
from .malformed import Malformed


class Source:
    """The contract every reader implements: what the job holds while it trains.

    Required: ``batches(idle=None)`` yields ``Batch``es (each with ``offsets`` when the source
    has any); ``describe()``; ``close()``. The rest have defaults a reader overrides when it
    has the capability:

    * ``commit(offsets)``: called after the batch's update was applied (no-op here);
      ``commit_many(batches)``: several batches' offsets at once, oldest first (what one flush
      of a store that writes back made durable; here ``commit`` of each);
    * ``seek(offsets) -> bool``: resume from a checkpoint's offsets; False (the default) when
      the source has none to seek to;
    * ``request_stop()``: end ``batches()`` at its next safe point (thread-safe; no-op here:
      the job's loop checks its own stop between batches);
    * ``lag()``: {(topic, partition): records not yet applied}, thread-safe, or None (no lag);
    * ``waits_for_data``: True when ``batches()`` may block waiting for input (Kafka): the job
      then never reads a batch ahead of the one it trains;
    * the idle hook: ``batches(idle=fn)`` — a source that waits for data calls ``fn(due_only)``
      in the job's own thread while no batch is ready (``due_only=True``: do what is due) and
      when everything trained must be made durable and committed now (``due_only=False``:
      before partitions are revoked, at the end of the stream). ``fn`` may call ``commit``.
    * ``prepare``: a ``compose.Prepare`` run on each batch in the reader's own thread, or None.

    This base class is also the generic source over a generator function
    (``Source(reader, malformed, description)``), which the file, synthetic and plugin readers use.
    """

    waits_for_data = False

    def __init__(self, reader: Callable | None = None, malformed: Malformed | None = None,
                 description: str = "", commit: Callable[[dict], None] | None = None,
                 close: Callable[[], None] | None = None, prepare: Prepare | None = None):
        self._reader = reader
        #: a ``compose.Prepare`` run on each batch in the reader's own thread, for a source that
        #: has one (else None); the job installs its graph's batch-only work there
        self.prepare = prepare
        self.malformed = malformed if malformed is not None else Malformed()
        self._description = description
        self._commit = commit
        self._close = close
        self._live = []

    def batches(self, idle: Callable[[bool], None] | None = None):
        """The stream of batches (``idle`` is not called: a generator source never waits)."""
        if self._reader is None:
            raise NotImplementedError(f"{type(self).__name__} must implement batches()")
        gen = self._reader()
        self._live.append(gen)
        return gen

    def commit(self, offsets: dict) -> None:
        """Record that everything up to ``offsets`` is trained (no-op for files / synthetic)."""
        if self._commit is not None:
            self._commit(offsets)

    def commit_many(self, batches: list[dict]) -> None:
        """``commit`` of several batches' offsets, oldest first (one flush made them durable)."""
        for offsets in batches:
            self.commit(offsets)

    def seek(self, offsets: dict) -> bool:
        """Resume from ``offsets``; False: this source has no offsets to seek to."""
        return False

    def request_stop(self) -> None:
        """End ``batches()`` at the next safe point (nothing to wake here)."""

    def lag(self) -> dict | None:
        """Records not yet applied per partition; None: not a stream with a lag."""
        return None

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


READERS = Registry("reader type", group="streamtrain.reader_types")
register = READERS.register


class Reader:
    """A ``reader.type``: its keys (``options``), their check, and ``open`` → ``Source``.

    A subclass sets ``kind`` and ``options``; with ``format_options`` every key that is not
    one of ``options`` is an option of the reader's line format (inline, or under
    ``options``). ``check_config`` may add checks across keys; ``test_params()`` gives a config
    the conformance suite validates (and opens when ``offline``)."""

    kind: str = ""
    options: dict[str, Option] = {}
    format_options = False
    offline = True              # opens without a server (the conformance suite reads a batch)

    @classmethod
    def check_config(cls, cfg: dict) -> list[tuple[str, str]]:
        """Every problem of ``cfg`` (without ``type``) as (key path, message)."""
        own = {k: v for k, v in cfg.items() if k in cls.options or not cls.format_options}
        problems = check_options(cls.options, own, what=f"reader type '{cls.kind}'")
        if cls.format_options and cfg.get("format") in FORMATS:
            problems += format_problems(cfg, (*cls.options, "type"))
        return problems

    @classmethod
    def open(cls, cfg: dict, batch_size: int, malformed: Malformed) -> Source:
        raise NotImplementedError

    @classmethod
    def test_params(cls) -> dict:
        raise NotImplementedError(f"reader type '{cls.kind}' has no test_params()")


def _format_name(v) -> str | None:
    return None if v in FORMATS else FORMATS.unknown(v)


def _tsv_hint(path) -> str:
    if isinstance(path, str) and path.removesuffix(".gz").lower().endswith((".tsv", ".tab")):
        return " (a TSV with a header row is csv with delimiter '\\t'; Criteo's log is criteo)"
    return ""


def _path(v) -> str | None:
    return None if v else "expected a file path, got ''"


@register
class FileReader(Reader):
    """Lines of a file (gzip or not) in one of the formats."""

    kind = "file"
    format_options = True
    options = {
        "path": Option(REQUIRED, (str,), check=_path, doc="the file (``.gz`` is decompressed)"),
        "format": Option(REQUIRED, (str,), check=_format_name, doc="its line format"),
        "options": Option({}, (dict,), doc="the format's options (or give them inline)"),
        "loop": Option(False, (bool,), doc="start again at the end"),
        "limit": Option(None, (int, type(None)), check=optional(non_negative),
                        doc="stop after this many lines (null = all)"),
        "parse_ahead": Option(PARSE_AHEAD, (int,), check=non_negative,
                              doc="batches parsed ahead in a parse thread while the trainer trains "
                                  "(0 = parse in the training thread)"),
        "parse_thread": Option("auto", (str,), choices=("auto", "always"),
                               doc='"auto": the parse thread hands its work back to the training '
                                   'thread when its first 200 batches cost it < 1 ms of CPU each '
                                   '(handing a batch across costs about as much); "always": it never does'),
    }

    @classmethod
    def check_config(cls, cfg: dict) -> list[tuple[str, str]]:
        problems = super().check_config(cfg)
        if "format" not in cfg:              # say the choices (a .csv/.jsonl/.libsvm path infers it)
            problems = [(k, f"{m}: one of {', '.join(sorted(FORMATS))}{_tsv_hint(cfg.get('path'))}")
                        if k == "format" else (k, m) for k, m in problems]
        return problems

    @classmethod
    def open(cls, cfg, batch_size, malformed):
        options, _ = split_format_options(cfg, (*cls.options, "type"))
        prepare = Prepare(handback=cfg.get("parse_thread", "auto") == "auto")
        reader = file_reader(cfg["path"], cfg["format"], options, batch_size, malformed,
                             loop=cfg.get("loop", False), limit=cfg.get("limit"), prepare=prepare,
                             parse_ahead=cfg.get("parse_ahead", PARSE_AHEAD))
        desc = f"file {cfg['path']} format={cfg['format']}" + (" loop" if cfg.get("loop") else "")
        return Source(reader, malformed, desc, prepare=prepare)

    @classmethod
    def test_params(cls):
        path = Path(tempfile.gettempdir()) / "streamtrain-test-params.libsvm"
        path.write_text("".join(f"{i % 2} {i}:1 {i % 7}:0.5\n" for i in range(100)))
        return {"path": str(path), "format": "libsvm", "limit": 50}


def validate_reader_config(cfg, prefix: str = "reader") -> list[tuple[str, str]]:
    """Every problem of a reader config as (json path, message), opening nothing."""
    if not isinstance(cfg, dict):
        return [(prefix, f"expected an object, got {cfg!r}")]
    return [(join(prefix, key), msg) for key, msg in kind_problems(READERS, cfg)]


def open_reader(reader_cfg: dict, batch_size: int, malformed: Malformed | None = None) -> Source:
    """Validate ``reader_cfg`` (raising ``ConfigError`` with every problem) and open it."""
    problems = validate_reader_config(reader_cfg)
    if not isinstance(batch_size, int) or batch_size < 1:
        problems.append(("batch_size", f"expected an integer >= 1, got {batch_size!r}"))
    if problems:
        raise ConfigError(problems)
    malformed = malformed if malformed is not None else Malformed()
    return READERS[reader_cfg["type"]].open(reader_cfg, batch_size, malformed)
