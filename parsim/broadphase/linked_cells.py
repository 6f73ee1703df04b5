"""Linked Cells: one uniform grid whose cell edge is the largest AABB edge (waLBerla's default).

Linked Cells (LC) is the general-purpose structure the Koch (2020) thesis uses as its reference:
every body is binned into one cubic cell by its position, and a pair is only considered if both
bodies lie in the same or in adjacent cells. That is only exact if the cell edge is at least the
size of the biggest body, so one big body forces big cells on everyone -- the weakness under
polydispersity that the octree and the hierarchical hash grid address (the point of comparing).

Here the grid is rebuilt from scratch when it is needed after a change (``pairs`` or a query), by
a counting sort over the bodies' cells, O(N):

* cell edge ``h`` = max(largest AABB edge, ``cell_size``) plus a rounding margin, enlarged further
  if the grid would exceed ``max_cells_per_body * N`` cells, so memory stays O(N);
* bodies are binned by AABB centre over the bounding box of the centres; two overlapping boxes
  have centres at most ``h`` apart per axis, hence lie in the same or in adjacent cells;
* ``cell_start[c]:cell_start[c+1]`` indexes the bodies of cell ``c`` in the cell-sorted copies
  ``s_lo``, ``s_hi``, ``s_ids`` (contiguous per cell, so the pair loop streams through memory);
* pairs check each occupied cell against itself and its 13 "forward" neighbours (half of the
  26), so every pair is found exactly once without a ``a < b`` filter on ids.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .base import BroadPhaseError, RebuiltOnDemand, collect_pairs, grow_hits, ray_box_enter

# Rounding slack. Binning computes a centre's cell coordinate with an error of at most ~12 unit
# roundoffs of the largest coordinate magnitude M (in world units), so adding 64 machine
# epsilons of M to the cell edge keeps "boxes overlap => cells adjacent" exact. Query and ray
# ranges (which also involve the query's own coordinates and ray arithmetic) get a far larger
# relative pad, 1e-12 of the magnitudes involved, which only ever adds a sliver of cells.
_CELL_MARGIN = 64 * float(np.finfo(np.float64).eps)
_QUERY_MARGIN = 1e-12


@njit(cache=True, inline="always")
def _cell_coord(x, org, inv_h, nc):
    """Clamped cell index of coordinate ``x`` along one axis (clamping is monotone, so safe)."""
    v = np.floor((x - org) * inv_h)
    if v < 0.0:
        return 0
    if v > nc - 1:
        return nc - 1
    return int(v)


@njit(cache=True)
def lc_build(ids, lo, hi, n, min_cell, max_cells_per_body):
    """Bin the first n bodies into a uniform grid by counting sort.

    Reads ids, lo, hi. Returns ``(geom, nc, cell_start, occ, s_ids, s_lo, s_hi)``: ``geom`` =
    [org0, org1, org2, h, M] (grid origin, cell edge, largest coordinate magnitude),
    ``nc`` int64[3] cells per axis, ``cell_start`` int64[ncells + 1], ``occ`` the occupied cell
    indices in increasing order, and the bodies' ids/AABBs in cell order.
    """
    cmin = np.full(3, np.inf)
    cmax = np.full(3, -np.inf)
    maxe = 0.0
    big = 0.0
    for i in range(n):
        for d in range(3):
            c = 0.5 * (lo[i, d] + hi[i, d])
            cmin[d] = min(cmin[d], c)
            cmax[d] = max(cmax[d], c)
            maxe = max(maxe, hi[i, d] - lo[i, d])
            big = max(big, abs(lo[i, d]), abs(hi[i, d]))
    h = max(maxe, min_cell)
    h = h + _CELL_MARGIN * big
    if not (h > 0.0):
        h = 1.0  # all bodies are the same point at the origin: any edge works
    # Cap the number of cells (memory and the cost of the cell-start array stay O(N)).
    max_cells = max(64.0, max_cells_per_body * n)
    while True:
        total = 1.0
        k = 0
        for d in range(3):
            m = np.floor((cmax[d] - cmin[d]) / h) + 1.0
            total *= m
            if m > 1.0:
                k += 1
        if total <= max_cells:
            break
        h *= max((total / max_cells) ** (1.0 / k), 1.0 + 1e-6)
    nc = np.empty(3, dtype=np.int64)
    for d in range(3):
        nc[d] = int(np.floor((cmax[d] - cmin[d]) / h)) + 1
    ncells = nc[0] * nc[1] * nc[2]
    inv_h = 1.0 / h
    # counting sort by cell
    cell_of = np.empty(n, dtype=np.int64)
    cell_start = np.zeros(ncells + 1, dtype=np.int64)
    for i in range(n):
        kx = _cell_coord(0.5 * (lo[i, 0] + hi[i, 0]), cmin[0], inv_h, nc[0])
        ky = _cell_coord(0.5 * (lo[i, 1] + hi[i, 1]), cmin[1], inv_h, nc[1])
        kz = _cell_coord(0.5 * (lo[i, 2] + hi[i, 2]), cmin[2], inv_h, nc[2])
        c = (kx * nc[1] + ky) * nc[2] + kz
        cell_of[i] = c
        cell_start[c + 1] += 1
    n_occ = 0
    for c in range(ncells):
        if cell_start[c + 1] > 0:
            n_occ += 1
        cell_start[c + 1] += cell_start[c]
    occ = np.empty(n_occ, dtype=np.int64)
    k = 0
    for c in range(ncells):
        if cell_start[c + 1] > cell_start[c]:
            occ[k] = c
            k += 1
    fill = cell_start[:-1].copy()
    s_ids = np.empty(n, dtype=np.int64)
    s_lo = np.empty((n, 3), dtype=np.float64)
    s_hi = np.empty((n, 3), dtype=np.float64)
    for i in range(n):
        p = fill[cell_of[i]]
        fill[cell_of[i]] = p + 1
        s_ids[p] = ids[i]
        for d in range(3):
            s_lo[p, d] = lo[i, d]
            s_hi[p, d] = hi[i, d]
    geom = np.array([cmin[0], cmin[1], cmin[2], h, big])
    return geom, nc, cell_start, occ, s_ids, s_lo, s_hi


@njit(cache=True)
def lc_pairs(nc, cell_start, occ, s_ids, s_lo, s_hi, out):
    """Every overlapping pair (ids, a < b): each occupied cell vs itself and 13 forward neighbours.

    Reads the grid built by :func:`lc_build`; writes pairs into ``out`` and returns their number.
    If that exceeds ``out.shape[0] - 2`` the buffer overflowed (contents invalid) and the caller
    retries with a buffer of that size: rows are written unconditionally and kept or not
    (branch-free, about twice as fast as branching on the mostly-false overlap test). The 13
    offsets are those lexicographically greater than (0, 0, 0), so of two neighbouring cells
    exactly one visits the other.
    """
    rows = out.shape[0]
    m = 0
    over = 0
    nx, ny, nz = nc[0], nc[1], nc[2]
    for t in range(occ.shape[0]):
        c = occ[t]
        cx = c // (ny * nz)
        cy = (c // nz) % ny
        cz = c % nz
        a0 = cell_start[c]
        a1 = cell_start[c + 1]
        for dx in range(0, 2):
            x = cx + dx
            if x >= nx:
                continue
            for dy in range(-1, 2):
                if dx == 0 and dy < 0:
                    continue
                y = cy + dy
                if y < 0 or y >= ny:
                    continue
                for dz in range(-1, 2):
                    if dx == 0 and dy == 0 and dz < 0:
                        continue
                    z = cz + dz
                    if z < 0 or z >= nz:
                        continue
                    same = dx == 0 and dy == 0 and dz == 0
                    nb = (x * ny + y) * nz + z
                    b0 = cell_start[nb]
                    b1 = cell_start[nb + 1]
                    if b0 == b1:
                        continue
                    for p in range(a0, a1):
                        l0, l1, l2 = s_lo[p, 0], s_lo[p, 1], s_lo[p, 2]
                        h0, h1, h2 = s_hi[p, 0], s_hi[p, 1], s_hi[p, 2]
                        ip = s_ids[p]
                        q0 = p + 1 if same else b0
                        for q in range(q0, b1):
                            ok = ((s_lo[q, 0] <= h0) & (l0 <= s_hi[q, 0]) & (s_lo[q, 1] <= h1)
                                  & (l1 <= s_hi[q, 1]) & (s_lo[q, 2] <= h2) & (l2 <= s_hi[q, 2]))
                            iq = s_ids[q]
                            out[m, 0] = min(ip, iq)
                            out[m, 1] = max(ip, iq)
                            m += ok
                            if m == rows - 1:
                                over += m
                                m = 0
    return over + m


@njit(cache=True)
def lc_query_box(geom, nc, cell_start, s_ids, s_lo, s_hi, qlo, qhi):
    """Ids of bodies overlapping [qlo, qhi]: scan the cells the query box, grown by h/2, touches.

    A body overlapping the query has its centre within h/2 of it (its half-edge is <= h/2).
    """
    h = geom[3]
    inv_h = 1.0 / h
    pad = 0.5 * h + _QUERY_MARGIN * (geom[4] + max(np.abs(qlo).max(), np.abs(qhi).max()))
    k0 = np.empty(3, dtype=np.int64)
    k1 = np.empty(3, dtype=np.int64)
    for d in range(3):
        k0[d] = _cell_coord(qlo[d] - pad, geom[d], inv_h, nc[d])
        k1[d] = _cell_coord(qhi[d] + pad, geom[d], inv_h, nc[d])
    out = np.empty(16, dtype=np.int64)
    m = 0
    for x in range(k0[0], k1[0] + 1):
        for y in range(k0[1], k1[1] + 1):
            for z in range(k0[2], k1[2] + 1):
                c = (x * nc[1] + y) * nc[2] + z
                for p in range(cell_start[c], cell_start[c + 1]):
                    if not (s_lo[p, 0] > qhi[0] or qlo[0] > s_hi[p, 0]
                            or s_lo[p, 1] > qhi[1] or qlo[1] > s_hi[p, 1]
                            or s_lo[p, 2] > qhi[2] or qlo[2] > s_hi[p, 2]):
                        if m == out.shape[0]:
                            new = np.empty(2 * m, dtype=np.int64)
                            new[:m] = out
                            out = new
                        out[m] = s_ids[p]
                        m += 1
    return out[:m].copy()


@njit(cache=True)
def lc_raycast(geom, nc, cell_start, s_ids, s_lo, s_hi, o, d, t_max):
    """(ids, t_enter) of bodies the ray segment enters, visiting each candidate cell once.

    Walks the cell layers along the axis ``a`` of largest ``|d|``. Layer ``k`` holds bodies
    whose boxes lie within the layer widened by h/2, so the ray can only hit them while its
    ``a``-coordinate is in that slab; over that t-interval the other two coordinates move by at
    most 2h each, so each layer scans a small block of cells. All ranges are padded by a
    rounding slack; the exact test is :func:`ray_box_enter` (the same as brute force).
    """
    h = geom[3]
    inv_h = 1.0 / h
    inv0 = 1.0 / d[0] if d[0] != 0.0 else np.inf
    inv1 = 1.0 / d[1] if d[1] != 0.0 else np.inf
    inv2 = 1.0 / d[2] if d[2] != 0.0 else np.inf
    a = 0
    if abs(d[1]) > abs(d[a]):
        a = 1
    if abs(d[2]) > abs(d[a]):
        a = 2
    b = (a + 1) % 3
    c = (a + 2) % 3
    # Clip the segment to the padded grid box (grid cells widened by h/2: every body lies in it).
    pad = 0.5 * h + _QUERY_MARGIN * (geom[4] + np.abs(o).max())
    t0 = 0.0
    t1 = t_max
    for ax in range(3):
        glo = geom[ax] - pad
        ghi = geom[ax] + nc[ax] * h + pad
        if d[ax] == 0.0:
            if o[ax] < glo or o[ax] > ghi:
                return np.empty(0, np.int64), np.empty(0, np.float64)
            continue
        ta = (glo - o[ax]) / d[ax]
        tb = (ghi - o[ax]) / d[ax]
        if ta > tb:
            ta, tb = tb, ta
        t0 = max(t0, ta)
        t1 = min(t1, tb)
    if t0 > t1:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    xa0 = o[a] + t0 * d[a]
    xa1 = o[a] + t1 * d[a]
    ka0 = _cell_coord(min(xa0, xa1) - pad, geom[a], inv_h, nc[a])
    ka1 = _cell_coord(max(xa0, xa1) + pad, geom[a], inv_h, nc[a])
    out = np.empty(16, dtype=np.int64)
    tt = np.empty(16, dtype=np.float64)
    m = 0
    idx = np.empty(3, dtype=np.int64)
    for k in range(ka0, ka1 + 1):
        # t-interval in which the ray's a-coordinate is within the widened layer k
        s0 = geom[a] + k * h - pad
        s1 = geom[a] + (k + 1) * h + pad
        ta = (s0 - o[a]) / d[a]
        tb = (s1 - o[a]) / d[a]
        if ta > tb:
            ta, tb = tb, ta
        ta = max(ta, t0)
        tb = min(tb, t1)
        if ta > tb:
            continue
        pb0 = o[b] + ta * d[b]
        pb1 = o[b] + tb * d[b]
        pc0 = o[c] + ta * d[c]
        pc1 = o[c] + tb * d[c]
        kb0 = _cell_coord(min(pb0, pb1) - pad, geom[b], inv_h, nc[b])
        kb1 = _cell_coord(max(pb0, pb1) + pad, geom[b], inv_h, nc[b])
        kc0 = _cell_coord(min(pc0, pc1) - pad, geom[c], inv_h, nc[c])
        kc1 = _cell_coord(max(pc0, pc1) + pad, geom[c], inv_h, nc[c])
        idx[a] = k
        for kb in range(kb0, kb1 + 1):
            idx[b] = kb
            for kc in range(kc0, kc1 + 1):
                idx[c] = kc
                cell = (idx[0] * nc[1] + idx[1]) * nc[2] + idx[2]
                for p in range(cell_start[cell], cell_start[cell + 1]):
                    t = ray_box_enter(o[0], o[1], o[2], inv0, inv1, inv2, s_lo[p], s_hi[p], t_max)
                    if t >= 0.0:
                        if m == out.shape[0]:
                            out, tt = grow_hits(out, tt)
                        out[m] = s_ids[p]
                        tt[m] = t
                        m += 1
    return out[:m].copy(), tt[:m].copy()


class LinkedCells(RebuiltOnDemand):
    """Uniform grid with cell edge = largest AABB edge, rebuilt by counting sort when needed.

    Parameters
    ----------
    cell_size : float, optional
        Lower bound for the cell edge (waLBerla's LC takes a fixed cell size). The edge actually
        used is never smaller than the largest AABB edge, so results stay exact.
    max_cells_per_body : float
        Cap on the number of cells as a multiple of the body count; the edge is enlarged until
        the grid fits, so memory stays O(N) even for a few far-apart bodies.

    Complexity: add/update/remove O(k) (they only mark the grid stale); the first ``pairs`` or
    query after a change rebuilds the grid in O(N + cells); pairs then cost O(N + candidates),
    which grows like N * (largest / typical body size)^3 under polydispersity.
    """

    def __init__(self, cell_size: float | None = None, max_cells_per_body: float = 8.0):
        super().__init__()
        cs = 0.0 if cell_size is None else float(cell_size)
        if not (np.isfinite(cs) and cs >= 0.0):
            raise BroadPhaseError(f"cell_size must be finite and >= 0 (or None), got {cell_size!r}")
        mc = float(max_cells_per_body)
        if not (np.isfinite(mc) and mc >= 1.0):
            raise BroadPhaseError(f"max_cells_per_body must be >= 1, got {max_cells_per_body!r}")
        self.cell_size = cs
        self.max_cells_per_body = mc
        self._last_m = 0  # pair count of the last call, to size the output buffer

    def _build(self):
        """The grid: (geom, nc, cell_start, occ, s_ids, s_lo, s_hi), see :func:`lc_build`."""
        b = self.bodies
        return lc_build(b.ids, b.lo, b.hi, b.n, self.cell_size, self.max_cells_per_body)

    # ---- results ----------------------------------------------------------------------------
    def _pairs(self):
        if self.bodies.n < 2:
            return np.empty((0, 2), dtype=np.int64)
        _, nc, cell_start, occ, s_ids, s_lo, s_hi = self._ensure()
        pairs, self._last_m = collect_pairs(lc_pairs, (nc, cell_start, occ, s_ids, s_lo, s_hi),
                                            max(2 * self.bodies.n, self._last_m))
        return pairs

    def _query_box(self, lo, hi):
        geom, nc, cell_start, _, s_ids, s_lo, s_hi = self._ensure()
        return lc_query_box(geom, nc, cell_start, s_ids, s_lo, s_hi, lo, hi)

    def _raycast(self, o, d, t_max):
        geom, nc, cell_start, _, s_ids, s_lo, s_hi = self._ensure()
        return lc_raycast(geom, nc, cell_start, s_ids, s_lo, s_hi, o, d, t_max)

    @property
    def cell_edge(self) -> float:
        """Cell edge of the current grid (builds it if stale; nan when empty)."""
        if self.bodies.n == 0:
            return float("nan")
        return float(self._ensure()[0][3])

    def _nbytes(self):
        if self._built is None:
            return 0
        return sum(a.nbytes for a in self._built)
