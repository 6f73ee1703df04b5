"""The 8- and 4-wide AABB overlap tests: bit k says whether box ``index + k`` overlaps the query
box; the 8-wide test along x alone, and its 16-wide form on float32 copies of the bounds; and
the 8-wide count of the x indices of a short run below a bound."""

import numpy as np
import pytest
from numba import njit
from numba.core.errors import TypingError

from parsim.broadphase.simd import (LANES, count_below8, overlap_mask4, overlap_mask8, overlap_x8,
                                   overlap_x16f)


@njit(cache=True)
def _masks(lo, hi, q_lo, q_hi, starts, lanes=LANES):
    """The masks of ``overlap_mask8`` (``lanes`` 8) or ``overlap_mask4`` (4) at ``starts``."""
    out = np.empty(starts.shape[0], dtype=np.int64)
    for i in range(starts.shape[0]):
        if lanes == 4:
            out[i] = overlap_mask4(lo[0], lo[1], lo[2], hi[0], hi[1], hi[2], starts[i],
                                   q_lo[0], q_lo[1], q_lo[2], q_hi[0], q_hi[1], q_hi[2])
        else:
            out[i] = overlap_mask8(lo[0], lo[1], lo[2], hi[0], hi[1], hi[2], starts[i],
                                   q_lo[0], q_lo[1], q_lo[2], q_hi[0], q_hi[1], q_hi[2])
    return out


def _expected(lo, hi, q_lo, q_hi, start, lanes=LANES):
    ok = np.all((q_lo[:, None] <= hi[:, start: start + lanes])
                & (lo[:, start: start + lanes] <= q_hi[:, None]), axis=0)
    return int(sum(1 << k for k in range(lanes) if ok[k]))


@pytest.mark.parametrize("lanes", [8, 4])
def test_masks_equal_the_scalar_test_closed_boxes_and_nan(lanes):
    rng = np.random.default_rng(4)
    n = 4000
    # coordinates on a coarse grid, so that many boxes touch exactly (closed: they overlap)
    lo = rng.integers(-8, 8, (3, n)).astype(np.float64)
    hi = lo + rng.integers(0, 4, (3, n))
    lo[0, rng.integers(0, n, 40)] = np.nan  # a NaN never overlaps
    hi[2, rng.integers(0, n, 40)] = np.nan
    lo[:, -LANES:] = np.inf  # the padding that overlaps nothing
    hi[:, -LANES:] = -np.inf
    starts = rng.integers(0, n - LANES + 1, 3000)  # any alignment
    for _ in range(20):
        q_lo = rng.integers(-8, 8, 3).astype(np.float64)
        q_hi = q_lo + rng.integers(0, 6, 3)
        got = _masks(lo, hi, q_lo, q_hi, starts, lanes)
        exp = [_expected(lo, hi, q_lo, q_hi, s, lanes) for s in starts]
        assert got.tolist() == exp
    assert (_masks(lo, hi, q_lo, q_hi, np.array([n - LANES]), lanes) == 0).all()
    assert (_masks(lo, hi, np.full(3, -1e300), np.full(3, 1e300), np.array([0]), lanes)[0]
            == _expected(lo, hi, np.full(3, -1e300), np.full(3, 1e300), 0, lanes))


@njit(cache=True)
def _x_masks(lo, hi, q_lo, q_hi, starts):
    out = np.empty(starts.shape[0], dtype=np.int64)
    for i in range(starts.shape[0]):
        out[i] = overlap_x8(lo[0], hi[0], starts[i], q_lo[0], q_hi[0])
    return out


def test_x_mask_equals_the_scalar_test_along_x():
    # the same boxes as above; only x is compared (y and z may be anything, NaN included)
    rng = np.random.default_rng(5)
    n = 4000
    lo = rng.integers(-8, 8, (3, n)).astype(np.float64)
    hi = lo + rng.integers(0, 4, (3, n))
    lo[0, rng.integers(0, n, 40)] = np.nan
    hi[1, rng.integers(0, n, 40)] = np.nan
    lo[:, -LANES:] = np.inf
    hi[:, -LANES:] = -np.inf
    starts = rng.integers(0, n - LANES + 1, 3000)
    for _ in range(20):
        q_lo = rng.integers(-8, 8, 3).astype(np.float64)
        q_hi = q_lo + rng.integers(0, 6, 3)
        got = _x_masks(lo, hi, q_lo, q_hi, starts)
        exp = [_expected(lo[:1], hi[:1], q_lo[:1], q_hi[:1], s) for s in starts]
        assert got.tolist() == exp
        # x alone never drops a lane the full test keeps
        full = _masks(lo, hi, q_lo, q_hi, starts)
        assert ((full & ~got) == 0).all()


