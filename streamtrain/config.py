"""The job config: one JSON document, ``--set`` overrides by dotted path, every problem listed.

``SCHEMA`` states every top-level key once: its default, what it accepts, and for a section
its keys (``metrics``, ``checkpoint``, ``log``, ``drift``, ``serve``) or the registry its kind comes from
(``reader``, ``store``, ``default_optimizer``). Adding a section is one entry here. In a
dotted path, a list item is addressed by its ``name`` (``layers.emb.dim``) or its index
(``layers.1.dim``).
"""
from __future__ import annotations

import copy
import json
import logging
import sys
from pathlib import Path

from . import footprint
from .drift import DRIFT_OPTIONS
from .errors import ConfigError
from .graph import layers_from_config, topology_problems
from .paths import set_path  # noqa: F401  (config.set_path: --set, and scripts that use it)
from .automl import space as automl_space
from .graphstore.stream import problems as graph_problems
from .ops import LAYERS
from .optim import OPTIMIZERS
from .readers import READERS
from .schema import (NUMBER, REQUIRED, Option, check_options, join, kind_problems, non_negative, port, positive,
                     with_defaults)
from .serve.settings import SERVE_OPTIONS
from .store import STORES


def _level(value) -> str | None:
    return None if isinstance(logging.getLevelName(value.upper()), int) else (
        f"expected a logging level (DEBUG, INFO, WARNING, ERROR), got {value!r}")


METRICS = {
    "enabled": Option(True, (bool,), doc="serve /metrics, /healthz, /readyz"),
    "host": Option("127.0.0.1", (str,), doc="address to listen on"),
    "port": Option(9464, (int,), check=port, doc="port (0 = any free port)"),
    "window": Option(100_000, (int,), check=positive, doc="examples in the sliding logloss/AUC window"),
    "stall_seconds": Option(300.0, NUMBER, check=non_negative,
                            doc="/healthz fails after this long without a step (0 = never)"),
    "refresh_seconds": Option(1.0, NUMBER, check=positive, doc="how often the costlier gauges are refreshed"),
    "lifecycle_seconds": Option(60.0, NUMBER, check=positive, doc="how often the store's rows are counted"),
    "max_connections": Option(32, (int,), check=positive,
                              doc="open connections at most (a thread each); one more is answered 503 at once"),
    "timeout_s": Option(10.0, NUMBER, check=positive,
                        doc="a request must arrive whole within this long (else 408 and closed)"),
}
CHECKPOINT = {
    "dir": Option(None, (str, type(None)), doc="where checkpoints go (null = none)"),
    "every_seconds": Option(600, NUMBER, check=non_negative, doc="a checkpoint this often (0 = off)"),
    "every_batches": Option(0, (int,), check=non_negative, doc="and/or every this many batches (0 = off)"),
    "keep": Option(3, (int,), check=non_negative, doc="how many to keep"),
}
LOG = {
    "every_seconds": Option(10.0, NUMBER, check=non_negative, doc="a progress line this often (and one after the first batch)"),
    "format": Option("text", (str,), ("text", "json"), doc="log line format"),
    "level": Option("INFO", (str,), check=_level, doc="logging level"),
}


def layer_problems(configs: list) -> list[tuple[str, str]]:
    """Every problem of the ``layers`` list: each layer's options and optimizer, and the
    topology (names, inputs, arity, cycles, one loss) even when some options are wrong."""
    try:
        layers_from_config(configs)
        found = []
    except ConfigError as err:
        found = list(err.problems)
    found += [p for p in topology_problems([_Outline(i, c) for i, c in enumerate(configs)]) if p not in found]
    for i, cfg in enumerate(configs):
        if isinstance(cfg, dict) and isinstance(cfg.get("optimizer"), dict):
            found += [(join(f"layers[{i}].optimizer", k), m) for k, m in kind_problems(OPTIMIZERS, cfg["optimizer"])]
    return [(path.removeprefix("layers"), msg) for path, msg in found]     # relative to ``layers``


class _Outline:
    """What the topology checks read of a layer, taken from its config alone."""

    def __init__(self, i: int, cfg):
        cfg = cfg if isinstance(cfg, dict) else {}
        cls = LAYERS[cfg["type"]] if cfg.get("type") in LAYERS else None
        name = cfg.get("name")
        self.name = name if isinstance(name, str) and name else f"#{i}"
        inputs = cfg.get("inputs", [])
        inputs = [inputs] if isinstance(inputs, str) else inputs
        self.inputs = [x for x in inputs if isinstance(x, str)] if isinstance(inputs, list) else []
        self.kind = cfg.get("type")
        self.arity = cls.arity if cls else (0, None)
        self.is_loss = bool(cls and cls.is_loss)


