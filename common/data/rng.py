"""Counter-based random numbers defined by arithmetic alone (splitmix64).

numpy's Generator streams may change between numpy releases; these cannot. A torch run on one
cluster and a TensorFlow run on another therefore shuffle and initialize identically as long as
they agree on the seed.
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def splitmix64(counters: np.ndarray) -> np.ndarray:
    """Hash uint64 counters to well-mixed uint64 values (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = counters.astype(np.uint64) * _GOLDEN + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        mixed: np.ndarray = z ^ (z >> np.uint64(31))
        return mixed


def stream_key(*parts: int) -> np.uint64:
    """Fold a tuple of non-negative ints (seed, purpose, epoch, ...) into one 64-bit key."""
    key = np.zeros(1, dtype=np.uint64)
    for part in parts:
        if part < 0:
            raise ValueError(f"stream key parts must be >= 0, got {part}")
        key = splitmix64(key ^ np.uint64(part))
    folded: np.uint64 = key[0]
    return folded


def random_bits(key: np.uint64, count: int, start: int = 0) -> np.ndarray:
    """`count` uint64 values of the stream `key`, from its value number `start` on: a stream
    can be drawn in pieces, and the pieces join to the values drawn at once."""
    with np.errstate(over="ignore"):
        return splitmix64(np.arange(start, start + count, dtype=np.uint64) + key)


def uniform(key: np.uint64, count: int, start: int = 0) -> np.ndarray:
    """`count` float64 values in [0, 1) with 53 random bits each (from value `start` on)."""
    values: np.ndarray = (random_bits(key, count, start) >> np.uint64(11)).astype(np.float64)
    return values * 2.0**-53
