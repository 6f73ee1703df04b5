"""Rows of (n, 3) and (n, 4) arrays as tuples, for numba kernels.

In a hot loop, a row view ``arr[i]`` (or an array passed into an inlined helper that branches)
makes numba emit two atomic reference-count calls per use; a tuple of scalars costs nothing of
the kind. The pair and integration kernels read rows through these helpers (see the kernel
notes in docs/engine.md and docs/development.md).
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, inline="always")
def row3(arr, i):
    """Row ``i`` of an (n, 3) array as a 3-tuple."""
    return (arr[i, 0], arr[i, 1], arr[i, 2])


@njit(cache=True, inline="always")
def row4(arr, i):
    """Row ``i`` of an (n, 4) array (a quaternion) as a 4-tuple."""
    return (arr[i, 0], arr[i, 1], arr[i, 2], arr[i, 3])