SCHEMA = {
    "name": Option(None, (str, type(None)), doc="the job's name (the redis namespace by default)"),
    "description": Option(None, (str, type(None)), doc="free text"),
    "reader": Option({"type": "synthetic"}, kinds=READERS, doc="where examples come from ([Readers](readers.md))"),
    "batch_size": Option(256, (int,), check=positive, doc="examples per mini-batch"),
    "store": Option({"backend": "memory"}, kinds=STORES, tag="backend",
                    doc="where parameters live ([Parameter store](redis.md))"),
    "default_optimizer": Option({"type": "adagrad", "lr": 0.05}, kinds=OPTIMIZERS,
                                doc="the update rule of every parameter without its own ([Optimizers](layers.md#optimizers))"),
    "layers": Option(REQUIRED, (list,), nested=layer_problems,
                     doc='the graph: `{"name", "type", "inputs", options…, "optimizer"?, "param"?}` '
                         '([Layer kinds](layers.md))'),
    "metrics": Option(fields=METRICS,
                      doc="Prometheus and health endpoints ([Operations](operations.md#endpoints))"),
    "checkpoint": Option(fields=CHECKPOINT, doc="periodic atomic checkpoints ([Checkpoints](checkpoints.md))"),
    "log": Option(fields=LOG, doc="progress lines"),
    "graph": Option(None, (dict, type(None)), nested=graph_problems,
                    doc="graph learning: endpoint fields, fanouts, graph store ([Graph learning](graph.md))"),
    "seed": Option(0, (int,), doc="dropout and other randomness in the trainer"),
    "switch_interval_ms": Option(1.0, NUMBER, check=positive,
                                 doc="Python's thread switch interval while `streamtrain run` runs "
                                     "(`sys.setswitchinterval`; Python's default is 5): how soon the "
                                     "parse thread gets the GIL back from the trainer"),
    "drift": Option(fields=DRIFT_OPTIONS, doc="drift alarms over the progressive loss ([Drift alarms](drift.md))"),
    "serve": Option(fields=SERVE_OPTIONS, doc="the prediction server ([Serving](serving.md))"),
    "task": Option(None, (str, type(None)), choices=(None, "auto", "click", "regression"),
                   doc='"auto": the first batch says what the label is: all 0 or 1 keeps the click loss, other '
                       'numbers make the job a regression (mse in the first batch\'s units; [AutoML](automl.md)); '
                       '"click" and "regression" are what it decided (checkpoints, the store); null: as the layers say'),
    "automl": Option(None, (dict, type(None)), nested=automl_space.section_problems,
                     doc="champion/challenger search over a space of this job's settings, on the stream "
                         "([AutoML](automl.md)); null: train the one model of `layers`"),
}


def markdown(schema: dict[str, Option]) -> str:
    """The docs' table of a schema: key, default, meaning (``python -m streamtrain.config``)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]
    for key, opt in schema.items():
        default = ("required" if opt.default is REQUIRED else "see below" if opt.fields is not None
                   else f"`{json.dumps(opt.default)}`")
        rows.append(f"| `{key}` | {default} | {opt.doc} |")
    return "\n".join(rows)


def tables() -> dict[str, str]:
    """The config tables by heading: the top level, then each section."""
    out = {"the job config": markdown(SCHEMA)}
    out.update({f"`{key}`": markdown(opt.fields) for key, opt in SCHEMA.items() if opt.fields is not None})
    return out


def defaults() -> dict:
    """A config with every default and nothing else (``layers`` is required, so absent)."""
    return with_defaults(SCHEMA, {})


def merge(base: dict, over: dict) -> dict:
    """Recursive dict merge; ``over`` wins; lists are replaced, not merged."""
    out = copy.deepcopy(base)
    for k, v in over.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def parse_value(text: str):
    """A ``--set`` value: JSON when it parses (numbers, true, null, lists), else a string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def load(path, sets=()) -> dict:
    """Read a config file, apply defaults, then the ``PATH=VALUE`` overrides in order."""
    config, found, _ = load_listing(path, sets)
    if found:
        raise ConfigError(found)
    return config


def load_listing(path, sets=()) -> tuple[dict, list, list[str]]:
    """``load`` that returns the problems of the ``--set`` overrides instead of raising, so
    ``validate`` lists them with the config's own (an unreadable file still raises), and what
    ``infer_reader`` inferred, in words."""
    raw = read_json(Path(path))
    if not isinstance(raw, dict):
        raise ConfigError([("", f"{path}: expected a JSON object at the top, got {type(raw).__name__}")])
    config = with_defaults(SCHEMA, raw)
    found = set_problems(config, sets)
    named = isinstance(raw.get("reader"), dict) and "type" in raw["reader"] or \
        any(item.split("=", 1)[0].strip() in ("reader", "reader.type") for item in sets)
    return config, found, infer_reader(config, named) + infer_labels(config)


