"""What differs between the layers a checkpoint was trained with and a job's: said when the
checkpoint is restored, evaluated or served, since weights of the same shapes fit layers that
compute something else (another activation, other crosses, another rate) without an error."""
from __future__ import annotations

import json

MISSING = object()
MOST = 6          # differences named in one warning


def differences(saved, ours, there: str = "the checkpoint") -> list[str]:
    """Each difference as ``layers.<name>.<key>: <theirs> in the checkpoint, <ours> here``."""
    if not isinstance(saved, list) or not isinstance(ours, list):
        return []
    a, b = _by_name(saved), _by_name(ours)
    found = [f"layer '{n}' only in {there}" for n in a if n not in b]
    found += [f"layer '{n}' only here" for n in b if n not in a]
    for name in (n for n in a if n in b):
        found += _diff(a[name], b[name], f"layers.{name}", there)
    return found


def say(saved, ours, there: str = "the checkpoint") -> str | None:
    """One sentence naming the first ``MOST`` differences (None: the same layers)."""
    found = differences(saved, ours, there)
    if not found:
        return None
    more = f"; and {len(found) - MOST} more" if len(found) > MOST else ""
    return "its layers differ from these: " + "; ".join(found[:MOST]) + more


def loss_problem(saved, ours, where) -> str | None:
    """A loss layer of another type than the checkpoint's (None: the same, or not recorded): the
    model's output means something else under it (an ``mse``'s is a number in the label's units, a
    ``logloss``'s a logit, a ``softmax_ce``'s K logits), so scores and answers would be wrong."""
    from streamtrain.ops import LAYERS
    if not isinstance(saved, list) or not isinstance(ours, list):
        return None
    theirs = _by_name(saved)
    for name, layer in _by_name(ours).items():
        kind, was = layer.get("type"), theirs.get(name, {}).get("type")
        if was is not None and was != kind and getattr(LAYERS.get(kind), "is_loss", False):
            return (f"checkpoint {where} was trained with loss '{name}' of type {was!r}, this job's is {kind!r}: "
                    f"the model's output means something else under it, so set --set layers.{name}.type={was}")
    return None


def _by_name(layers: list) -> dict:
    return {str(c.get("name")): c for c in layers if isinstance(c, dict)}


def _diff(x, y, path: str, there: str) -> list[str]:
    if isinstance(x, dict) and isinstance(y, dict):
        return [d for k in list(x) + [k for k in y if k not in x]
                for d in _diff(x.get(k, MISSING), y.get(k, MISSING), f"{path}.{k}", there)]
    if x == y:
        return []
    return [f"{path}: {_show(x)} in {there}, {_show(y)} here"]


def _show(v) -> str:
    return "absent" if v is MISSING else json.dumps(v)