def test_strided_arrays_are_refused():
    @njit
    def bad(a):
        return overlap_mask8(a, a, a, a, a, a, 0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0)

    with pytest.raises(TypingError):
        bad(np.zeros(32)[::2])


@njit(cache=True)
def _counts(xs, starts, lengths, bounds):
    out = np.empty(starts.shape[0], dtype=np.int64)
    for i in range(starts.shape[0]):
        out[i] = count_below8(xs, starts[i], lengths[i], bounds[i])
    return out


def test_count_below_counts_the_run_only():
    # runs of 0..8 entries at any alignment, bounds below, inside and above the values
    # (negative ones too); the lanes past a run's length hold values that would count
    rng = np.random.default_rng(11)
    xs = rng.integers(-40, 300, 5000).astype(np.int32)
    starts = rng.integers(0, xs.shape[0] - LANES + 1, 20000)
    lengths = rng.integers(0, LANES + 1, starts.shape[0])
    bounds = rng.integers(-50, 320, starts.shape[0])
    got = _counts(xs, starts, lengths, bounds)
    exp = [int(np.count_nonzero(xs[s: s + n] < t)) for s, n, t in zip(starts, lengths, bounds)]
    assert got.tolist() == exp
    assert _counts(xs, np.array([0]), np.array([8]), np.array([10**6]))[0] == 8
    assert _counts(xs, np.array([0]), np.array([0]), np.array([10**6]))[0] == 0


def test_count_below_refuses_other_than_int32():
    @njit
    def bad(a):
        return count_below8(a, 0, 4, 1)

    with pytest.raises(TypingError):
        bad(np.zeros(32, dtype=np.int64))


@njit(cache=True)
def _x16_masks(fl, fh, q_lo, q_hi, starts):
    out = np.empty(starts.shape[0], dtype=np.int64)
    for i in range(starts.shape[0]):
        out[i] = overlap_x16f(fl, fh, starts[i], q_lo, q_hi)
    return out


def test_float32_x_mask_keeps_every_lane_of_the_exact_test():
    # boxes on a grid of 1/64 around 1e6, where float32's step is 1/16: many touch or overlap
    # by 1/64 in float64, and their float32 copies are rounded to nearest (monotone: what
    # overlaps still does). Each of sixteen lanes equals the scalar test on the copies, and
    # keeps every lane the exact float64 test keeps; beyond float32's range too (+-inf).
    rng = np.random.default_rng(22)
    n = 3000
    lo = 1e6 + rng.integers(-400, 400, n) / 64.0
    hi = lo + rng.integers(0, 64, n) / 64.0
    lo[:100] = 1e39 + rng.integers(0, 4, 100) * 1e38
    hi[:100] = lo[:100] + rng.integers(0, 2, 100) * 1e38
    with np.errstate(over="ignore"):  # (1e39 becomes inf, as in the kernel)
        fl, fh = lo.astype(np.float32), hi.astype(np.float32)
    fl = np.concatenate([fl, np.full(16, np.inf, np.float32)])
    fh = np.concatenate([fh, np.full(16, -np.inf, np.float32)])
    starts = rng.integers(0, n, 2000)  # runs may reach into the padding
    for q in rng.integers(0, n, 30):
        got = _x16_masks(fl, fh, fl[q], fh[q], starts)
        for s, m in zip(starts, got):
            lanes = np.arange(s, s + 16)
            scalar = (fl[q] <= fh[lanes]) & (fl[lanes] <= fh[q])
            assert m == int(sum(1 << k for k in range(16) if scalar[k]))
            real = lanes[lanes < n]
            exact = (lo[q] <= hi[real]) & (lo[real] <= hi[q])
            assert all(m >> k & 1 for k in np.flatnonzero(exact))
