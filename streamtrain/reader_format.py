"""The line format a job's reader parses and what it does to a number, read off its config.

A model's numeric weights are learnt on the numbers as its reader gave them: ``log1p`` (csv,
criteo and jsonl unless their ``numeric_transform`` is ``none``) or as written (``none``:
synthetic and plug-in readers too). A checkpoint records it (``job_checkpoints``) and whatever
uses the model on other input, ``eval`` on a stream or ``serve`` on requests, reads numbers the
same way (``streamtrain/saved.py``, ``streamtrain/serve/service.py``).
"""
from __future__ import annotations

import json

from .graphstore.nodes import reader_config
from .readers import make_parser
from .readers.formats import split_format_options
from .readers.kafka.config import DEFAULTS as KAFKA_DEFAULTS, split_options
from .readers.source import FileReader


def stream_format(reader_cfg: dict) -> tuple[str | None, dict]:
    """The line format of the job's file or Kafka reader and its options (else None)."""
    kind = reader_cfg.get("type")
    if kind == "kafka":
        options, _ = split_options(reader_cfg)
        return reader_cfg.get("format", KAFKA_DEFAULTS["format"]), options
    if kind == "file" and reader_cfg.get("format"):
        options, _ = split_format_options(reader_cfg, (*FileReader.options, "type"))
        return reader_cfg["format"], options
    return None, {}


#: what a reader does to its input that its model's weights depend on, as recorded
READING = ("numeric_transform", "separators", "hash_as")


def reader_reading(reader_cfg: dict) -> dict:
    """How a reader section makes features of its input: ``numeric_transform`` (``log1p`` or
    ``none``: what it does to a numeric field's value), ``separators`` (a csv reader's
    ``multivalue`` ``{column: separator}``: a value ``"a|b"`` is two ids) and ``hash_as`` (a csv
    reader's ``{column: other}``: a column's values get ``other``'s ids, a graph's shared ids or a
    hand-written alias)."""
    fmt, options = stream_format(reader_cfg)
    return {"numeric_transform": _transform(make_parser(fmt, options) if fmt else None),
            "separators": _separators(fmt, options), "hash_as": _hash_as(fmt, options)}


def recorded(doc: dict) -> dict:
    """The reading a checkpoint's meta or a trainer's publication records (a key None: not
    recorded, by an older version)."""
    return {key: doc.get(key) for key in READING}


def job_reader(config: dict) -> dict:
    """A job's reader section as its reader reads it (a graph's shared ids applied)."""
    return reader_config(config.get("reader", {}), config.get("graph"))


def reading(config: dict) -> dict:
    """How a job's reader makes features of its input, as its checkpoints and its publication
    on a Redis store record it."""
    return reader_reading(job_reader(config))


def problems(meta: dict, config: dict, adopt: bool = False) -> list[str]:
    """What is wrong with reading input for a checkpoint's model with a job's reader (numbers
    transformed otherwise, csv values split or hashed otherwise than in training). ``adopt``: a reader
    that names no format takes the checkpoint's way (serving)."""
    reader = job_reader(config)
    found = [_transform_problem(meta, reader, adopt), *(_ids_problem(meta, reader, key) for key in _CSV_IDS)]
    return [p for p in found if p]


def _parser(reader_cfg: dict):
    fmt, options = stream_format(reader_cfg)
    return make_parser(fmt, options) if fmt else None


def _transform(parser) -> str:
    return getattr(parser, "transform", "none")


#: what a checkpoint and the trainers' publication record of a csv reader's options that make ids:
#: recorded key -> (the option, what the reader does with it, said of an empty one)
_CSV_IDS = {"separators": ("multivalue", "splits", "no column"),
            "hash_as": ("hash_as", "hashes", "every column as itself")}


def _csv_option(fmt: str | None, options: dict, option: str) -> dict:
    return dict(options.get(option) or {}) if fmt == "csv" else {}


def _separators(fmt: str | None, options: dict) -> dict:
    return _csv_option(fmt, options, "multivalue")


def _hash_as(fmt: str | None, options: dict) -> dict:
    return _csv_option(fmt, options, "hash_as")


def _ids_problem(meta: dict, reader_cfg: dict, key: str) -> str | None:
    """The model's ids were made with another csv ``multivalue`` / ``hash_as`` than this reader's."""
    option, does, empty = _CSV_IDS[key]
    trained = meta.get(key)
    fmt, options = stream_format(reader_cfg)
    ours = _csv_option(fmt, options, option)
    if not isinstance(trained, dict) or fmt != "csv" or ours == trained:
        return None
    return (f"the model's ids were made with csv {option} {json.dumps(trained)}, this reader {does} "
            f"{json.dumps(ours) if ours else empty}: set --set 'reader.{option}={json.dumps(trained)}'")


def _transform_problem(meta: dict, reader_cfg: dict, adopt: bool) -> str | None:
    """The model was trained on numbers through another transform than this reader's (None:
    the same, no numeric field, or not recorded)."""
    trained = meta.get("numeric_transform")
    if trained is None or not (meta.get("schema") or {}).get("dense"):
        return None
    parser = _parser(reader_cfg)
    ours = _transform(parser)
    if ours == trained or (adopt and parser is None):
        return None
    fix = (f"set --set reader.numeric_transform={trained}" if hasattr(parser, "transform") else
           f"read them with a csv, criteo or jsonl reader whose numeric_transform is {trained!r}")
    return (f"the model's numeric fields were learnt on numbers read with numeric_transform {trained!r}, "
            f"this reader gives them {'as written' if ours == 'none' else 'through ' + ours}: {fix}")