SUFFIX_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".libsvm": "libsvm", ".svm": "libsvm"}


def infer_reader(config: dict, named_type: bool) -> list[str]:
    """A ``reader.path`` on the default reader (the synthetic stream, its type not named) makes
    it a file reader; a file reader without ``format`` takes the one its path's suffix names
    (``.csv``, ``.jsonl`` / ``.ndjson``, ``.libsvm`` / ``.svm``, before a ``.gz``); what it
    inferred, in words. Nothing else is guessed: a ``.tsv`` may be a CSV with tabs or Criteo's log."""
    reader, said = config.get("reader"), []
    if not isinstance(reader, dict) or not isinstance(reader.get("path"), str):
        return said
    if reader.get("type") == "synthetic" and not named_type:
        reader["type"] = "file"
        said.append("reader.type file (reader.path is given and reader.type is not)")
    suffix = Path(reader["path"].removesuffix(".gz")).suffix.lower()
    if reader.get("type") == "file" and "format" not in reader and suffix in SUFFIX_FORMATS:
        reader["format"] = SUFFIX_FORMATS[suffix]
        said.append(f"reader.format {reader['format']} (the suffix of {reader['path']}; set reader.format "
                    f"to read it otherwise)")
    return said


def infer_labels(config: dict) -> list[str]:
    """A loss that is not a click's sets the reader's labels unless the reader names them (the
    formats' default, [0, 1], is a click's): a regression (``mse``) reads any finite number, a
    ``softmax_ce`` whose input layer gives its ``dim`` K the classes 0..K−1; what it inferred,
    in words."""
    reader, layers = config.get("reader"), config.get("layers")
    if not isinstance(reader, dict) or reader.get("type") not in ("file", "kafka", "plugin"):
        return []
    if reader_labels(reader)[2]:
        return []
    mse, soft = loss_layer(layers, "mse"), loss_layer(layers, "softmax_ce")
    if config.get("task") == "auto" and loss_layer(layers, "logloss") is not None:
        reader["labels"] = None
        return ["reader.labels null: any number (task auto: the first batch decides between a click's labels, 0 "
                "and 1, and a regression's)"]
    if mse is not None:
        reader["labels"] = None
        return [f"reader.labels null: any number (the loss '{mse.get('name')}' is mse; set reader.labels to "
                f"accept only some values)"]
    k, source = _classes_from(layers, soft)
    if k is None:
        return []
    reader["labels"] = list(range(k))
    through = "" if source == soft["inputs"][0] else f" through '{soft['inputs'][0]}'"
    return [f"reader.labels [0, ..., {k - 1}]: the classes of the softmax_ce loss '{soft.get('name')}' (the dim "
            f"of its input '{source}'{through})"]


def reader_labels(reader: dict) -> tuple[str, object, bool]:
    """(where the reader's ``labels`` are, their value: inline or under ``options``, the
    formats' [0, 1] when neither names them, whether one does)."""
    nested = reader.get("options") if isinstance(reader.get("options"), dict) else {}
    given = "labels" in nested or "labels" in reader
    path = "reader.options.labels" if "labels" in nested else "reader.labels"
    return path, nested.get("labels", reader.get("labels", [0, 1])), given


def loss_layer(layers, kind: str) -> dict | None:
    """The first layer config of that kind (a loss's: ``mse``, ...) in a job's ``layers``, or None."""
    return next((c for c in layers if isinstance(c, dict) and c.get("type") == kind), None) \
        if isinstance(layers, list) else None


def _classes(layers, loss: dict | None) -> int | None:
    """K of a softmax_ce loss whose input layer names its ``dim`` (an fc's), or is an ``add`` or
    a pooling of layers whose first does (a linear model's terms: ``examples/multiclass.json``),
    else None (``_classes_from``: and that layer's name)."""
    return _classes_from(layers, loss)[0]


def _classes_from(layers, loss: dict | None) -> tuple[int | None, str | None]:
    dim, name = _width_from(layers, loss)
    return (dim, name) if dim is not None and dim >= 2 else (None, None)


def _width_from(layers, loss: dict | None) -> tuple[int | None, str | None]:
    """The ``dim`` a loss's input takes from the first layer that names one (through an ``add`` or
    a pooling), and that layer's name; (None, None) when none does."""
    inputs = loss.get("inputs") if loss is not None else None
    if not isinstance(inputs, list) or len(inputs) != 1:
        return None, None
    named = {c.get("name"): c for c in layers if isinstance(c, dict)}
    source = named.get(inputs[0], {})
    for _ in range(len(named)):      # to the first input of an add or a pooling (bounded: a cycle is the graph's error)
        inner = source.get("inputs")
        if source.get("type") not in ("add", "sum_pooling", "mean_pooling") or not isinstance(inner, list) or not inner:
            break
        source = named.get(inner[0], {})
    dim = source.get("dim")
    return (dim, source.get("name")) if isinstance(dim, int) and not isinstance(dim, bool) else (None, None)


