"""``parsim.unmanaged.unmanaged``: the same array without a memory owner, for scratch buffers."""

from __future__ import annotations

import numpy as np
from numba import njit

from parsim.unmanaged import unmanaged


@njit
def _fill_rows(out):
    # a view carved out of the unmanaged array, written through, passed to another kernel
    u = unmanaged(out)
    v = u[1:3]
    for i in range(v.shape[0]):
        for j in range(v.shape[1]):
            v[i, j] = 10 * i + j
    return _total(u)


@njit
def _total(a):
    return a.sum()


@njit
def _count_rows(a):
    return a.shape[0]


@njit
def _count_unmanaged(a):
    return _count_rows(unmanaged(a))


def test_unmanaged_array_is_the_same_memory():
    out = np.zeros((4, 3))
    total = _fill_rows(out)
    expect = np.zeros((4, 3))
    expect[1:3] = [[0, 1, 2], [10, 11, 12]]
    assert np.array_equal(out, expect)          # written through to the caller's array
    assert total == expect.sum()


def test_unmanaged_has_the_type_of_its_array():
    """A callee given the unmanaged array runs its one compiled signature (the narrow phase
    must not be compiled a second time for it)."""
    a = np.arange(12.0).reshape(3, 4)
    assert _count_rows(a) == 3
    assert _count_unmanaged(a) == 3
    assert len(_count_rows.signatures) == 1
