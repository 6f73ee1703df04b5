"""All-pairs broad phase: the O(N^2) reference every other structure is tested against."""

from __future__ import annotations

import numpy as np
from numba import njit

from .base import BroadPhase, collect_pairs, ray_box_enter


@njit(cache=True)
def all_pairs_into(ids, lo, hi, n, out):
    """Every overlapping pair among the first n bodies (ids, a < b), written into ``out``.

    Returns the number of pairs; above ``out.shape[0] - 2`` the buffer overflowed (contents
    invalid) and the caller retries with that size. Branch-free: every candidate is written and
    kept only if it overlaps.
    """
    rows = out.shape[0]
    m = 0
    over = 0
    for i in range(n):
        l0, l1, l2 = lo[i, 0], lo[i, 1], lo[i, 2]
        h0, h1, h2 = hi[i, 0], hi[i, 1], hi[i, 2]
        a = ids[i]
        for j in range(i + 1, n):
            ok = ((lo[j, 0] <= h0) & (l0 <= hi[j, 0]) & (lo[j, 1] <= h1)
                  & (l1 <= hi[j, 1]) & (lo[j, 2] <= h2) & (l2 <= hi[j, 2]))
            b = ids[j]
            out[m, 0] = min(a, b)
            out[m, 1] = max(a, b)
            m += ok
            if m == rows - 1:
                over += m
                m = 0
    return over + m


def all_pairs(ids, lo, hi, n, expected=0):
    """Every overlapping pair among the first n bodies as int64[m, 2] (a < b)."""
    return collect_pairs(all_pairs_into, (ids, lo, hi, n), expected)[0]


@njit(cache=True)
def scan_box(ids, lo, hi, n, qlo, qhi):
    """Ids of the first n bodies whose AABB overlaps [qlo, qhi]."""
    out = np.empty(n, dtype=np.int64)
    m = 0
    for i in range(n):
        if not (lo[i, 0] > qhi[0] or qlo[0] > hi[i, 0] or lo[i, 1] > qhi[1]
                or qlo[1] > hi[i, 1] or lo[i, 2] > qhi[2] or qlo[2] > hi[i, 2]):
            out[m] = ids[i]
            m += 1
    return out[:m].copy()


@njit(cache=True)
def scan_ray(ids, lo, hi, n, o, d, t_max):
    """(ids, t_enter) of the first n bodies whose AABB the ray segment enters."""
    inv0 = 1.0 / d[0] if d[0] != 0.0 else np.inf
    inv1 = 1.0 / d[1] if d[1] != 0.0 else np.inf
    inv2 = 1.0 / d[2] if d[2] != 0.0 else np.inf
    out = np.empty(n, dtype=np.int64)
    tt = np.empty(n, dtype=np.float64)
    m = 0
    for i in range(n):
        t = ray_box_enter(o[0], o[1], o[2], inv0, inv1, inv2, lo[i], hi[i], t_max)
        if t >= 0.0:
            out[m] = ids[i]
            tt[m] = t
            m += 1
    return out[:m].copy(), tt[:m].copy()


class BruteForce(BroadPhase):
    """Checks every pair of AABBs: O(N^2) pairs, O(N) queries, O(1) add/update/remove."""

    def _add(self, ids, lo, hi):
        self.bodies.append(ids, lo, hi)

    def _update(self, slots, lo, hi):
        self.bodies.lo[slots] = lo
        self.bodies.hi[slots] = hi

    def _remove(self, slots):
        self.bodies.swap_remove(slots)

    def _pairs(self):
        b = self.bodies
        return all_pairs(b.ids, b.lo, b.hi, b.n)

    def _query_box(self, lo, hi):
        b = self.bodies
        return scan_box(b.ids, b.lo, b.hi, b.n, lo, hi)

    def _raycast(self, o, d, t_max):
        b = self.bodies
        return scan_ray(b.ids, b.lo, b.hi, b.n, o, d, t_max)
