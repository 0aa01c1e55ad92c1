"""The search space of an AutoML job: the ``automl`` section's ``space`` list.

A dimension is either

* a **choice**: ``{"name", "paths": [dotted config paths], "values": [...], "start"?}``: every
  path is set to the same value (a layer group's learning rate, an embedding ``dim``, a
  ``dropout`` rate, the deep part's ``batch_size``); values are ordered, and a neighbour moves
  one step along them (ChaCha's neighbourhood of a numeric setting);
* a set of **crosses**: ``{"name", "cross": "<feature_cross layer>", "max_pairs"}``: which
  pairs of categorical fields that layer crosses (Vowpal Wabbit's ``-q``); it starts with what
  the layer itself would cross (its ``pairs``, else every pair when the stream has at most its
  ``max_fields`` fields, else none) and a neighbour adds one pair or drops one, as ChaCha grows
  interactions from the champion;
* a set of **terms**: ``{"name", "path", "always": [...], "optional": [...], "start"?}``: the
  list at ``path`` (an ``add`` layer's ``inputs``) is ``always`` plus the chosen ``optional``
  members; a neighbour adds or drops one member (from LR: + FM, or + a deep part).

A choice may name the layer it ``needs``: it is written only when that layer is in the model
(reached from the loss), as a deep part's ``batch_size``. A dimension that does not change the
model (its ``needs`` or every layer its paths name is not reached) is not moved: proposing it
would give a copy of the champion.

An *assignment* is ``{dimension name: value}`` (a cross dimension's value is a sorted list of
``[field, field]`` pairs); ``apply`` writes it into a copy of the job config with ``--set``'s
dotted paths (``layers.wide.optimizer.alpha``: a list item by its ``name``).
"""
from __future__ import annotations

import copy
import json
from itertools import combinations

import numpy as np

from streamtrain.errors import ConfigError
from streamtrain.paths import set_path
from streamtrain.automl.pairrank import in_rank, wide_cross
from streamtrain.schema import NUMBER, REQUIRED, Option, check_options, join, non_negative, positive, probability


def _space_problems(value) -> list[tuple[str, str]]:
    if not isinstance(value, list) or not value:
        return [("", f"expected a non-empty list of dimensions, got {value!r}")]
    found, names = [], set()
    for i, dim in enumerate(value):
        where = f"[{i}]"
        if not isinstance(dim, dict):
            found.append((where, f"expected an object, got {type(dim).__name__}"))
            continue
        schema = CROSS if "cross" in dim else TERMS if "optional" in dim else CHOICE
        found += [(join(where, k), m) for k, m in check_options(schema, dim, what="an automl dimension")]
        if dim.get("name") in names:
            found.append((join(where, "name"), f"dimension name {dim['name']!r} used twice"))
        names.add(dim.get("name"))
        values = dim.get("values")
        if "cross" not in dim and isinstance(values, list) and "start" in dim and dim["start"] not in values:
            found.append((join(where, "start"), f"{dim['start']!r} is not one of values {values!r}"))
        optional = dim.get("optional")
        if isinstance(optional, list) and all(isinstance(dim.get(p, []), list) for p in ("start", "later", "shadow")):
            for part in ("start", "later", "shadow"):
                extra = [m for m in dim.get(part, []) if m not in optional]
                if extra:
                    found.append((join(where, part), f"{extra!r} are not among optional {optional!r}"))
    return found


def _values(value) -> str | None:
    if not isinstance(value, list) or not value:
        return f"expected a non-empty list of values, got {value!r}"
    if len({json.dumps(v, sort_keys=True) for v in value}) != len(value):
        return f"values repeat: {value!r}"
    return None


def _paths(value) -> str | None:
    ok = isinstance(value, list) and value and all(isinstance(p, str) and p for p in value)
    return None if ok else f"expected a non-empty list of dotted config paths, got {value!r}"


