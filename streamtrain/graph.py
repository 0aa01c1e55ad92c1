"""The layer graph (Angel's AngelGraph): topology, parameters, and the phases of one step.

Topological order is computed once. ``forward`` asks each layer for its output through the
state machine, so a layer consumed by several layers computes once per batch; ``backward``
walks the order in reverse and hands every layer the *sum* of its consumers' gradients.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamtrain.ops import LAYERS, load_all
from streamtrain.ops.base import Layer

from .batch import Feed, once_per_batch
from .context import Context, Gradients
from .errors import ConfigError, ShapeError
from .numeric_only import left_out, pruned
from .params import ParamSpec
from .state import Status, advance
from .uniq import unique_inverse

_FORWARD, _BACKWARD, _GRADIENT = Status.FORWARD, Status.BACKWARD, Status.GRADIENT


@dataclass(frozen=True)
class Schema:
    """The fields a reader reports: categorical (sparse) and numeric (dense) names."""

    sparse: tuple = ()
    dense: tuple = ()

    @classmethod
    def of(cls, batch) -> "Schema":
        return cls(tuple(batch.sparse), tuple(batch.dense_names))


def layers_from_config(configs: list) -> list[Layer]:
    """Instantiate layers from JSON dicts, collecting every problem with its JSON path."""
    load_all()
    layers, problems = [], []
    for i, cfg in enumerate(configs):
        where = f"layers[{i}]"
        if not isinstance(cfg, dict):
            problems.append((where, f"expected an object, got {type(cfg).__name__}"))
            continue
        name, kind = cfg.get("name"), cfg.get("type")
        if not isinstance(name, str) or not name:
            problems.append((f"{where}.name", "required: a non-empty string"))
        if kind not in LAYERS:
            known = ", ".join(sorted(LAYERS))
            problems.append((f"{where}.type", f"unknown layer type {kind!r} (known: {known})"))
            continue
        cls = LAYERS[kind]
        opts = {k: v for k, v in cfg.items() if k not in ("name", "type", "inputs", "param", "optimizer")}
        for key, msg in cls.option_problems(opts):
            problems.append((f"{where}.{key}", msg))
        inputs = cfg.get("inputs", [])
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(x, str) for x in inputs):
            problems.append((f"{where}.inputs", "expected a list of layer names"))
        if "optimizer" in cfg and not isinstance(cfg["optimizer"], dict):
            problems.append((f"{where}.optimizer", "expected an object like {\"type\": \"adam\"}"))
        if "param" in cfg and not isinstance(cfg["param"], str):
            problems.append((f"{where}.param", "expected a parameter name (string)"))
        if not problems:
            layers.append(cls.from_config(cfg))
    if problems:
        raise ConfigError(problems)
    return layers


def topology_problems(layers: list[Layer]) -> list[tuple[str, str]]:
    """Names, inputs, arity, cycles and the single loss layer, checked without data."""
    problems = []
    index = {}
    for i, layer in enumerate(layers):
        if layer.name in index:
            problems.append((f"layers[{i}].name", f"duplicate layer name '{layer.name}' (also layers[{index[layer.name]}])"))
        index.setdefault(layer.name, i)
    known = ", ".join(index)
    for i, layer in enumerate(layers):
        lo, hi = layer.arity
        n = len(layer.inputs)
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"{lo}..{hi if hi is not None else 'any'}"
            problems.append((f"layers[{i}].inputs", f"layer type '{layer.kind}' takes {want} inputs, got {n}"))
        for j, src in enumerate(layer.inputs):
            if src not in index:
                problems.append((f"layers[{i}].inputs[{j}]", f"unknown layer '{src}' (known: {known})"))
            elif src == layer.name:
                problems.append((f"layers[{i}].inputs[{j}]", f"layer '{layer.name}' cannot consume itself"))
    losses = [layer.name for layer in layers if layer.is_loss]
    if len(losses) != 1:
        problems.append(("layers", f"need exactly one loss layer, found {len(losses)}"
                                   f"{' (' + ', '.join(losses) + ')' if losses else ''}"))
    if not problems:
        try:
            topological_order(layers)
        except ConfigError as err:
            problems.extend(err.problems)
    return problems


def topological_order(layers: list[Layer]) -> list[Layer]:
    by_name = {layer.name: layer for layer in layers}
    order, state = [], {}

    def visit(layer, path):
        mark = state.get(layer.name)
        if mark == "done":
            return
        if mark == "active":
            cycle = " -> ".join([*path[path.index(layer.name):], layer.name])
            raise ConfigError([("layers", f"cycle: {cycle}")])
        state[layer.name] = "active"
        for src in layer.inputs:
            visit(by_name[src], [*path, layer.name])
        state[layer.name] = "done"
        order.append(layer)

    for layer in layers:
        visit(layer, [])
    return order


class Graph:
    """Topology plus named parameters; the phases of a step act on a ``Context``."""

    def __init__(self, layers: list[Layer], schema: Schema):
        problems = topology_problems(layers)
        if problems:
            raise ConfigError(problems)
        self.schema = schema
        self.left_out: list[str] = []
        self.order = topological_order(layers)
        self.layers = {layer.name: layer for layer in self.order}
        self.consumers = {name: [] for name in self.layers}
        for layer in self.order:
            for src in layer.inputs:
                self.consumers[src].append(layer.name)
        self.loss = next(layer for layer in self.order if layer.is_loss)
        live = self._ancestors(self.loss.name)
        self.train_order = [layer for layer in self.order if layer.name in live]
        self._reverse_order = self.train_order[::-1]
        self._train_names = [layer.name for layer in self.train_order]
        self._orders: dict[str, list] = {}       # target -> what forward computes for it, in order
        self._steps: dict[str, list] = {}        # the same as (layer, name, inputs)
        self.params: dict[str, ParamSpec] = {}
        self._param_owner: dict[str, str] = {}
        self._build()
        self.dense_params = [n for n, s in self.params.items() if not s.table]
        self.table_params = [n for n, s in self.params.items() if s.table]
        self.table_layers = [layer for layer in self.train_order
                             if any(s.table for s in layer.params.values())]
        # whose output needs a gradient: layers with parameters and everything downstream of one
        self.needs_grad = {}
        for layer in self.order:
            self.needs_grad[layer.name] = bool(layer.params) or any(self.needs_grad[s] for s in layer.inputs)

    def _ancestors(self, name: str) -> set:
        seen, todo = set(), [name]
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(self.layers[n].inputs)
        return seen

    @classmethod
    def from_config(cls, layer_configs: list, schema: Schema) -> "Graph":
        """The graph of ``layer_configs`` on ``schema``'s fields; on a stream without
        categorical fields, without the layers that read only them (``numeric_only``; named in
        ``left_out``)."""
        gone = left_out(layer_configs, schema)
        graph = cls(layers_from_config(pruned(layer_configs, gone) if gone else layer_configs), schema)
        graph.left_out = gone
        return graph

    def get_config(self) -> list[dict]:
        return [layer.get_config() for layer in self.order]

    def _build(self) -> None:
        for layer in self.order:
            shapes = [self.layers[src].output_shape for src in layer.inputs]
            try:
                layer.output_shape = layer.build(shapes, self.schema)
            except ShapeError as err:
                raise ConfigError([(f"layers.{layer.name}", str(err))]) from None
            for spec in layer.params.values():
                self._add_param(layer, spec)

    def _add_param(self, layer: Layer, spec: ParamSpec) -> None:
        old = self.params.get(spec.name)
        if old is None:
            self.params[spec.name] = spec
            self._param_owner[spec.name] = layer.name
        elif not old.same_as(spec):
            owner = self._param_owner[spec.name]
            raise ConfigError([(f"layers.{layer.name}.param",
                                f"parameter '{spec.name}' is declared as {_describe(spec)} here but as "
                                f"{_describe(old)} by layer '{owner}'")])

    # ---- one step -----------------------------------------------------------------------
    def context(self, *, training: bool = True, dtype=np.float32, seed: int = 0) -> Context:
        ctx = Context(self.layers, training=training, dtype=dtype, seed=seed)
        ctx.needs_grad = self.needs_grad
        return ctx

    @property
    def prepares_ahead(self) -> bool:
        """Whether ``prepare`` may run away from the step (every table layer's ids come from the
        batch alone)."""
        return all(layer.ids_from_batch for layer in self.table_layers)

    def prepare(self, batch) -> Context:
        """``feed``'s work, which depends on the batch alone when ``prepares_ahead`` (the fields'
        layout, each table's unique ids, each layer's positions among them), done now and kept
        on the batch; the step's ``feed`` then takes it as it is. The file reader's parse thread
        calls it for each batch it parses, so that work leaves the training thread."""
        ctx = Context(self.layers)
        self._feed(ctx, batch)
        batch.prepared.add(self, Feed(ctx.table_ids, ctx.table_pos, ctx.memo))
        return ctx                  # its memo is the batch's: more batch-only work may go there

    def feed(self, ctx: Context, batch) -> None:
        """Every layer back to Null; find the unique rows of every table this batch needs and,
        for each layer, where each of its ids falls among them (or take them from ``prepare``)."""
        fed = batch.prepared.of(self)
        if fed is not None:
            ctx.reset(batch)
            ctx.table_ids, ctx.table_pos = dict(fed.table_ids), dict(fed.table_pos)
            ctx.memo.update(fed.memo)
            return
        self._feed(ctx, batch)

    def _feed(self, ctx: Context, batch) -> None:
        ctx.reset(batch)
        wanted: dict[str, list] = {}
        for layer in self.table_layers:
            for table, ids in layer.table_ids(ctx).items():
                wanted.setdefault(table, []).append((layer.name, ids))
        ctx.table_ids, ctx.table_pos = {}, {}
        done: dict = {}             # tables fed the very same id array share one unique pass (another graph's too)
        for table, parts in wanted.items():
            ids = parts[0][1] if len(parts) == 1 else np.concatenate([p[1] for p in parts])
            ctx.table_ids[table], inverse = once_per_batch(batch, "unique", (ids,), lambda ids=ids: unique_inverse(ids),
                                                           fallback=done)
            start = 0
            for name, part in parts:
                ctx.table_pos[(name, table)] = inverse[start:start + len(part)]
                start += len(part)
        for t in self.table_params:
            ctx.table_ids.setdefault(t, np.zeros(0, np.uint64))

    def needs(self, ctx: Context) -> tuple[list, dict]:
        """What to pull: every dense parameter and, per table, only this batch's unique ids."""
        return self.dense_params, ctx.table_ids

    def forward(self, ctx: Context, upto: str | None = None):
        """Compute (once) every layer ``upto`` depends on; return its output (default: loss)."""
        target = self.loss.name if upto is None else upto
        if target not in self.layers:
            raise KeyError(f"no layer named '{target}' (known: {', '.join(self.layers)})")
        return self._forward(ctx, self.layers[target])

    def _forward(self, ctx: Context, layer: Layer):
        status, outputs = ctx.status, ctx.outputs
        if status[layer.name] >= _FORWARD:
            return outputs[layer.name]
        elide = ctx.engine.skip if ctx.engine is not None and ctx.training else ()
        for todo, name, inputs in self._forward_steps(layer.name):
            if status[name] >= _FORWARD:
                continue
            status[name] = _FORWARD         # ``advance``'s move from NULL, the only state below
            if name in elide:               # the engine's terms: zeros, in a buffer kept across batches
                # (zeroed once: no fresh pages to fault in, nor megabytes of zeros written, per batch)
                outputs[name] = ctx.zeros(("elided", name), (ctx.batch.size, *todo.output_shape))
            else:
                outputs[name] = todo.forward(ctx, [outputs[src] for src in inputs])
        return outputs[layer.name]

    def _forward_steps(self, name: str) -> list[tuple]:
        """``_forward_order(name)`` as (layer, its name, its inputs), made once per target."""
        steps = self._steps.get(name)
        if steps is None:
            steps = self._steps[name] = [(lay, lay.name, tuple(lay.inputs)) for lay in self._forward_order(name)]
        return steps

    def _forward_order(self, name: str) -> list[Layer]:
        """``name`` and the layers it depends on, in the order a depth-first walk of the inputs
        computes them (inputs in their listed order), once each; cached per target. Run in this
        order, skipping what is computed already, it computes what the recursion would, in the
        same order (a computed layer's inputs are computed too)."""
        order = self._orders.get(name)
        if order is None:
            order, seen = [], set()

            def visit(n):
                if n not in seen:
                    seen.add(n)
                    for src in self.layers[n].inputs:
                        visit(src)
                    order.append(self.layers[n])
            visit(name)
            self._orders[name] = order
        return order

    def backward(self, ctx: Context) -> None:
        """Reverse topological walk; each layer gets the sum of its consumers' gradients.
        Layers the loss does not depend on are left alone (they stay Null), and so are the
        layers a per-example engine learns (``ctx.engine.skip``): it computes their gradients."""
        skip = ctx.engine.skip if ctx.engine is not None else ()
        status, grad_out, needs_grad = ctx.status, ctx.grad_out, self.needs_grad
        for layer in self._reverse_order:
            name = layer.name
            if status[name] == _FORWARD:         # ``advance``'s move, inline (it raises for the others)
                status[name] = _BACKWARD
            elif not advance(status, name, "backward"):
                continue
            if not needs_grad[name] or name in skip:
                continue
            if layer.is_loss:
                gy = None
            else:
                gy = grad_out.get(name)
                if gy is None:          # output reaches no loss: nothing flows back
                    continue
            grads = layer.backward(ctx, gy)
            for src, g in zip(layer.inputs, grads):
                if g is not None:
                    ctx.accumulate(grad_out, src, g)

    def gradients(self, ctx: Context) -> Gradients:
        """Collect parameter gradients for the push; every layer moves to Gradient."""
        _move(ctx.status, self._train_names, "gradient", _BACKWARD, _GRADIENT)
        grads = Gradients()
        for name, g in ctx.param_grads.items():
            if self.params[name].table:
                grads.tables[name] = (ctx.table_ids[name], g)
            else:
                grads.dense[name] = g
        for name, sq in ctx.param_squares.items():
            if name in ctx.param_grads:
                grads.squares[name] = sq
        return grads

    def update(self, ctx: Context) -> None:
        """Mark the update applied (the store applied it where the parameters live)."""
        _move(ctx.status, self._train_names, "update", _GRADIENT, Status.UPDATE)


def _move(status: dict, names: list, phase: str, need: Status, leave: Status) -> None:
    """``advance(status, name, phase)`` of each of ``names``, the usual move inline."""
    for name in names:
        if status[name] == need:
            status[name] = leave
        else:
            advance(status, name, phase)


def _describe(spec: ParamSpec) -> str:
    kind = f"table of dim {spec.dim}" if spec.table else f"dense {tuple(spec.shape)}"
    return f"{kind}, init {spec.init}({spec.scale})"
