"""The least memory a job's model needs, worked out from its config alone (``validate``).

A model file names no data columns, so the model is built here over the fewest fields a
stream can have (one categorical, one numeric): every figure is a lower bound, and a config
it refuses could not run on any data. It counts, in float32,

* the dense parameters (an ``fc`` of ``dim`` 10**9 is a matrix of 10**9 columns),
* per batch, the rows each table pulls (``batch_size`` rows of ``dim`` floats at the least)
  and every layer's output and its gradient (``batch_size`` × the layer's output size),

and compares the sum with this machine's memory (the physical memory, or the cgroup's limit
when it is lower): a config that needs more is a config error naming the largest parts.

>>> found = {("fc1", "fc1.W: dense parameter [4, 1000000000]"): 16e9, ("emb", "emb.table: rows"): 1e3}
>>> describe(found, 8 << 30, top=1)
'the model needs at least 14.9 GiB, more than the 8.0 GiB of memory here (fc1.W: dense parameter [4, 1000000000] 14.9 GiB)'
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from .errors import ConfigError, ShapeError
from .graph import Graph, Schema

FLOAT = 4
NOMINAL = Schema(sparse=("f0",), dense=("d0",))     # the fewest fields a stream can have
GIB = 1 << 30


def build(layers: list) -> Graph | None:
    """The model over ``NOMINAL``'s fields (None: it does not build; other checks say why)."""
    try:
        return Graph.from_config(layers, NOMINAL)
    except (ConfigError, ShapeError, ValueError, KeyError, TypeError):
        return None


def parts(graph: Graph, batch_size: int) -> dict[tuple[str, str], float]:
    """{(layer, what): bytes} of ``graph`` at ``batch_size``."""
    out = {}
    for name, spec in graph.params.items():
        size, owner = math.prod(spec.shape), graph._param_owner[name]
        if spec.table:
            out[(owner, f"{name}: {batch_size} rows of {size} floats a batch")] = FLOAT * size * batch_size
        else:
            out[(owner, f"{name}: dense parameter {list(spec.shape)}")] = FLOAT * size
    for layer in graph.order:
        shape = layer.output_shape
        if isinstance(shape, tuple) and all(isinstance(d, int) for d in shape):
            # its output and the gradient that comes back into it
            out[(layer.name, f"layer '{layer.name}': output [{batch_size}, {', '.join(map(str, shape))}] "
                             "and its gradient")] = 2 * FLOAT * batch_size * math.prod(shape)
    return out


def blame(graph: Graph, name: str) -> str:
    """The layer whose options made ``name``'s output large: itself if it has parameters, else
    (a concat, a pooling) its largest input's, and so on back."""
    def size(n):
        shape = graph.layers[n].output_shape
        return math.prod(shape) if isinstance(shape, tuple) else 0
    layer = graph.layers[name]
    while not layer.params and layer.inputs:
        layer = graph.layers[max(layer.inputs, key=size)]
    return layer.name


def memory_bytes() -> int | None:
    """This machine's memory for one process: physical memory, or the cgroup's limit if lower."""
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        total = None
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text)) if total else int(text)
        break
    return total


def describe(found: dict, memory: int, top: int = 2) -> str:
    need = sum(found.values())
    largest = sorted(found.items(), key=lambda kv: -kv[1])[:top]
    return (f"the model needs at least {need / GIB:.1f} GiB, more than the {memory / GIB:.1f} GiB of memory "
            f"here ({'; '.join(f'{what} {size / GIB:.1f} GiB' for (_, what), size in largest)})")


def problems(config: dict) -> list[tuple[str, str]]:
    """A problem when the model cannot fit in this machine's memory: at ``batch_size`` when it
    would fit with batches of one example, else at the layer of the largest part."""
    layers, batch_size = config.get("layers"), config.get("batch_size")
    if not isinstance(layers, list) or not layers or not isinstance(batch_size, int) or batch_size <= 0:
        return []
    memory, graph = memory_bytes(), build(layers)
    if not memory or graph is None:
        return []
    found = parts(graph, batch_size)
    if sum(found.values()) <= memory:
        return []
    if sum(parts(graph, 1).values()) <= memory:
        return [("batch_size", f"{batch_size} is too large: " + describe(found, memory))]
    owner = blame(graph, max(found, key=found.get)[0])
    index = next(i for i, c in enumerate(layers) if isinstance(c, dict) and c.get("name") == owner)
    return [(f"layers[{index}]", describe(found, memory))]