CHOICE = {
    "name": Option(None, (str,), doc="the dimension's name (in logs, /v1/model and checkpoints)"),
    "paths": Option(REQUIRED, (list,), check=_paths, doc="config paths set to the value (a layer group)"),
    "values": Option(REQUIRED, (list,), check=_values, doc="the ordered values to try"),
    "start": Option(None, doc="the first champion's value (default: the middle one)"),
    "needs": Option(None, (str,), doc="a layer: the paths are written only when the model reaches it"),
}
def _names(value) -> str | None:
    ok = isinstance(value, list) and all(isinstance(v, str) and v for v in value) and len(set(value)) == len(value)
    return None if ok else f"expected a list of distinct layer names, got {value!r}"


TERMS = {
    "name": Option(None, (str,), doc="the dimension's name"),
    "path": Option(REQUIRED, (str,), doc="the config path of the list of terms (an add layer's inputs)"),
    "always": Option([], (list,), check=_names, doc="the terms every candidate has"),
    "optional": Option(REQUIRED, (list,), check=lambda v: _names(v) or (None if v else "expected a non-empty list"),
                       doc="the terms a neighbour adds or drops, one at a time"),
    "start": Option([], (list,), check=_names, doc="the optional terms of the first champion"),
    "later": Option([], (list,), check=_names,
                    doc="optional terms whose turn comes only once each other optional term is decided "
                        "from the champion (it has it, or that neighbour was tried and is no longer live)"),
    "shadow": Option([], (list,), check=_names,
                     doc="optional terms added to the champion in the first slot freed (the shadow, one of "
                         "live; it learns the replay buffer first), held for a lease while it leads"),
}
CROSS = {
    "name": Option(None, (str,), doc="the dimension's name"),
    "cross": Option(REQUIRED, (str,), doc="a feature_cross layer whose pairs are searched"),
    "max_pairs": Option(32, (int,), check=positive, doc="pairs crossed at most"),
}
AUTOML = {
    "live": Option(4, (int,), check=positive, doc="candidates trained side by side (the champion and its challengers)"),
    "grace": Option(2000, (int,), check=positive,
                    doc="examples a challenger and the champion share before any decision about it"),
    "confidence": Option(0.05, NUMBER, check=lambda v: None if 0 < v < 1 else f"must be in (0, 1), got {v!r}",
                         doc="error probability of each promotion or retirement (the bound's delta)"),
    "margin": Option(0.002, NUMBER, check=non_negative,
                     doc="a challenger of the champion's model confidently not better than it by this fraction "
                         "of its mean loss is retired (0: never)"),
    "patience": Option(200_000, (int,), check=positive,
                       doc="examples after which a challenger not better on average is retired"),
    "replay": Option(16384, (int,), check=non_negative,
                     doc="recent examples a cold newborn (a term the champion lacks) learns before it joins"),
    "explore": Option(0.25, NUMBER, check=probability,
                      doc="chance that a proposal moves two dimensions instead of one"),
    "seed": Option(0, (int,), check=non_negative, doc="the proposals' random seed"),
    "rank": Option(16384, (int,), check=non_negative,
                   doc="examples per window over which the champion's residuals rank the pairs a cross "
                       "neighbour adds, best first, on a stream of more fields than its layer's max_fields "
                       "(pairrank.py; 0: pairs at random)"),
    "span": Option(False, (bool,), doc="the first challengers are the start with each optional term of a set "
                                        "added (but later ones), live from the first example; then neighbours"),
    "serve": Option("leader", (str,), choices=("leader", "champion"),
                    doc="what answers: the candidate of the lowest progressive loss now (leader) or the champion"),
    "space": Option(None, (list,), nested=_space_problems, doc="the dimensions searched (see the AutoML page)"),
}


