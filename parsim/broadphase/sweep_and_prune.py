"""Incremental sweep and prune (sort and sweep) on one axis.

The bodies are kept persistently sorted by the lower bound of their AABB on one axis (the axis
of largest spread of the first bodies added, unless given). The order is stored as sorted
records, structure-of-arrays: ``key`` (lo on the sort axis, contiguous for the sweep and the
binary searches), ``hia`` (hi on the sort axis), ``oth`` (lo/hi on the other two axes),
``s_ids``; ``s_slot`` and ``pos`` link record positions and body-store slots both ways.

* ``update`` writes the new boxes in place and restores the order by insertion sort. Between time
  steps bodies move little, the array is nearly sorted, and this costs O(N + swaps) (temporal
  coherence, Baraff 1992; Cohen et al. 1995). A swap budget guards against incoherent moves: past
  it the array is re-sorted with a stable O(N log N) sort.
* ``add`` sorts the batch and merges it in from the back, O(N + k log k); ``remove`` compacts the
  records, O(N).
* ``pairs`` sweeps: body ``k`` is tested against the following bodies ``j`` while
  ``lo_j <= hi_k`` on the sort axis (this forward scan is the active-set sweep, written without
  the set), checking the other two axes. Each pair is met once, from its earlier body. Cost
  O(N + pairs overlapping on the sort axis), which degrades when bodies line up on that axis.
* queries binary-search the sort axis: candidates are the sorted positions with ``lo <= qhi``
  and a running maximum of ``hi`` (prefix max, rebuilt lazily after changes) ``>= qlo``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .base import BroadPhase, BroadPhaseError, collect_pairs, ray_box_enter

# Rounding slack for the ray's extent along the sort axis (relative to coordinate magnitudes).
_REL_MARGIN = 1e-12


@njit(cache=True, inline="always")
def _move_record(key, hia, oth, s_ids, s_slot, pos, src, dst):
    """Copy sorted record ``src`` to position ``dst`` and point its slot at ``dst``."""
    key[dst] = key[src]
    hia[dst] = hia[src]
    for d in range(4):
        oth[dst, d] = oth[src, d]
    s_ids[dst] = s_ids[src]
    s_slot[dst] = s_slot[src]
    pos[s_slot[dst]] = dst


@njit(cache=True, inline="always")
def _put_box(key, hia, oth, p, lo, hi, i, axis):
    """Write box i of (lo, hi) into sorted record p (sort axis first, then the other two)."""
    b = (axis + 1) % 3
    c = (axis + 2) % 3
    key[p] = lo[i, axis]
    hia[p] = hi[i, axis]
    oth[p, 0] = lo[i, b]
    oth[p, 1] = hi[i, b]
    oth[p, 2] = lo[i, c]
    oth[p, 3] = hi[i, c]


@njit(cache=True)
def sap_merge_insert(key, hia, oth, s_ids, s_slot, pos, n_old, ids, lo, hi, slots, axis):
    """Insert k new bodies into the sorted records (capacity >= n_old + k): sort, merge from back.

    Reads ids, lo, hi, slots (the new bodies' store slots); writes the records and pos.
    """
    k = ids.shape[0]
    order = np.argsort(lo[:, axis], kind="mergesort")
    i = n_old - 1
    j = k - 1
    w = n_old + k - 1
    while j >= 0:
        nj = order[j]
        if i >= 0 and key[i] > lo[nj, axis]:
            _move_record(key, hia, oth, s_ids, s_slot, pos, i, w)
            i -= 1
        else:
            _put_box(key, hia, oth, w, lo, hi, nj, axis)
            s_ids[w] = ids[nj]
            s_slot[w] = slots[nj]
            pos[slots[nj]] = w
            j -= 1
        w -= 1


@njit(cache=True)
def sap_resort(key, hia, oth, s_ids, s_slot, pos, n):
    """Stable full re-sort of the first n records by key (fallback for incoherent moves)."""
    order = np.argsort(key[:n], kind="mergesort")
    t_key = key[:n][order]
    t_hia = hia[:n][order]
    t_oth = oth[:n][order]
    t_ids = s_ids[:n][order]
    t_slot = s_slot[:n][order]
    for p in range(n):
        key[p] = t_key[p]
        hia[p] = t_hia[p]
        for d in range(4):
            oth[p, d] = t_oth[p, d]
        s_ids[p] = t_ids[p]
        s_slot[p] = t_slot[p]
        pos[t_slot[p]] = p


@njit(cache=True)
def sap_update(key, hia, oth, s_ids, s_slot, pos, n, slots, lo, hi, axis, budget):
    """Write the new boxes of ``slots`` into their records and restore the order.

    Insertion sort, O(n + shifts); once more than ``budget`` records have been shifted the rest
    is left to :func:`sap_resort`. Returns the number of shifts (or -1 when it re-sorted).
    """
    for k in range(slots.shape[0]):
        _put_box(key, hia, oth, pos[slots[k]], lo, hi, k, axis)
    shifts = 0
    r_oth = np.empty(4)
    for i in range(1, n):
        r_key = key[i]
        if key[i - 1] <= r_key:
            continue
        r_hia = hia[i]
        for d in range(4):
            r_oth[d] = oth[i, d]
        r_id = s_ids[i]
        r_slot = s_slot[i]
        j = i - 1
        while j >= 0 and key[j] > r_key:
            _move_record(key, hia, oth, s_ids, s_slot, pos, j, j + 1)
            j -= 1
        shifts += i - 1 - j
        key[j + 1] = r_key
        hia[j + 1] = r_hia
        for d in range(4):
            oth[j + 1, d] = r_oth[d]
        s_ids[j + 1] = r_id
        s_slot[j + 1] = r_slot
        pos[r_slot] = j + 1
        if shifts > budget:
            sap_resort(key, hia, oth, s_ids, s_slot, pos, n)
            return -1
    return shifts


@njit(cache=True)
def sap_compact(key, hia, oth, s_ids, s_slot, pos, n, slots):
    """Delete the records of ``slots`` (distinct) from the sorted records, keeping the order.

    Sets ``pos[slot] = -1`` for the removed slots (so replayed store moves can tell them apart).
    """
    first = n
    for k in range(slots.shape[0]):
        p = pos[slots[k]]
        s_slot[p] = -1
        pos[slots[k]] = -1
        first = min(first, p)
    w = first
    for r in range(first, n):
        if s_slot[r] >= 0:
            if r != w:
                _move_record(key, hia, oth, s_ids, s_slot, pos, r, w)
            w += 1


@njit(cache=True)
def sap_apply_moves(s_slot, pos, move_src, move_dst):
    """Replay the body store's swap-remove moves on ``pos`` and the records' slot references."""
    for k in range(move_src.shape[0]):
        src = move_src[k]
        if src >= 0:
            dst = move_dst[k]
            p = pos[src]
            pos[dst] = p
            if p >= 0:
                s_slot[p] = dst


@njit(cache=True)
def sap_pairs(key, hia, oth, s_ids, n, out):
    """Sweep: each record k against the following ones while ``key[j] <= hia[k]``.

    Writes pairs (ids, a < b) into ``out`` and returns their number; if that exceeds
    ``out.shape[0] - 2`` the buffer overflowed (contents invalid) and the caller retries with a
    buffer of that size. The test and the store are branch-free (the row is written, then kept
    or not), which is about twice as fast as branching on the mostly-false test.
    """
    rows = out.shape[0]
    m = 0
    over = 0
    for k in range(n):
        hk = hia[k]
        lb = oth[k, 0]
        hb = oth[k, 1]
        lc = oth[k, 2]
        hc = oth[k, 3]
        ik = s_ids[k]
        j = k + 1
        while j < n and key[j] <= hk:
            ok = (oth[j, 0] <= hb) & (lb <= oth[j, 1]) & (oth[j, 2] <= hc) & (lc <= oth[j, 3])
            jd = s_ids[j]
            out[m, 0] = min(ik, jd)
            out[m, 1] = max(ik, jd)
            m += ok
            if m == rows - 1:
                over += m
                m = 0
            j += 1
    return over + m


@njit(cache=True)
def sap_aux(key, hia, oth, n, axis):
    """Prefix maximum of hi on the sort axis over sorted positions, and the bounds of all bodies
    (float64[6], lo then hi, in world axis order)."""
    b = (axis + 1) % 3
    c = (axis + 2) % 3
    pmax = np.empty(n)
    bounds = np.empty(6)
    for d in range(3):
        bounds[d] = np.inf
        bounds[3 + d] = -np.inf
    run = -np.inf
    for p in range(n):
        run = max(run, hia[p])
        pmax[p] = run
        bounds[axis] = min(bounds[axis], key[p])
        bounds[3 + axis] = max(bounds[3 + axis], hia[p])
        bounds[b] = min(bounds[b], oth[p, 0])
        bounds[3 + b] = max(bounds[3 + b], oth[p, 1])
        bounds[c] = min(bounds[c], oth[p, 2])
        bounds[3 + c] = max(bounds[3 + c], oth[p, 3])
    return pmax, bounds


@njit(cache=True, inline="always")
def _candidate_range(key, pmax, n, x0, x1):
    """Sorted positions [start, end) that may overlap [x0, x1] on the sort axis.

    end: first position with key (lo) > x1; start: first with prefix-max hi >= x0.
    """
    a, b = 0, n
    while a < b:
        mid = (a + b) // 2
        if key[mid] <= x1:
            a = mid + 1
        else:
            b = mid
    end = a
    a, b = 0, end
    while a < b:
        mid = (a + b) // 2
        if pmax[mid] < x0:
            a = mid + 1
        else:
            b = mid
    return a, end


@njit(cache=True)
def sap_query_box(key, hia, oth, s_ids, pmax, n, axis, qlo, qhi):
    """Ids of bodies overlapping [qlo, qhi]: binary search on the sort axis, then exact test."""
    b = (axis + 1) % 3
    c = (axis + 2) % 3
    start, end = _candidate_range(key, pmax, n, qlo[axis], qhi[axis])
    out = np.empty(max(0, end - start), dtype=np.int64)
    m = 0
    for p in range(start, end):
        if (hia[p] >= qlo[axis] and oth[p, 0] <= qhi[b] and qlo[b] <= oth[p, 1]
                and oth[p, 2] <= qhi[c] and qlo[c] <= oth[p, 3]):
            out[m] = s_ids[p]
            m += 1
    return out[:m].copy()


@njit(cache=True)
def sap_raycast(key, hia, oth, s_ids, pmax, bounds, n, axis, o, d, t_max):
    """(ids, t_enter) of bodies the ray segment enters.

    The segment is clipped to the bounding box of all bodies; its extent on the sort axis
    (padded for rounding) selects a range of sorted positions, each tested with
    :func:`ray_box_enter` (the same test as brute force).
    """
    b = (axis + 1) % 3
    c = (axis + 2) % 3
    inv0 = 1.0 / d[0] if d[0] != 0.0 else np.inf
    inv1 = 1.0 / d[1] if d[1] != 0.0 else np.inf
    inv2 = 1.0 / d[2] if d[2] != 0.0 else np.inf
    empty = (np.empty(0, np.int64), np.empty(0, np.float64))
    big = max(np.abs(o).max(), np.abs(bounds).max())
    pad = _REL_MARGIN * big + 1e-300
    t0 = 0.0
    t1 = t_max
    for ax in range(3):
        glo = bounds[ax] - pad
        ghi = bounds[3 + ax] + pad
        if d[ax] == 0.0:
            if o[ax] < glo or o[ax] > ghi:
                return empty
            continue
        ta = (glo - o[ax]) / d[ax]
        tb = (ghi - o[ax]) / d[ax]
        if ta > tb:
            ta, tb = tb, ta
        t0 = max(t0, ta)
        t1 = min(t1, tb)
    if t0 > t1:
        return empty
    xa0 = o[axis] + t0 * d[axis]
    xa1 = o[axis] + t1 * d[axis]
    start, end = _candidate_range(key, pmax, n, min(xa0, xa1) - pad, max(xa0, xa1) + pad)
    out = np.empty(max(0, end - start), dtype=np.int64)
    tt = np.empty(max(0, end - start), dtype=np.float64)
    lo3 = np.empty(3)
    hi3 = np.empty(3)
    m = 0
    for p in range(start, end):
        lo3[axis] = key[p]
        hi3[axis] = hia[p]
        lo3[b] = oth[p, 0]
        hi3[b] = oth[p, 1]
        lo3[c] = oth[p, 2]
        hi3[c] = oth[p, 3]
        t = ray_box_enter(o[0], o[1], o[2], inv0, inv1, inv2, lo3, hi3, t_max)
        if t >= 0.0:
            out[m] = s_ids[p]
            tt[m] = t
            m += 1
    return out[:m].copy(), tt[:m].copy()


class SweepAndPrune(BroadPhase):
    """Incremental sweep and prune over boxes kept sorted by their lower bound on one axis.

    Parameters
    ----------
    axis : {None, 0, 1, 2}
        Sort axis. ``None`` (default) picks the axis along which the centres of the bodies spread
        most, each time bodies are added to an empty structure.
    resort_factor : float
        Insertion-sort budget per ``update``, in record shifts per body; beyond it the records
        are re-sorted in O(N log N) instead (keeps incoherent updates from going quadratic).

    Complexity: update O(N + shifts); add O(N + k log k); remove O(N); pairs O(N + pairs
    overlapping on the sort axis) -- for N bodies of size s spread uniformly over a cube of edge
    L that is about N^2 s / L, so it grows faster than linearly; box query O(log N + bodies in
    the slab the query spans on the sort axis, from the first whose running max of hi reaches
    it).
    """

    _ARRAYS = ("_key", "_hia", "_oth", "_s_ids", "_s_slot", "_pos")

    def __init__(self, axis: int | None = None, resort_factor: float = 16.0):
        super().__init__()
        if axis is not None and axis not in (0, 1, 2):
            raise BroadPhaseError(f"axis must be None, 0, 1 or 2, got {axis!r}")
        rf = float(resort_factor)
        if not (rf >= 0.0):
            raise BroadPhaseError(f"resort_factor must be >= 0, got {resort_factor!r}")
        self.fixed_axis = axis
        self.axis = 0 if axis is None else int(axis)
        self.resort_factor = rf
        cap = self.bodies.capacity
        # sorted records: key = lo and hia = hi on the sort axis; oth = (lo, hi) on the next
        # axis, then (lo, hi) on the one after; s_ids / s_slot = id / store slot of each record;
        # pos[slot] = record position of the body in store slot ``slot``
        self._key = np.empty(cap)
        self._hia = np.empty(cap)
        self._oth = np.empty((cap, 4))
        self._s_ids = np.empty(cap, dtype=np.int64)
        self._s_slot = np.empty(cap, dtype=np.int64)
        self._pos = np.empty(cap, dtype=np.int64)
        self._aux = None  # (pmax, bounds) for queries; None when stale
        self._last_m = 0

    def _reserve(self, n_total: int) -> None:
        cap = self._s_ids.shape[0]
        if n_total <= cap:
            return
        while cap < n_total:
            cap *= 2
        n = self.bodies.n
        for name in self._ARRAYS:
            old = getattr(self, name)
            new = np.empty((cap,) + old.shape[1:], dtype=old.dtype)
            new[:n] = old[:n]
            setattr(self, name, new)

    def _recs(self):
        return self._key, self._hia, self._oth, self._s_ids, self._s_slot, self._pos

    # ---- mutation ---------------------------------------------------------------------------
    def _add(self, ids, lo, hi):
        n_old = self.bodies.n
        if n_old == 0 and self.fixed_axis is None:
            c = lo + hi
            self.axis = int(np.argmax(c.max(axis=0) - c.min(axis=0)))
        self._reserve(n_old + ids.shape[0])
        slots = self.bodies.append(ids, lo, hi)
        sap_merge_insert(*self._recs(), n_old, ids, lo, hi, slots, self.axis)
        self._aux = None

    def _update(self, slots, lo, hi):
        b = self.bodies
        b.lo[slots] = lo
        b.hi[slots] = hi
        budget = int(self.resort_factor * b.n) + 64
        sap_update(*self._recs(), b.n, slots, lo, hi, self.axis, budget)
        self._aux = None

    def _remove(self, slots):
        sap_compact(*self._recs(), self.bodies.n, slots)
        src, dst = self.bodies.swap_remove(slots)
        sap_apply_moves(self._s_slot, self._pos, src, dst)
        self._aux = None

    # ---- results ----------------------------------------------------------------------------
    def _pairs(self):
        n = self.bodies.n
        pairs, self._last_m = collect_pairs(
            sap_pairs, (self._key, self._hia, self._oth, self._s_ids, n), max(2 * n, self._last_m))
        return pairs

    def _ensure_aux(self):
        if self._aux is None:
            self._aux = sap_aux(self._key, self._hia, self._oth, self.bodies.n, self.axis)
        return self._aux

    def _query_box(self, lo, hi):
        pmax, _ = self._ensure_aux()
        return sap_query_box(self._key, self._hia, self._oth, self._s_ids, pmax, self.bodies.n,
                             self.axis, lo, hi)

    def _raycast(self, o, d, t_max):
        pmax, bounds = self._ensure_aux()
        return sap_raycast(self._key, self._hia, self._oth, self._s_ids, pmax, bounds,
                           self.bodies.n, self.axis, o, d, t_max)

    def _nbytes(self):
        n = sum(getattr(self, a).nbytes for a in self._ARRAYS)
        if self._aux is not None:
            n += self._aux[0].nbytes + self._aux[1].nbytes
        return n
