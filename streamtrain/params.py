"""Named parameters (Paddle: Model = topology + parameters) and their deterministic initializers.

A dense parameter is one array; a table parameter is a set of rows keyed by uint64 id that
grows as ids arrive. Every row is initialised from (table, id) alone, so every trainer and
every store backend creates the same row without talking to each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .hashing import hash_str, splitmix64, uniform01

INITS = ("zeros", "normal", "uniform", "xavier", "ones")


@dataclass(frozen=True)
class ParamSpec:
    """What a layer declares: a name, a shape, an initializer, an optimizer config."""

    name: str
    shape: tuple            # dense: the full shape; table: (dim,) of one row
    table: bool = False
    init: str = "normal"
    scale: float = 0.01
    optimizer: dict | None = field(default=None, compare=False)

    @property
    def dim(self) -> int:
        return int(np.prod(self.shape)) if self.table else 0

    def same_as(self, other: "ParamSpec") -> bool:
        return (self.shape, self.table, self.init, self.scale) == (
            other.shape, other.table, other.init, other.scale)


def init_dense(spec: ParamSpec, dtype=np.float32) -> np.ndarray:
    """The initial value of a dense parameter, seeded by its name."""
    rng = np.random.default_rng(hash_str(spec.name))
    shape = tuple(spec.shape)
    if spec.init == "zeros":
        return np.zeros(shape, dtype)
    if spec.init == "ones":
        return np.ones(shape, dtype)
    if spec.init == "normal":
        return (rng.standard_normal(shape) * spec.scale).astype(dtype)
    if spec.init == "uniform":
        return rng.uniform(-spec.scale, spec.scale, shape).astype(dtype)
    if spec.init == "xavier":
        fan_in = shape[0] if shape else 1
        fan_out = shape[-1] if len(shape) > 1 else 1
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, shape).astype(dtype)
    raise ValueError(f"parameter '{spec.name}': unknown init '{spec.init}' (known: {', '.join(INITS)})")


def init_rows(spec: ParamSpec, ids: np.ndarray, dtype=np.float32) -> np.ndarray:
    """Initial rows of a table for the given ids: a pure function of (table name, id, column)."""
    ids = np.asarray(ids, dtype=np.uint64)
    dim = spec.dim
    if spec.init == "zeros":
        return np.zeros((len(ids), dim), dtype)
    if spec.init == "ones":
        return np.ones((len(ids), dim), dtype)
    seed = np.uint64(hash_str(spec.name))
    row = splitmix64(ids ^ seed)[:, None]
    with np.errstate(over="ignore"):
        cols = np.arange(dim, dtype=np.uint64)[None, :] * np.uint64(0x2545F4914F6CDD1D)
        bits1 = splitmix64(row + cols)
        u1 = uniform01(bits1)
    if spec.init == "uniform":
        return ((2.0 * u1 - 1.0) * spec.scale).astype(dtype)
    if spec.init == "xavier":
        limit = np.sqrt(6.0 / (1 + dim))
        return ((2.0 * u1 - 1.0) * limit).astype(dtype)
    if spec.init == "normal":
        u2 = uniform01(splitmix64(bits1))
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
        return (z * spec.scale).astype(dtype)
    raise ValueError(f"parameter '{spec.name}': unknown init '{spec.init}' (known: {', '.join(INITS)})")
