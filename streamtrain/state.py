"""The per-layer state machine (Angel): Null → Forward → Backward → Gradient → Update.

One transition table; an illegal move raises ``LayerStateError`` naming the layer and both
states. ``feed`` puts every layer back to Null.
"""
from __future__ import annotations

import enum

from .errors import LayerStateError


class Status(enum.IntEnum):
    NULL = 0
    FORWARD = 1
    BACKWARD = 2
    GRADIENT = 3
    UPDATE = 4

    @property
    def label(self) -> str:
        return self.name.capitalize()


# phase -> (state it needs, state it leaves)
TRANSITIONS = {
    "forward": (Status.NULL, Status.FORWARD),
    "backward": (Status.FORWARD, Status.BACKWARD),
    "gradient": (Status.BACKWARD, Status.GRADIENT),
    "update": (Status.GRADIENT, Status.UPDATE),
}


def advance(statuses: dict, layer: str, phase: str) -> bool:
    """Move ``layer`` through ``phase``. True if the work must be done now, False if it was
    already done this batch (compute once); raises ``LayerStateError`` when out of order."""
    need, leave = TRANSITIONS[phase]
    current = statuses[layer]
    if current == leave:
        return False
    if current != need:
        raise LayerStateError(layer, phase, need, current)
    statuses[layer] = leave
    return True