def read_json(path: Path):
    """The JSON document in ``path``; a ``ConfigError`` saying what is wrong with the file
    otherwise (missing, not a file, unreadable, not UTF-8, not JSON, nested too deep)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError([("", f"config file not found: {path}")]) from None
    except OSError as err:
        raise ConfigError([("", f"cannot read the config file {path}: {err.strerror or err}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError([("", f"{path}: not UTF-8 text: byte 0x{data[err.start]:02x} at byte offset {err.start}")]) \
            from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError([("", f"{path}: not valid JSON: {err.msg} at line {err.lineno} column {err.colno}")]) from None
    except RecursionError:
        raise ConfigError([("", f"{path}: JSON nested too deeply (more than about {sys.getrecursionlimit()} "
                                "levels of arrays or objects)")]) from None


def set_problems(config: dict, sets) -> list[tuple[str, str]]:
    """Apply every ``PATH=VALUE`` that can be applied; the problems of the others."""
    found = []
    for item in sets:
        if "=" not in item:
            found.append(("--set", f"expected PATH=VALUE, got {item!r}"))
            continue
        key, text = item.split("=", 1)
        try:
            set_path(config, key.strip(), parse_value(text))
        except ConfigError as err:
            found.extend(err.problems)
    return found


def problems(config: dict) -> list[tuple[str, str]]:
    """Every problem in a config, as (JSON path, message); no data is read, nothing is opened."""
    found = check_options(SCHEMA, config, what="the job config")
    if isinstance(config.get("layers"), list) and not config["layers"]:
        found.append(("layers", "required: a non-empty list of layers"))
    if not found:                       # across sections, once each section is sound
        found += label_problems(config) + footprint.problems(config)
        found += automl_space.problems(config, layer_problems)
    return found


def label_problems(config: dict) -> list[tuple[str, str]]:
    """A ``logloss`` loss needs labels in {0, 1}, a ``softmax_ce`` class indices (0..K−1 when
    its input names K): a reader's ``labels`` (inline or under ``options``; the format's default
    is [0, 1]) that lets other values through is an error (a label that is not a class would
    stop the job in the loss)."""
    path, labels, _ = reader_labels(config.get("reader") or {})
    got = "null (any number)" if labels is None else json.dumps(labels)
    logloss, soft = loss_layer(config["layers"], "logloss"), loss_layer(config["layers"], "softmax_ce")
    if logloss is not None and not (isinstance(labels, list) and set(labels) <= {0, 1}) and \
            not (config.get("task") == "auto" and labels is None):     # (rows neither 0 nor 1 dropped: task.py)
        return [(path, f"loss '{logloss.get('name')}' is a logloss, which needs labels 0 and 1, but the reader "
                       f"accepts {got}: give [0, 1] (with label_map for other values, e.g. {{\"-1\": 0}})")]
    decided = {"click": "logloss", "regression": "mse"}.get(config.get("task"))
    if decided is not None and loss_layer(config["layers"], decided) is None:
        return [("task", f"{config['task']!r} is what task auto decides for a job whose loss is {decided}, and this "
                         f"job's is not: set \"auto\" (the first batch decides) or null (the loss as written)")]
    width, source = _width_from(config["layers"], soft)
    if width == 1:                  # (a click model's logit under a softmax: the loss stopped the job at its first batch)
        return [(f"layers.{soft.get('name')}", f"loss '{soft.get('name')}' is a softmax_ce over K >= 2 logits per "
                 f"example, but its input '{soft['inputs'][0]}' gives 1 (the dim of '{source}'): give the layers that "
                 f"make the logits dim K (examples/multiclass.json sets wide, linear and bias to K)")]
    k = _classes(config["layers"], soft)
    classes = range(k) if k is not None else None
    if soft is not None and not (isinstance(labels, list) and all(
            float(v).is_integer() and v >= 0 and (classes is None or v in classes) for v in labels)):
        which = f"0..{k - 1}" if k is not None else "0..K-1"
        return [(path, f"loss '{soft.get('name')}' is a softmax_ce, whose labels are the class indices {which}, "
                       f"but the reader accepts {got}: give the classes (e.g. {json.dumps(list(classes or [0, 1, 2]))}; "
                       f"a label that is not one would stop the job)")]
    return []


def validate(config: dict, *, source: str | None = None) -> dict:
    found = problems(config)
    if found:
        raise ConfigError(found, source=source)
    return config


if __name__ == "__main__":
    for heading, table in tables().items():
        print(f"{heading}:\n\n{table}\n")
