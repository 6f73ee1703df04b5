"""Small numba helpers shared by the broad-phase kernels."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def radix_argsort(keys):
    """Stable argsort of non-negative int64 keys by LSD radix sort, 16 bits per pass.

    O(n) per pass and as many passes as the largest key needs (two for keys below 2**32):
    several times faster than a comparison sort for the cell indices the grids sort by.
    """
    n = keys.shape[0]
    order = np.arange(n)
    if n < 2:
        return order
    kmax = keys.max()
    tmp = np.empty(n, dtype=np.int64)
    count = np.empty(65537, dtype=np.int64)
    shift = 0
    while shift == 0 or (kmax >> shift) > 0:
        count[:] = 0
        for i in range(n):
            count[((keys[order[i]] >> shift) & 0xFFFF) + 1] += 1
        for d in range(65536):
            count[d + 1] += count[d]
        for i in range(n):
            o = order[i]
            dgt = (keys[o] >> shift) & 0xFFFF
            tmp[count[dgt]] = o
            count[dgt] += 1
        order, tmp = tmp, order
        shift += 16
    return order
