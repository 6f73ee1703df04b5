"""Loose octree over the bodies' bounding box, rebuilt lazily, as flat node arrays.

The Koch (2020) thesis implements an octree for waLBerla to cope with *inhomogeneous* particle
distributions: cells split into eight octants once they hold more than a threshold of particles,
so dense regions get small cells and empty regions stay coarse; particles are stored by position
in the leaves, with a maximum depth keeping leaf cells no smaller than the biggest particle.
This version keeps the adaptive splitting but lets each body stop at the level that suits its own
size (a *loose* octree, Ulrich 2000), so one big body does not force big cells on small ones:

* a node covers a cubic cell; it is split (if it holds more than ``leaf_capacity`` bodies and is
  above ``max_depth``) by the centre planes. A body moves down into the octant containing its AABB
  centre unless its largest edge exceeds the child's cell edge; then it stays in the node (with
  loose factor 2 the child's cell grown by half an edge on every side would still contain it);
* the bodies of every subtree are contiguous in the node order (pre-order ranges ``own_start :
  own_end`` for the node's own bodies, ``own_start : sub_end`` for its whole subtree), and each
  node stores the tight bounding box of its subtree. Pruning uses only these tight boxes, so the
  results are exact whatever the cell geometry (and rounding) did during the split;
* pairs: every body traverses the tree from the root, visiting nodes whose tight box overlaps its
  AABB, and tests the own bodies stored *after* it in the order; subtrees that end before it are
  skipped by index, so each pair is tested once and the traversal work is roughly halved;
* queries and raycasts traverse the nodes whose tight box the query box / ray segment meets.

The tree is rebuilt from scratch (O(N depth)) by the first ``pairs`` or query after any change;
between changes it is reused. Node arrays: ``ni`` int64[m, 6] = (first child, child count,
own_start, own_end, sub_end, depth) -- children of a node are consecutive --, ``nb`` float64[m, 6]
= tight (lo, hi) of the subtree; bodies' ids/AABBs are copied into tree order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .base import BroadPhaseError, RebuiltOnDemand, collect_pairs, grow_hits, ray_box_enter

CHILD, NCHILD, OWN0, OWN1, SUB1, DEPTH = range(6)


@njit(cache=True)
def _grow_rows(a):
    """Copy of the 2-D array ``a`` with twice the rows."""
    new = np.empty((2 * a.shape[0], a.shape[1]), dtype=a.dtype)
    new[: a.shape[0]] = a
    return new


@njit(cache=True)
def oct_build(ids, lo, hi, n, leaf_capacity, max_depth):
    """Build the loose octree over the first n bodies (n >= 1).

    Reads ids, lo, hi. Returns ``(ni, nb, s_ids, s_lo, s_hi, depth)``: node ints and tight
    bounds (see the module docstring), the bodies' ids/AABBs in tree order, and the tree depth.
    Nodes are created breadth first, so children always have larger indices than their parent.
    """
    cen = np.empty((n, 3))
    ext = np.empty(n)
    cmin = np.full(3, np.inf)
    cmax = np.full(3, -np.inf)
    for i in range(n):
        e = 0.0
        for d in range(3):
            c = 0.5 * (lo[i, d] + hi[i, d])
            cen[i, d] = c
            cmin[d] = min(cmin[d], c)
            cmax[d] = max(cmax[d], c)
            e = max(e, hi[i, d] - lo[i, d])
        ext[i] = e
    side = max(cmax[0] - cmin[0], cmax[1] - cmin[1], cmax[2] - cmin[2])
    if not (side > 0.0):
        side = 1.0  # all centres coincide: splitting cannot separate them anyway
    cap = 64
    while cap < 4 * n // max(leaf_capacity, 1) + 64:
        cap *= 2
    ni = np.empty((cap, 6), dtype=np.int64)
    cell = np.empty((cap, 6))  # cubic cell (lo, hi) per node, used only while splitting
    ni[0, CHILD] = -1
    ni[0, NCHILD] = 0
    ni[0, OWN0] = 0
    ni[0, OWN1] = n
    ni[0, SUB1] = n
    ni[0, DEPTH] = 0
    for d in range(3):
        cell[0, d] = cmin[d]
        cell[0, 3 + d] = cmin[d] + side
    perm = np.arange(n)
    code = np.empty(n, dtype=np.int64)
    tmp = np.empty(n, dtype=np.int64)
    counts = np.empty(9, dtype=np.int64)
    offs = np.empty(9, dtype=np.int64)
    mid = np.empty(3)
    m = 1
    depth_max = 0
    i = 0
    while i < m:
        s = ni[i, OWN0]
        e = ni[i, SUB1]
        depth = ni[i, DEPTH]
        depth_max = max(depth_max, depth)
        i_node = i
        i += 1
        if e - s <= leaf_capacity or depth >= max_depth:
            continue
        degenerate = False
        half = 0.0
        for d in range(3):
            mid[d] = 0.5 * (cell[i_node, d] + cell[i_node, 3 + d])
            half = max(half, 0.5 * (cell[i_node, 3 + d] - cell[i_node, d]))
            if not (cell[i_node, d] < mid[d] < cell[i_node, 3 + d]):
                degenerate = True  # cell edge down to float resolution
        if degenerate:
            continue
        counts[:] = 0
        for p in range(s, e):
            b = perm[p]
            if ext[b] > half:
                cd = 8
            else:
                cd = 0
                for d in range(3):
                    if cen[b, d] >= mid[d]:
                        cd |= 1 << d
            code[p] = cd
            counts[cd] += 1
        if counts[8] == e - s:
            continue  # every body is too big for the children: stay a leaf
        offs[8] = s
        offs[0] = s + counts[8]
        for k in range(1, 8):
            offs[k] = offs[k - 1] + counts[k - 1]
        for p in range(s, e):
            cd = code[p]
            tmp[offs[cd]] = perm[p]
            offs[cd] += 1
        for p in range(s, e):
            perm[p] = tmp[p]
        ni[i_node, OWN1] = s + counts[8]
        ni[i_node, CHILD] = m
        nchild = 0
        start = s + counts[8]
        for k in range(8):
            if counts[k] == 0:
                continue
            if m == ni.shape[0]:
                ni = _grow_rows(ni)
                cell = _grow_rows(cell)
            ni[m, CHILD] = -1
            ni[m, NCHILD] = 0
            ni[m, OWN0] = start
            ni[m, OWN1] = start + counts[k]
            ni[m, SUB1] = start + counts[k]
            ni[m, DEPTH] = depth + 1
            for d in range(3):
                if (k >> d) & 1:
                    cell[m, d] = mid[d]
                    cell[m, 3 + d] = cell[i_node, 3 + d]
                else:
                    cell[m, d] = cell[i_node, d]
                    cell[m, 3 + d] = mid[d]
            start += counts[k]
            m += 1
            nchild += 1
        ni[i_node, NCHILD] = nchild
    # bodies in tree order
    s_ids = np.empty(n, dtype=np.int64)
    s_lo = np.empty((n, 3))
    s_hi = np.empty((n, 3))
    for p in range(n):
        b = perm[p]
        s_ids[p] = ids[b]
        for d in range(3):
            s_lo[p, d] = lo[b, d]
            s_hi[p, d] = hi[b, d]
    # tight subtree bounds, children before parents (reverse creation order)
    nb = np.empty((m, 6))
    for j in range(m - 1, -1, -1):
        for d in range(3):
            nb[j, d] = np.inf
            nb[j, 3 + d] = -np.inf
        for p in range(ni[j, OWN0], ni[j, OWN1]):
            for d in range(3):
                nb[j, d] = min(nb[j, d], s_lo[p, d])
                nb[j, 3 + d] = max(nb[j, 3 + d], s_hi[p, d])
        c0 = ni[j, CHILD]
        for c in range(c0, c0 + ni[j, NCHILD]):
            for d in range(3):
                nb[j, d] = min(nb[j, d], nb[c, d])
                nb[j, 3 + d] = max(nb[j, 3 + d], nb[c, 3 + d])
    return ni[:m].copy(), nb, s_ids, s_lo, s_hi, depth_max


@njit(cache=True)
def oct_pairs(ni, nb, s_ids, s_lo, s_hi, depth, out):
    """Every overlapping pair (ids, a < b): each body traverses the tree, testing later bodies.

    Reads the arrays built by :func:`oct_build`. A body at tree position p skips every subtree
    whose positions end at or before p, and tests only own bodies at positions > p. Writes pairs
    into ``out`` and returns their number; if that exceeds ``out.shape[0] - 2`` the buffer
    overflowed (contents invalid) and the caller retries with a buffer of that size. Tests,
    stores and stack pushes are branch-free (written, then kept or not): several times faster
    than branching on mostly unpredictable tests.
    """
    n = s_ids.shape[0]
    rows = out.shape[0]
    m = 0
    over = 0
    stack = np.empty(8 * (depth + 2), dtype=np.int64)
    for p in range(n):
        l0, l1, l2 = s_lo[p, 0], s_lo[p, 1], s_lo[p, 2]
        h0, h1, h2 = s_hi[p, 0], s_hi[p, 1], s_hi[p, 2]
        ip = s_ids[p]
        stack[0] = 0
        sp = 1
        while sp > 0:
            sp -= 1
            nd = stack[sp]
            for q in range(max(ni[nd, OWN0], p + 1), ni[nd, OWN1]):
                ok = ((s_lo[q, 0] <= h0) & (l0 <= s_hi[q, 0]) & (s_lo[q, 1] <= h1)
                      & (l1 <= s_hi[q, 1]) & (s_lo[q, 2] <= h2) & (l2 <= s_hi[q, 2]))
                iq = s_ids[q]
                out[m, 0] = min(ip, iq)
                out[m, 1] = max(ip, iq)
                m += ok
                if m == rows - 1:
                    over += m
                    m = 0
            c0 = ni[nd, CHILD]
            for c in range(c0, c0 + ni[nd, NCHILD]):
                ok = ((ni[c, SUB1] > p + 1) & (nb[c, 0] <= h0) & (l0 <= nb[c, 3])
                      & (nb[c, 1] <= h1) & (l1 <= nb[c, 4]) & (nb[c, 2] <= h2) & (l2 <= nb[c, 5]))
                stack[sp] = c
                sp += ok
    return over + m


@njit(cache=True)
def oct_query_box(ni, nb, s_ids, s_lo, s_hi, depth, qlo, qhi):
    """Ids of bodies overlapping [qlo, qhi]: traverse nodes whose tight box overlaps the query."""
    out = np.empty(16, dtype=np.int64)
    m = 0
    stack = np.empty(8 * (depth + 2), dtype=np.int64)
    stack[0] = 0
    sp = 1
    while sp > 0:
        sp -= 1
        nd = stack[sp]
        if (nb[nd, 0] > qhi[0] or qlo[0] > nb[nd, 3] or nb[nd, 1] > qhi[1]
                or qlo[1] > nb[nd, 4] or nb[nd, 2] > qhi[2] or qlo[2] > nb[nd, 5]):
            continue
        for p in range(ni[nd, OWN0], ni[nd, OWN1]):
            if not (s_lo[p, 0] > qhi[0] or qlo[0] > s_hi[p, 0] or s_lo[p, 1] > qhi[1]
                    or qlo[1] > s_hi[p, 1] or s_lo[p, 2] > qhi[2] or qlo[2] > s_hi[p, 2]):
                if m == out.shape[0]:
                    new = np.empty(2 * m, dtype=np.int64)
                    new[:m] = out
                    out = new
                out[m] = s_ids[p]
                m += 1
        c0 = ni[nd, CHILD]
        for c in range(c0, c0 + ni[nd, NCHILD]):
            stack[sp] = c
            sp += 1
    return out[:m].copy()


@njit(cache=True)
def oct_raycast(ni, nb, s_ids, s_lo, s_hi, depth, o, d, t_max):
    """(ids, t_enter) of bodies the ray segment enters: visit only nodes whose tight box it enters.

    A body's box lies inside its nodes' boxes and the slab test is monotone in the box bounds,
    so a body the ray enters is never pruned (exactly the brute-force test, same t).
    """
    inv0 = 1.0 / d[0] if d[0] != 0.0 else np.inf
    inv1 = 1.0 / d[1] if d[1] != 0.0 else np.inf
    inv2 = 1.0 / d[2] if d[2] != 0.0 else np.inf
    out = np.empty(16, dtype=np.int64)
    tt = np.empty(16, dtype=np.float64)
    m = 0
    stack = np.empty(8 * (depth + 2), dtype=np.int64)
    stack[0] = 0
    sp = 1
    while sp > 0:
        sp -= 1
        nd = stack[sp]
        if ray_box_enter(o[0], o[1], o[2], inv0, inv1, inv2, nb[nd, :3], nb[nd, 3:], t_max) < 0.0:
            continue
        for p in range(ni[nd, OWN0], ni[nd, OWN1]):
            t = ray_box_enter(o[0], o[1], o[2], inv0, inv1, inv2, s_lo[p], s_hi[p], t_max)
            if t >= 0.0:
                if m == out.shape[0]:
                    out, tt = grow_hits(out, tt)
                out[m] = s_ids[p]
                tt[m] = t
                m += 1
        c0 = ni[nd, CHILD]
        for c in range(c0, c0 + ni[nd, NCHILD]):
            stack[sp] = c
            sp += 1
    return out[:m].copy(), tt[:m].copy()


class Octree(RebuiltOnDemand):
    """Loose octree with adaptive splitting, rebuilt lazily after changes.

    Parameters
    ----------
    leaf_capacity : int
        A node holding more bodies than this is split (the thesis' "max IDs per node"); bodies too
        big for the children stay in the node regardless.
    max_depth : int
        No node is split below this depth (bounds the tree for coincident bodies).

    Complexity: add/update/remove O(k) (they mark the tree stale); the first ``pairs`` or query
    after a change rebuilds it in O(N depth); pairs then cost about O(N (depth + overlapping
    nodes) + candidates).
    """

    def __init__(self, leaf_capacity: int = 8, max_depth: int = 24):
        super().__init__()
        if int(leaf_capacity) < 1:
            raise BroadPhaseError(f"leaf_capacity must be >= 1, got {leaf_capacity!r}")
        if not 0 <= int(max_depth) <= 60:
            raise BroadPhaseError(f"max_depth must be in [0, 60], got {max_depth!r}")
        self.leaf_capacity = int(leaf_capacity)
        self.max_depth = int(max_depth)
        self._last_m = 0  # pair count of the last call, to size the output buffer

    def _build(self):
        """The tree: (ni, nb, s_ids, s_lo, s_hi, depth), see :func:`oct_build`."""
        b = self.bodies
        return oct_build(b.ids, b.lo, b.hi, b.n, self.leaf_capacity, self.max_depth)

    # ---- results ----------------------------------------------------------------------------
    def _pairs(self):
        if self.bodies.n < 2:
            return np.empty((0, 2), dtype=np.int64)
        tree = self._ensure()
        pairs, self._last_m = collect_pairs(oct_pairs, tuple(tree),
                                            max(2 * self.bodies.n, self._last_m))
        return pairs

    def _query_box(self, lo, hi):
        return oct_query_box(*self._ensure(), lo, hi)

    def _raycast(self, o, d, t_max):
        return oct_raycast(*self._ensure(), o, d, t_max)

    @property
    def n_nodes(self) -> int:
        """Number of nodes of the current tree (builds it if stale; 0 when empty)."""
        return 0 if self.bodies.n == 0 else int(self._ensure()[0].shape[0])

    def _nbytes(self):
        if self._built is None:
            return 0
        return sum(a.nbytes for a in self._built[:5])
