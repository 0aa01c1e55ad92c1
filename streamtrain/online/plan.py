"""Which layers' parameters the per-example engine learns, decided once per trainer.

A layer qualifies when its output reaches the loss only through ``add`` and ``sum_pooling``
(coefficient 1, one path each), it is the only layer using its parameters, every one of them is
trained by a rule with a per-example kernel (``Optimizer.kernel_rule``; a per-coordinate
``Optimizer.rule`` the core cannot run is refused, naming the layer), and it declares its
terms: a *linear* layer (``linear_width``: a dim-1 embedding, a bias, a dim-1 fc without
activation) or an *FM* (``pairwise_input``: ``fm`` with ``reduce: true``) over a layer that
pools its rows per field (``field_terms``: an embedding) and feeds nothing else. A loss over
``K`` logits (``softmax_ce``) owns linear layers of ``K`` outputs (an embedding of dim ``K``
summed over its fields, a bias or a linear fc of dim ``K``), ``width`` ``K``, and no FM.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from streamtrain.errors import ConfigError

from .terms import KERNEL_RULES


@dataclass
class Plan:
    linear: list = field(default_factory=list)     # linear layers
    fm: list = field(default_factory=list)         # (fm layer, embedding layer) pairs
    skip: set = field(default_factory=set)         # layers whose forward and backward the graph skips
    width: int = 1                                 # the logits per example (the loss's input)

    @property
    def layers(self) -> list:
        """The layers whose parameters are learnt per example."""
        return self.linear + [emb for _, emb in self.fm]

    @property
    def params(self) -> list[str]:
        return [spec.name for layer in self.layers for spec in layer.params.values()]


def plan(graph, optimizers) -> Plan:
    owners: dict[str, set] = {}
    for layer in graph.order:
        for spec in layer.params.values():
            owners.setdefault(spec.name, set()).add(layer.name)

    def learnable(layer) -> bool:
        return all(owners[s.name] == {layer.name} and runnable(layer, s) for s in layer.params.values())

    def runnable(layer, spec) -> bool:
        """The core runs the parameter's rule; a per-coordinate rule it cannot run is refused."""
        opt = optimizers[spec.name]
        if opt.kernel_rule() is not None:
            return True
        if opt.rule is not None:
            where = f"layers.{layer.name}.optimizer" if spec.optimizer else "default_optimizer"
            raise ConfigError([(where, f"layer '{layer.name}': rule '{opt.kind}' has no update in the compiled "
                                       f"per-example core (it runs {', '.join(KERNEL_RULES)}), so the sequential "
                                       f"loss '{graph.loss.name}' cannot learn it example by example: use one of "
                                       f"those, or set the loss's sequential to false")])
        return False

    out = Plan(width=graph.loss.output_shape[-1] if graph.loss.quality == "multiclass" else 1)
    fm_dim = []

    def walk(name) -> bool:
        """Whether everything under ``name`` is owned (then its backward is skipped too)."""
        layer = graph.layers[name]
        if len(graph.consumers[name]) != 1:
            return False
        if layer.kind in ("add", "sum_pooling"):
            if layer.kind == "sum_pooling" and out.width > 1 and layer.opts["axis"] != 1:
                return False                 # (K logits: the sum over an embedding's fields only)
            owned = [walk(src) for src in layer.inputs]
            if all(owned):
                out.skip.add(name)
            return all(owned)
        if layer.linear_width() == out.width and learnable(layer):
            out.linear.append(layer)
        elif layer.pairwise_input() is not None and out.width == 1:
            emb = graph.layers[layer.pairwise_input()]
            dim = emb.output_shape[-1]
            if not (emb.pools_rows and len(graph.consumers[emb.name]) == 1 and learnable(emb)
                    and fm_dim in ([], [dim])):
                return False
            fm_dim[:] = [dim]
            out.fm.append((layer, emb))
            out.skip.add(emb.name)
        else:
            return False
        out.skip.add(name)
        return True

    for src in graph.loss.inputs:
        walk(src)
    return out
