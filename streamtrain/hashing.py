"""Stable 64-bit hashing, vectorised: the same numbers on every machine and every run.

Python's ``hash`` of a str is salted per process, so ids, shard keys and row
initializers use these instead.
"""
from __future__ import annotations

import hashlib

import numpy as np

# SplitMix64's constants (also used by the compiled per-token hash in readers/ids.py)
SPLITMIX_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
SPLITMIX_M1 = np.uint64(0xBF58476D1CE4E5B9)
SPLITMIX_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x) -> np.ndarray:
    """SplitMix64's finaliser applied element-wise to a uint64 array (wrapping arithmetic)."""
    z = np.asarray(x, dtype=np.uint64) + SPLITMIX_GOLDEN
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * SPLITMIX_M1
        z = (z ^ (z >> np.uint64(27))) * SPLITMIX_M2
    return z ^ (z >> np.uint64(31))


def hash_str(text: str) -> int:
    """A stable 64-bit hash of a string (field names, table names)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


def uniform01(bits: np.ndarray) -> np.ndarray:
    """Map uint64 hashes to floats uniform in (0, 1), 53 bits of precision."""
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * (1.0 / (1 << 53))