def section_problems(value) -> list[tuple[str, str]]:
    """Problems of the ``automl`` section alone (null: no AutoML)."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [("", f"expected an object or null, got {type(value).__name__}")]
    found = check_options(AUTOML, value, what="the automl section")
    if "space" not in value:
        found.append(("space", "required: a list of dimensions"))
    return found


def problems(config: dict, layer_problems) -> list[tuple[str, str]]:
    """Problems of the ``automl`` section against the job's layers (paths that do not resolve,
    values a layer refuses, a cross dimension naming no ``feature_cross`` layer)."""
    section = config.get("automl")
    if section is None:
        return []
    space = Space(section)
    found = []
    if config.get("graph") is not None:
        found.append(("automl", "an AutoML job cannot learn on a graph (a `graph` section): remove one of them"))
    if (config.get("store") or {}).get("mode") == "sync":
        found.append(("automl", "an AutoML job needs store.mode async (each candidate would join the sync "
                                "barrier, and trainers may hold different candidates for a batch)"))
    names = {c.get("name") for c in config["layers"] if isinstance(c, dict)}
    for i, dim in enumerate(space.dims):
        where = f"automl.space[{i}]"
        if dim.cross is not None:
            layer = next((c for c in config["layers"] if isinstance(c, dict) and c.get("name") == dim.cross), None)
            if layer is None or layer.get("type") != "feature_cross":
                found.append((f"{where}.cross", f"no feature_cross layer named {dim.cross!r} in layers"))
            continue
        if dim.needs is not None and dim.needs not in names:
            found.append((f"{where}.needs", f"no layer named {dim.needs!r} in layers"))
        found += _value_problems(config, dim, where, layer_problems)
    return found


def _value_problems(config: dict, dim: "Dim", where: str, layer_problems) -> list[tuple[str, str]]:
    """The first value of ``dim`` a layer (or the batch size) refuses."""
    samples = dim.values if dim.optional is None else (
        [dim.start, list(dim.optional)] + [[m] for m in dim.optional])
    label = "values" if dim.optional is None else "optional"
    for j, v in enumerate(samples):
        try:
            trial = dim.write(copy.deepcopy(config), v)
        except ConfigError as err:
            return [(f"{where}.{'paths' if dim.optional is None else 'path'}", msg) for _, msg in err.problems]
        bad = [(f"layers{p}", m) for p, m in layer_problems(trial["layers"])]
        size = trial.get("batch_size")
        if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= config["batch_size"]:
            bad.append(("batch_size", f"must be an integer in 1..{config['batch_size']} (the job's "
                                      f"batch_size: candidates split the shared batch), got {size!r}"))
        if bad:
            at = f"{where}.{label}[{j}]" if dim.optional is None else f"{where}.{label}"
            return [(at, f"{v!r} gives {path}: {msg}") for path, msg in bad]
    return []


def reachable(layers: list[dict]) -> list[dict]:
    """The layers the loss depends on (a space may leave a term out of the sum: its layers go)."""
    from streamtrain.ops import LAYERS
    by_name = {c["name"]: c for c in layers}
    losses = [c for c in layers if LAYERS[c["type"]].is_loss]
    keep, todo = set(), [c["name"] for c in losses]
    while todo:
        name = todo.pop()
        if name in keep or name not in by_name:
            continue
        keep.add(name)
        inputs = by_name[name].get("inputs", [])
        todo += [inputs] if isinstance(inputs, str) else list(inputs)
    return [c for c in layers if c["name"] in keep] if losses else layers


class Dim:
    """One dimension of the space."""

    def __init__(self, cfg: dict):
        self.name = cfg["name"]
        self.cross = cfg.get("cross")
        self.optional = cfg.get("optional")            # a set of terms (else None)
        self.always, self.path = cfg.get("always") or [], cfg.get("path")
        self.paths = cfg.get("paths") or []
        self.values = cfg.get("values") or []
        self.max_pairs = cfg.get("max_pairs", 32)
        self.needs = cfg.get("needs")
        self.later = cfg.get("later") or []
        self.shadow = cfg.get("shadow") or []          # the shadow's terms (``Search._shadow``)
        if self.optional is not None:
            self.start = [m for m in self.optional if m in (cfg.get("start") or [])]
        else:
            self.start = cfg.get("start", self.values[len(self.values) // 2] if self.values else None)
        # the layers this dimension changes (a choice of ``layers.<name>...`` paths), else None
        named = [p.split(".")[1] for p in self.paths if p.startswith("layers.") and p.count(".") >= 2]
        self.layers = set(named) if self.paths and len(named) == len(self.paths) else None

    def first(self, config: dict, fields: list[str]):
        if self.cross is None:
            return copy.deepcopy(self.start)
        layer = next(c for c in config["layers"] if c.get("name") == self.cross)
        if layer.get("pairs") is not None:
            pairs = [tuple(p) for p in layer["pairs"]]
        elif len(fields) <= layer.get("max_fields", 8):
            pairs = list(combinations(sorted(fields), 2))
        else:
            pairs = []
        return [list(p) for p in sorted(tuple(sorted(p)) for p in pairs)]

    def write(self, config: dict, value) -> dict:
        if self.cross is not None:
            set_path(config, f"layers.{self.cross}.pairs", [list(p) for p in value])
        elif self.optional is not None:
            set_path(config, self.path, list(self.always) + [m for m in self.optional if m in value])
        else:
            for path in self.paths:
                set_path(config, path, copy.deepcopy(value))
        return config

    def neighbours(self, value, fields: list[str]) -> list:
        """Every value one step from ``value``."""
        if self.optional is not None:
            have = set(value)
            return [[m for m in self.optional if (m in have) != (m == t)] for t in self.optional]
        if self.cross is None:
            i = self.values.index(value) if value in self.values else len(self.values) // 2
            return [self.values[j] for j in (i - 1, i + 1) if 0 <= j < len(self.values)]
        have = {tuple(p) for p in value}
        # none (every pair at once: first in the crosses' turn), each pair dropped, each added; fixed order
        out = [[]] * (len(have) > 1) + [sorted(have - {p}) for p in sorted(have)]
        if len(have) < self.max_pairs:
            out += [sorted(have | {p}) for p in combinations(sorted(fields), 2) if p not in have]
        return [[list(p) for p in pairs] for pairs in out]


class Space:
    """The dimensions, the first assignment and the neighbourhood of an assignment. With the
    job ``config``, a proposal moves only dimensions that change the model (``active``)."""

    def __init__(self, section: dict, config: dict | None = None):
        self.dims = [Dim({"name": d.get("name") or f"d{i}", **d}) for i, d in enumerate(section["space"])]
        self.explore = float(section.get("explore", 0.25))
        self.config = config
        self._structures: dict = {}

    def start(self, config: dict, fields: list[str]) -> dict:
        return {d.name: d.first(config, fields) for d in self.dims}

    def apply(self, config: dict, assign: dict) -> dict:
        """A copy of the job config with the assignment written in (``automl`` removed); a
        dimension that ``needs`` a layer the loss does not reach is left out."""
        out = copy.deepcopy(config)
        out.pop("automl", None)
        for dim in self.dims:
            if dim.needs is None:
                dim.write(out, assign[dim.name])
        live = {c["name"] for c in reachable(out["layers"])}
        for dim in self.dims:
            if dim.needs is not None and dim.needs in live:
                dim.write(out, assign[dim.name])
        return out

    def active(self, assign: dict) -> list[int]:
        """The dimensions whose move changes the model of ``assign`` (all without a config)."""
        if self.config is None:
            return list(range(len(self.dims)))
        live = {c["name"] for c in reachable(self.apply(self.config, assign)["layers"])}
        return [i for i, d in enumerate(self.dims)
                if (d.needs is None or d.needs in live) and (d.layers is None or d.layers & live)]

    def structure(self, assign: dict) -> dict:
        """The layers of the model of ``assign`` (those the loss reaches) and their ``dim``s."""
        k = key(assign)
        if k not in self._structures:
            self._structures[k] = {c["name"]: c.get("dim") for c in reachable(self.apply(self.config, assign)["layers"])}
            if len(self._structures) > 1000:            # bounded: the oldest goes
                del self._structures[next(iter(self._structures))]
        return self._structures[k]

    def cold(self, assign: dict, parent: dict) -> bool:
        """Whether a candidate of ``assign`` born from ``parent`` has a layer the parent lacks
        or one of another ``dim``: it cannot inherit the parent's parameters and starts cold."""
        if self.config is None:
            return False
        mine, theirs = self.structure(assign), self.structure(parent)
        return any(name not in theirs or theirs[name] != dim for name, dim in mine.items())

    def same_model(self, a: dict, b: dict) -> bool:
        """Whether two assignments give models of the same layers (they differ only in settings:
        rates, crosses, batch size), so that one starts where the other is on its learning curve."""
        return self.config is None or self.structure(a) == self.structure(b)

    def units(self) -> list[tuple[int, str | None]]:
        """What takes turns: every dimension, and every optional member of a set of terms."""
        return [(d, m) for d, dim in enumerate(self.dims) for m in (dim.optional or [None])]

    def _decided(self, dim: Dim, assign: dict, avoid, live) -> bool:
        """Every optional term of ``dim`` but its ``later`` ones is decided from ``assign``: the
        champion has it, or the champion with it added was tried and is no longer live."""
        have = assign[dim.name]
        for m in dim.optional:
            if m in dim.later or m in have:
                continue
            k = key(dict(assign, **{dim.name: [t for t in dim.optional if t in have or t == m]}))
            if k not in avoid or k in live:
                return False
        return True

    def propose(self, assign: dict, fields: list[str], rng: np.random.Generator, avoid,
                turn: int = 0, live=frozenset(), ranked=()) -> tuple[dict | None, int]:
        """A neighbour of ``assign`` not in ``avoid`` (keys), and the next turn. Dimensions take
        turns (``turn``: whose it is; each optional term of a set has a turn of its own), so every
        one of them is tried from each champion; the dimension whose turn it is moves one step
        (and, with chance ``explore``, another one at random too). Dimensions that would not
        change the model are passed over, and so is a ``later`` term of a set until the set's other
        terms are decided (``_decided``; ``live``: the live candidates' keys, also in ``avoid``).
        None when every dimension's neighbours were tried. ``ranked``: pairs of fields, best
        first (``pairrank.py``): a cross dimension of a wide stream (``wide_cross``) adds them in
        that order before any other neighbour."""
        units = self.units()
        n = len(units)
        active = set(self.active(assign))
        for k in range(n):
            u = (turn + k) % n
            d, member = units[u]
            dim = self.dims[d]
            if d not in active:
                continue
            if member in dim.later and not self._decided(dim, assign, avoid, live):
                continue
            if member is None:
                options = dim.neighbours(assign[dim.name], fields)
            else:
                options = [v for v in dim.neighbours(assign[dim.name], fields) if (member in v) != (member in assign[dim.name])]
            wide = ranked and member is None and wide_cross(self.config, dim, fields)
            if wide:
                options, order = in_rank(dim, assign[dim.name], options, ranked, rng)
            else:       # a cross's "none" (``Dim.neighbours``) first, the rest at random
                first = int(member is None and dim.cross is not None and options[:1] == [[]])
                order = [0] * first + [first + i for i in rng.permutation(len(options) - first)]
            for i in order:
                out = dict(assign)
                out[dim.name] = options[int(i)]
                others = [j for j in self.active(out) if j != d] if len(self.dims) > 1 else []
                if others and rng.random() < self.explore:
                    other = self.dims[int(rng.choice(others))]
                    more = other.neighbours(out[other.name], fields)
                    if other.later and not self._decided(other, assign, avoid, live):
                        more = [v for v in more if not (set(v) ^ set(out[other.name])) & set(other.later)]
                    if more:
                        moved = dict(out, **{other.name: more[int(rng.integers(len(more)))]})
                        if key(moved) not in avoid:
                            return moved, u + 1
                if key(out) not in avoid:
                    return out, u + 1
        return None, turn


def key(assign: dict) -> str:
    """A stable text key of an assignment."""
    return json.dumps(assign, sort_keys=True, separators=(",", ":"))
