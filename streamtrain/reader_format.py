"""The line format a job's reader parses and what it does to a number, read off its config.

A model's numeric weights are learnt on the numbers as its reader gave them: ``log1p`` (csv,
criteo and jsonl unless their ``numeric_transform`` is ``none``) or as written (``none``:
synthetic and plug-in readers too). A checkpoint records it (``job_checkpoints``) and whatever
uses the model on other input, ``eval`` on a stream or ``serve`` on requests, reads numbers the
same way (``streamtrain/saved.py``, ``streamtrain/serve/service.py``).
"""
from __future__ import annotations

import json

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


def numeric_transform(reader_cfg: dict) -> str:
    """``log1p`` or ``none``: what the reader does to a numeric field's value."""
    fmt, options = stream_format(reader_cfg)
    return getattr(make_parser(fmt, options), "transform", "none") if fmt else "none"


def separators(reader_cfg: dict) -> dict:
    """A csv reader's ``multivalue`` ``{column: separator}`` (a value ``"a|b"``: two ids)."""
    fmt, options = stream_format(reader_cfg)
    return dict(options.get("multivalue") or {}) if fmt == "csv" else {}


def problems(meta: dict, reader_cfg: dict, adopt: bool = False) -> list[str]:
    """What is wrong with reading input for a checkpoint's model with this reader (numbers
    transformed otherwise, csv values split otherwise than in training); see ``transform_problem``."""
    found = [transform_problem(meta, reader_cfg, adopt), _separators_problem(meta, reader_cfg)]
    return [p for p in found if p]


def _separators_problem(meta: dict, reader_cfg: dict) -> str | None:
    trained = meta.get("separators")
    if not isinstance(trained, dict) or stream_format(reader_cfg)[0] != "csv" or separators(reader_cfg) == trained:
        return None
    ours = separators(reader_cfg)
    return (f"the model's ids were made with csv multivalue {json.dumps(trained)}, this reader splits "
            f"{json.dumps(ours) if ours else 'no column'}: set --set 'reader.multivalue={json.dumps(trained)}'")


def transform_problem(meta: dict, reader_cfg: dict, adopt: bool = False) -> str | None:
    """What is wrong with reading numbers for a checkpoint's model with this reader: it was
    trained on them through another transform (None: the same, no numeric field, or not
    recorded). ``adopt``: a reader that names no format takes the checkpoint's (serving)."""
    trained = meta.get("numeric_transform")
    if trained is None or not (meta.get("schema") or {}).get("dense"):
        return None
    fmt, _ = stream_format(reader_cfg)
    ours = numeric_transform(reader_cfg)
    if ours == trained or (adopt and fmt is None):
        return None
    settable = fmt is not None and hasattr(make_parser(fmt, stream_format(reader_cfg)[1]), "transform")
    fix = (f"set --set reader.numeric_transform={trained}" if settable else
           f"read them with a csv, criteo or jsonl reader whose numeric_transform is {trained!r}")
    return (f"the model's numeric fields were learnt on numbers read with numeric_transform {trained!r}, "
            f"this reader gives them {'as written' if ours == 'none' else 'through ' + ours}: {fix}")
