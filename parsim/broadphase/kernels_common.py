"""Small numba helpers shared by the broad-phase kernels."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def grow_pairs(out):
    """Return a copy of the (m, 2) pair buffer with twice the rows (amortised O(1) append)."""
    new = np.empty((2 * out.shape[0], 2), dtype=out.dtype)
    new[: out.shape[0]] = out
    return new
