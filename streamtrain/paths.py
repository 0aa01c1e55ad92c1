"""Dotted paths into a JSON document (``--set``'s, and the AutoML space's): a list item is
addressed by its ``name`` (``layers.emb.dim``) or its index (``layers.1.dim``).

>>> doc = {"layers": [{"name": "emb", "dim": 8}]}
>>> set_path(doc, "layers.emb.dim", 16); doc
{'layers': [{'name': 'emb', 'dim': 16}]}
"""
from __future__ import annotations

from .errors import ConfigError


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
