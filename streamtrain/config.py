"""The job config: one JSON document, ``--set`` overrides by dotted path, every problem listed.

Top-level keys: ``reader``, ``batch_size``, ``store``, ``default_optimizer``, ``layers``,
``metrics``, ``checkpoint``, ``log``, ``seed``, ``drift``, ``serve``. In a dotted path, a list item is addressed by
its ``name`` (``layers.emb.dim``) or its index (``layers.1.dim``).
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

from .errors import ConfigError

DEFAULTS = {
    "reader": {"type": "synthetic"},
    "batch_size": 256,
    "store": {"backend": "memory"},
    "default_optimizer": {"type": "adagrad", "lr": 0.05},
    "metrics": {"enabled": True, "host": "127.0.0.1", "port": 9464, "window": 100000},
    "checkpoint": {"dir": None, "every_seconds": 600, "every_batches": 0, "keep": 3},
    "log": {"every_seconds": 10.0, "format": "text", "level": "INFO"},
    "seed": 0,
    "drift": {},
    "serve": {},
}
TOP_LEVEL = {*DEFAULTS, "layers", "name", "description"}


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


def set_path(config: dict, dotted: str, value) -> None:
    """Set ``value`` at ``dotted``; list items by ``name`` or index; missing dicts are created."""
    keys = dotted.split(".")
    node = config
    walked = []
    for i, key in enumerate(keys):
        last = i == len(keys) - 1
        where = ".".join(walked) or "(top)"
        if isinstance(node, list):
            idx = next((j for j, item in enumerate(node) if isinstance(item, dict) and item.get("name") == key), None)
            if idx is None and key.isdigit() and int(key) < len(node):
                idx = int(key)
            if idx is None:
                names = [item.get("name") for item in node if isinstance(item, dict)]
                raise ConfigError([(dotted, f"no item named '{key}' in {where} (names: {', '.join(map(str, names))})")])
            if last:
                node[idx] = value
                return
            node = node[idx]
        elif isinstance(node, dict):
            if last:
                node[key] = value
                return
            if key not in node or node[key] is None:
                node[key] = {}
            node = node[key]
        else:
            raise ConfigError([(dotted, f"{where} is a {type(node).__name__}, cannot set '{key}' inside it")])
        walked.append(key)


def load(path, sets=()) -> dict:
    """Read a config file, apply defaults, then the ``PATH=VALUE`` overrides in order."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError([("", f"config file not found: {path}")]) from None
    except json.JSONDecodeError as err:
        raise ConfigError([("", f"{path}: not valid JSON: {err.msg} at line {err.lineno} column {err.colno}")]) from None
    if not isinstance(raw, dict):
        raise ConfigError([("", f"{path}: expected a JSON object at the top, got {type(raw).__name__}")])
    config = merge(DEFAULTS, raw)
    apply_sets(config, sets)
    return config


def apply_sets(config: dict, sets) -> None:
    problems = []
    for item in sets:
        if "=" not in item:
            problems.append(("--set", f"expected PATH=VALUE, got {item!r}"))
            continue
        key, text = item.split("=", 1)
        try:
            set_path(config, key.strip(), parse_value(text))
        except ConfigError as err:
            problems.extend(err.problems)
    if problems:
        raise ConfigError(problems)


def problems(config: dict) -> list[tuple[str, str]]:
    """Every problem in a config, as (JSON path, message); no data is read, nothing is opened."""
    from streamtrain.drift import drift_problems
    from streamtrain.graph import layers_from_config, topology_problems
    from streamtrain.serve.settings import serve_problems
    from streamtrain.optim import make_optimizer
    from streamtrain.readers import validate_reader_config
    from streamtrain.store import validate_store_config

    found = []
    for key in config:
        if key not in TOP_LEVEL:
            found.append((key, f"unknown top-level key (known: {', '.join(sorted(TOP_LEVEL))})"))
    bs = config.get("batch_size")
    if isinstance(bs, bool) or not isinstance(bs, int) or bs < 1:
        found.append(("batch_size", f"expected a positive integer, got {bs!r}"))
    for path, msg in _catch(lambda: make_optimizer(config.get("default_optimizer"), where="default_optimizer")):
        found.append((path, msg))
    found += [(f"reader.{p}" if p else "reader", m) for p, m in validate_reader_config(config.get("reader"))]
    found += [(f"store.{p}" if p else "store", m) for p, m in validate_store_config(config.get("store"))]
    found += _section_problems(config)
    found += [(f"drift.{p}" if p else "drift", m) for p, m in drift_problems(config.get("drift"))]
    found += [(f"serve.{p}" if p else "serve", m) for p, m in serve_problems(config.get("serve"))]
    layers = config.get("layers")
    if not isinstance(layers, list) or not layers:
        found.append(("layers", "required: a non-empty list of layers"))
    else:
        built = _catch(lambda: layers_from_config(layers))
        found += built
        if not built:
            objs = layers_from_config(layers)
            found += topology_problems(objs)
            for i, (cfg, layer) in enumerate(zip(layers, objs)):
                if layer.optimizer is not None:
                    found += _catch(lambda: make_optimizer(layer.optimizer, where=f"layers[{i}].optimizer"))
    return found


def _section_problems(config: dict) -> list:
    found = []
    m = config.get("metrics", {})
    if not isinstance(m, dict):
        return [("metrics", "expected an object")]
    port = m.get("port")
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port < 65536:
        found.append(("metrics.port", f"expected a port number 0..65535 (0 = any free port), got {port!r}"))
    c = config.get("checkpoint", {})
    if not isinstance(c, dict):
        return found + [("checkpoint", "expected an object")]
    if c.get("dir") is not None and not isinstance(c.get("dir"), str):
        found.append(("checkpoint.dir", f"expected a directory path or null, got {c.get('dir')!r}"))
    for key in ("every_seconds", "every_batches", "keep"):
        v = c.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0):
            found.append((f"checkpoint.{key}", f"expected a number >= 0, got {v!r}"))
    return found


def _catch(fn) -> list:
    try:
        fn()
    except ConfigError as err:
        return err.problems
    return []


def validate(config: dict, *, source: str | None = None) -> dict:
    found = problems(config)
    if found:
        raise ConfigError(found, source=source)
    return config
