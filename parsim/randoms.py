"""Counter-based random numbers: ``u(seed, index, step, stream)`` in [0, 1) is a pure function of
its arguments (splitmix64 hashing), so any rank can draw the numbers of any body without drawing
those of the others first. This is what lets the lattice generator and the broad-phase demo make
only the bodies of their own block and still get the bits of a serial run."""

from __future__ import annotations

import math

import numpy as np

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _splitmix_int(z: int) -> int:
    z = (z + _GOLDEN) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return z ^ (z >> 31)


def _splitmix_array(z: np.ndarray) -> np.ndarray:
    # uint64 array arithmetic wraps modulo 2**64, which is what splitmix64 wants.
    z = z + np.uint64(_GOLDEN)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    return z ^ (z >> np.uint64(31))


def uniform(seed: int, index: np.ndarray, step: int, stream: int) -> np.ndarray:
    """Uniform numbers in [0, 1), one per index, a pure function of
    ``(seed, index, step, stream)`` (non-negative integers; ``index`` int64[n], e.g. uids)."""
    key = _splitmix_int(_splitmix_int(_splitmix_int(seed & _MASK64) ^ step) ^ stream)
    z = _splitmix_array(np.asarray(index, dtype=np.int64).astype(np.uint64) ^ np.uint64(key))
    return (z >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def normal(seed: int, index: np.ndarray, stream: int) -> np.ndarray:
    """Standard normal numbers, one per index (Box-Muller from the uniforms of steps 1 and 2)."""
    u1 = uniform(seed, index, 1, stream)
    u2 = uniform(seed, index, 2, stream)
    return np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * math.pi * u2)
