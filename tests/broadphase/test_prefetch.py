"""The software prefetch hint: compiles for 1-d arrays of any dtype and changes nothing."""

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from parsim.broadphase.prefetch import prefetch


@njit(cache=True)
def _sum_with_prefetch(a, idx, ahead):
    s = a[0] * 0
    for i in range(idx.shape[0]):
        if i + ahead < idx.shape[0]:
            prefetch(a, idx[i + ahead])
        s += a[idx[i]]
    return s


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_prefetch_changes_no_value(dtype):
    rng = np.random.default_rng(3)
    a = rng.integers(-1000, 1000, 50_000).astype(dtype)
    idx = rng.integers(0, a.shape[0], 20_000)
    before = a.copy()
    assert _sum_with_prefetch(a, idx, 8) == a[idx].sum()
    assert _sum_with_prefetch(a, idx, 0) == a[idx].sum()
    assert np.array_equal(a, before)


def test_prefetch_refuses_2d_arrays():
    @njit
    def bad(a):
        prefetch(a, 0)

    with pytest.raises(TypingError):
        bad(np.zeros((2, 2)))


@njit(cache=True)
def _read_with_prefetch(a, i):
    prefetch(a, i)
    return a[i]


def test_prefetch_takes_any_integer_index_and_strided_arrays():
    a = np.arange(100, dtype=np.int32)
    assert _read_with_prefetch(a[::2], np.int32(3)) == 6
    assert _read_with_prefetch(a, np.uint32(5)) == 5
    assert _read_with_prefetch(a, np.int64(99)) == 99


def test_prefetch_emits_the_llvm_intrinsic():
    @njit  # not cached: numba cannot show the IR of code loaded from its cache
    def read(a, i):
        prefetch(a, i)
        return a[i]

    a = np.arange(10, dtype=np.float64)
    assert read(a, 1) == 1.0
    assert "call void @llvm.prefetch" in read.inspect_llvm(read.signatures[0])
