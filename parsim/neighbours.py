"""Verlet neighbour list on top of the hierarchical hash grid, with per-contact spring history.

At a *rebuild* every stored copy (owned bodies and shadows) gets its AABB enlarged by half the
skin; the hash grid is updated incrementally (bodies that left are removed, new ones added, the
others re-hashed only if their cell or grid changed, thesis Algorithm 2) and its overlapping
pairs, plus body-plane pairs, become the candidate list. Candidates stay valid until some body has
moved (translation + bounding radius x rotation angle) more than half the skin; with ``skin = 0``
the list is rebuilt every step, i.e. plain per-step detection.

A candidate is kept only if at least one of its bodies is owned (its force is needed here) and
not both are fixed. The decision uses the pair's canonical frame (see :mod:`parsim.contacts`), so
the two copies of a pair across a periodic seam or a rank border are both kept or both
dropped. Pairs are oriented A = lower uid (planes always B) and listed in key order (lower key,
then higher) or in slot order, whichever walks memory better (:func:`_key_order_is_local`); the
order changes no result. The tangential springs of pairs that persist across a rebuild are
carried over by merging the old and new lists sorted by their history key (uid A, uid B,
relative unwrapped image; :func:`history_keys`), contact point by contact point.

Results do not depend on when rebuilds happen: a spring is reset whenever its contact opens, and
non-touching candidates contribute exact zeros.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .bodies import FIXED, GLOBAL, NO_SHIFT, REPLICATED, SHADOW
from .broadphase import HierarchicalHashGrid
from .broadphase.prefetch import prefetch
from .contacts import AHEAD, MAX_POINTS, pair_rows, relative_shift
from .orders import key_ranks, rank_order
from .shapes import PLANE, SPHERE, compute_aabbs


@njit(cache=True)
def _grid_boxes(lo, hi, n, span, blo, bhi):
    """The boxes the hash grid sees: each AABB grown by a hair of its own, 1e-9 x (1 + its
    largest corner coordinate + ``span``, the longest periodic box edge), far above the
    rounding of the canonical overlap test (:func:`_filter_pairs`), which adds at most a
    periodic shift to coordinates of that size. Per body: until 2026-11-29 one hair for all,
    from the largest centre coordinate, so a single body far out (1e6 m in unbounded space)
    grew every box by a millimetre and made every pair of millimetre grains a candidate."""
    for i in range(n):
        m = 0.0
        for d in range(3):
            m = max(m, abs(lo[i, d]), abs(hi[i, d]))
        e = 1e-9 * (1.0 + m + span)
        for d in range(3):
            blo[i, d] = lo[i, d] - e
            bhi[i, d] = hi[i, d] + e


@njit(cache=True)
def _filter_pairs(sa, sb, uid, flags, image, shape, lo, hi, box, position, params, margin,
                  keep_a, keep_b):
    """Orient (A = lower uid) and keep candidate pairs whose AABBs overlap in the canonical
    frame and whose force is needed (one body owned, not both fixed). Returns the count.

    Two spheres are kept only if their balls grown by ``margin`` (the AABBs' margin) overlap:
    their centres are within ``ra + rb + 2 margin``. Each body moves less than ``margin``
    before the next rebuild, so a pair this drops cannot touch before then (the same argument
    as for the AABBs, with the true shape); the cubes around the balls hold ~1.9x as many
    pairs in a random packing, and every candidate costs a test in every step.

    The candidates come in the grid's order, their rows at random places: the loop asks for
    the rows of the pair :data:`AHEAD` places on (125,000-sphere gas, 93,000 candidates: ~2.2
    -> ~1.3 ms per rebuild)."""
    k = 0
    n = sa.shape[0]
    xl, xh, xs, rs = lo.reshape(-1), hi.reshape(-1), position.reshape(-1), params.reshape(-1)
    for p in range(n):
        if p + AHEAD < n:
            fa, fb = sa[p + AHEAD], sb[p + AHEAD]
            prefetch(uid, fa)
            prefetch(uid, fb)
            prefetch(flags, fa)
            prefetch(flags, fb)
            prefetch(xl, 3 * fa)
            prefetch(xl, 3 * fb)
            prefetch(xh, 3 * fa)
            prefetch(xh, 3 * fb)
            prefetch(xs, 3 * fa)
            prefetch(xs, 3 * fb)
            prefetch(rs, 3 * fa)
            prefetch(rs, 3 * fb)
        a = sa[p]
        b = sb[p]
        if uid[a] > uid[b]:
            a, b = b, a
        elif uid[a] == uid[b]:
            continue
        if (flags[a] & SHADOW) and (flags[b] & SHADOW):
            continue
        if (flags[a] & FIXED) and (flags[b] & FIXED):
            continue
        # a global body (any copy) meets a shadow: the shadow's owner computes this contact
        if ((flags[a] & GLOBAL) and (flags[b] & SHADOW) and not (flags[b] & GLOBAL)) or (
                (flags[b] & GLOBAL) and (flags[a] & SHADOW) and not (flags[a] & GLOBAL)):
            continue
        sx, sy, sz = relative_shift(image[a], image[b], box[0], box[1], box[2])
        if (lo[a, 0] > hi[b, 0] + sx or lo[b, 0] + sx > hi[a, 0]
                or lo[a, 1] > hi[b, 1] + sy or lo[b, 1] + sy > hi[a, 1]
                or lo[a, 2] > hi[b, 2] + sz or lo[b, 2] + sz > hi[a, 2]):
            continue
        if shape[a] == SPHERE and shape[b] == SPHERE:
            dx = position[a, 0] - (position[b, 0] + sx)
            dy = position[a, 1] - (position[b, 1] + sy)
            dz = position[a, 2] - (position[b, 2] + sz)
            reach = params[a, 0] + params[b, 0] + 2.0 * margin
            # a relative hair of slack: rounding never drops a pair on the limit
            if dx * dx + dy * dy + dz * dz > reach * reach * (1.0 + 1e-12):
                continue
        keep_a[k] = a
        keep_b[k] = b
        k += 1
    return k


@njit(cache=True)
def _pair_gaps(pa, pb, shape, params, ref_position, image, box, gap):
    """Per candidate pair, the gap between the two bodies at their reference poses (those from
    which the step's displacement ``moved`` is measured): centre distance minus the radii for
    two spheres, distance from the plane minus the radius for a sphere and a plane, -inf for
    other pairs. A pair whose gap exceeds twice the largest displacement of any body cannot
    touch yet (see :func:`parsim.contacts.sphere_pairs_in_play`). Asks for the rows of the
    pair :data:`AHEAD` places on, as :func:`_filter_pairs`."""
    n = pa.shape[0]
    xs, rs = ref_position.reshape(-1), params.reshape(-1)
    for p in range(n):
        if p + AHEAD < n:
            fa, fb = pa[p + AHEAD], pb[p + AHEAD]
            prefetch(xs, 3 * fa)
            prefetch(xs, 3 * fb)
            prefetch(rs, 3 * fa)
            prefetch(rs, 3 * fb)
        a = pa[p]
        b = pb[p]
        if shape[a] != SPHERE:
            gap[p] = -np.inf
        elif shape[b] == PLANE:
            gap[p] = ((ref_position[a, 0] - ref_position[b, 0]) * params[b, 0]
                      + (ref_position[a, 1] - ref_position[b, 1]) * params[b, 1]
                      + (ref_position[a, 2] - ref_position[b, 2]) * params[b, 2]) - params[a, 0]
        elif shape[b] == SPHERE:
            sx, sy, sz = relative_shift(image[a], image[b], box[0], box[1], box[2])
            dx = ref_position[a, 0] - (ref_position[b, 0] + sx)
            dy = ref_position[a, 1] - (ref_position[b, 1] + sy)
            dz = ref_position[a, 2] - (ref_position[b, 2] + sz)
            gap[p] = math.sqrt(dx * dx + dy * dy + dz * dz) - (params[a, 0] + params[b, 0])
        else:
            gap[p] = -np.inf


@njit(cache=True)
def _carry_history(old_u, old_v, old_r, old_hist, old_shear, old_touch, new_u, new_v, new_r,
                   new_hist, new_nh, shear, touching):
    """Copy the springs of pairs present in both lists, each sorted by its history key
    (uid A, uid B, relative unwrapped image)."""
    i = 0
    n_old = old_u.shape[0]
    for p in range(new_u.shape[0]):
        u = new_u[p]
        v = new_v[p]
        r = new_r[p]
        while i < n_old and (old_u[i] < u or (old_u[i] == u and (
                old_v[i] < v or (old_v[i] == v and old_r[i] < r)))):
            i += 1
        if i < n_old and old_u[i] == u and old_v[i] == v and old_r[i] == r:
            h0 = old_hist[i]
            h1 = new_hist[p]
            for c in range(new_nh[p]):
                touching[h1 + c] = old_touch[h0 + c]
                shear[h1 + c, 0] = old_shear[h0 + c, 0]
                shear[h1 + c, 1] = old_shear[h0 + c, 1]
                shear[h1 + c, 2] = old_shear[h0 + c, 2]


def history_keys(st, pa, pb):
    """(uid A, uid B, relative unwrapped image) of pairs: the identity of a contact, unchanged
    when a body is wrapped across a periodic face or its copy comes from another image."""
    hu = np.empty(pa.size, dtype=np.int64)
    hv = np.empty(pa.size, dtype=np.int64)
    hr = np.empty(pa.size, dtype=np.int64)
    _history_keys(pa, pb, st.uid, st.image, st.wraps, hu, hv, hr)
    return hu, hv, hr


@njit(cache=True)
def _history_keys(pa, pb, uid, image, wraps, hu, hv, hr):
    """:func:`history_keys` in one pass (as numpy expressions it took 2.2 ms of a 14 ms rebuild
    of the demo, 2026-11-28). The relative image per axis is the difference of the image codes'
    digits plus that of the wraps; the three are packed with an offset of 2**20 each."""
    off = np.int64(1) << 20
    for p in range(pa.shape[0]):
        a = pa[p]
        b = pb[p]
        ia = np.int64(image[a])
        ib = np.int64(image[b])
        r0 = ib % 3 - ia % 3 + (np.int64(wraps[b, 0]) - np.int64(wraps[a, 0]))
        r1 = (ib // 3) % 3 - (ia // 3) % 3 + (np.int64(wraps[b, 1]) - np.int64(wraps[a, 1]))
        r2 = ib // 9 - ia // 9 + (np.int64(wraps[b, 2]) - np.int64(wraps[a, 2]))
        hu[p] = uid[a]
        hv[p] = uid[b]
        hr[p] = ((r0 + off) << 42) | ((r1 + off) << 21) | (r2 + off)


#: one contact's spring history as a record (what migrates with a body)
HISTORY = np.dtype([("u", np.int64), ("v", np.int64), ("r", np.int64), ("nh", np.int64),
                    ("shear", np.float64, (MAX_POINTS, 3)), ("touching", np.bool_, (MAX_POINTS,))])


class NeighbourList:
    """Candidate pairs, their springs and the canonical per-body summation order of one rank."""

    def __init__(self, skin: float, broadphase=None):
        self.skin = float(skin)
        self.bp = broadphase if broadphase is not None else HierarchicalHashGrid()
        empty_i = np.empty(0, dtype=np.int64)
        self.pa = self.pb = empty_i                    # slots of the pair's bodies
        self.key_a = self.key_b = empty_i              # their keys (the sort and history keys)
        self.hist = self.nh = empty_i                  # first spring and spring count per pair
        self.h_u = self.h_v = self.h_r = self.h_hist = empty_i   # history keys, sorted
        self.h_nh = empty_i
        self.shear = np.zeros((0, 3))
        self.touching = np.zeros(0, dtype=np.bool_)
        self._set_outputs(0)
        self.ptr = np.zeros(1, dtype=np.int64)
        self.touched = np.zeros(0, dtype=np.uint8)
        self.listed = np.empty((2, 0), dtype=np.int64)
        self.n_listed = np.full(1, -1, dtype=np.int64)
        self.kept_gravity = np.full(3, np.nan)
        self.entry = empty_i                           # 2 * pair + side, in summation order
        self.general = False                           # any pair needing the full narrow phase
        self.simple_idx = self.general_idx = empty_i   # pairs for the sphere / general kernel
        self.gap = np.zeros(0)                         # gap at the reference poses (_pair_gaps)
        self.hair = 0.0                                # rounding allowance for the gaps
        self.builds = 0
        self.key_order = False                         # pairs sorted by key (see rebuild)
        self._auto = None                              # the last measured choice of key order
        self._auto_left = 0                            # rebuilds that may still reuse it

    def _set_outputs(self, npairs: int) -> None:
        """Zeroed per-pair outputs: force on A, torques on A and B in one row of 9 (one or two
        cache lines per pair when :func:`parsim.contacts.accumulate` gathers them), and
        ``live``. Invariant kept by every pair kernel: a pair that is not live has a zero row
        (so the sums may add it without testing ``live``)."""
        self.pout = np.zeros((npairs, 9))
        self.pf, self.pta, self.ptb = pair_rows(self.pout)   # the kernels' own views of it
        self.live = np.zeros(npairs, dtype=np.uint8)        # 1: the pair is in contact

    @property
    def n_pairs(self) -> int:
        return self.pa.shape[0]

    @property
    def nbytes(self) -> int:
        arrays = (self.pa, self.pb, self.key_a, self.key_b, self.hist, self.nh,
                  self.shear, self.touching, self.pout, self.live, self.ptr, self.entry,
                  self.gap)
        return sum(a.nbytes for a in arrays) + getattr(self.bp, "nbytes", 0)

    def rebuild(self, st, box: np.ndarray, margin: float | None = None,
                keep_refs: bool = False, key_order: bool | None = None) -> None:
        """Rebuild the candidate list from the current poses of all stored copies (AABBs
        enlarged by ``margin``, default half the skin). ``keep_refs``: leave the reference poses
        that decide the next rebuild as they are (a restart, whose bodies have moved up to half
        the skin since those poses, passes ``margin = skin``)."""
        n = st.n
        margin = 0.5 * self.skin if margin is None else float(margin)
        lo = np.empty((n, 3))
        hi = np.empty((n, 3))
        compute_aabbs(st.shape, st.params, st.position, st.orientation, n, margin, lo, hi)
        finite = st.shape[:n] != PLANE
        # the grid sees each copy at its (periodically shifted) place, a hair larger than the
        # canonical test below so that it never misses a pair that test would keep
        blo = np.empty((n, 3))
        bhi = np.empty((n, 3))
        _grid_boxes(lo, hi, n, float(np.abs(box).max(initial=0.0)), blo, bhi)
        shifted = np.flatnonzero(st.image[:n] != NO_SHIFT)
        if shifted.size:
            c = st.image[shifted].astype(np.int64)
            sh = np.stack([(c % 3 - 1) * box[0], ((c // 3) % 3 - 1) * box[1],
                           (c // 9 - 1) * box[2]], axis=1)
            blo[shifted] += sh
            bhi[shifted] += sh
        # Membership by the two hash maps (no sort): the broad phase drops the keys that no
        # longer exist here, updates the others in its own storage order (its fast path: no
        # lookup) and adds the new ones. The order of these calls changes no candidate.
        held = self.bp.bodies
        at = st.slots_of_keys(held.ids[: held.n])
        if (at < 0).any():
            self.bp.remove(held.ids[: held.n][at < 0])
            at = st.slots_of_keys(held.ids[: held.n])
        if at.size:
            self.bp.update(held.ids[: held.n].copy(), blo[at], bhi[at])
        fslots = np.flatnonzero(finite)
        new = fslots[held.map.lookup(st.key[fslots]) < 0]
        if new.size:
            self.bp.add(st.key[new], blo[new], bhi[new])
        cand = self.bp.pairs()
        if cand.shape[0]:
            slots = st.slots_of_keys(cand.reshape(-1)).reshape(-1, 2)
        else:
            slots = np.empty((0, 2), dtype=np.int64)
        ka = np.empty(slots.shape[0], dtype=np.int64)
        kb = np.empty(slots.shape[0], dtype=np.int64)
        m = _filter_pairs(slots[:, 0].astype(np.int64), slots[:, 1].astype(np.int64),
                          st.uid, st.flags, st.image, st.shape, lo, hi, box, st.position,
                          st.params, margin, ka, kb)
        pa, pb = ka[:m], kb[:m]
        # body-plane pairs: owned, movable finite bodies whose enlarged AABB reaches the plane
        planes = np.flatnonzero(st.shape[: st.n_owned] == PLANE)
        if planes.size:
            movable = np.flatnonzero(finite[: st.n_owned]
                                     & ((st.flags[: st.n_owned] & FIXED) == 0))
            ctr = 0.5 * (lo[movable] + hi[movable])
            half = 0.5 * (hi[movable] - lo[movable])
            extra_a, extra_b = [pa], [pb]
            for pl in planes:
                nrm = st.params[pl]
                d = (ctr - st.position[pl]) @ nrm - half @ np.abs(nrm)
                hit = movable[d <= 0.0]
                extra_a.append(hit)
                extra_b.append(np.full(hit.size, pl, dtype=np.int64))
            pa = np.concatenate(extra_a)
            pb = np.concatenate(extra_b)
        key_a = st.key[pa]
        key_b = st.key[pb]
        # Key order: pairs by the lower key of the pair, then the higher. Every body then meets
        # its partners in the order of their keys, which lets the sphere kernel sum forces in
        # the same sweep (contacts.sphere_pair_forces, ``summed``) in the canonical order
        # below. Slot order: A's slot, then B's; with the owned bodies sorted in space
        # (Simulation._sort_owned) the kernels read neighbouring rows even when uids are
        # scattered in space. The order of the pairs changes no result, only the speed.
        # ``key_order=None`` picks key order if it walks the bodies nearly in slot order (see
        # _key_order_is_local).
        # (counting sorts by slot or key rank, orders.rank_order: the permutations of the
        # np.lexsort calls noted; a key's rank orders as the key does)
        rank, urank = key_ranks(st.key[:n])
        measure = key_order is None
        if measure and self._auto is not None and self._auto_left > 0:
            key_order = self._auto          # measured at a recent rebuild (see forget_order)
            self._auto_left -= 1
            measure = False
        if key_order is None or key_order:
            # np.lexsort((np.maximum(key_a, key_b), np.minimum(key_a, key_b)))
            a_low = key_a < key_b
            lower = np.where(a_low, pa, pb)
            order = rank_order(rank[lower], n, rank[np.where(a_low, pb, pa)], n, pa)
            if key_order is None:
                key_order = _key_order_is_local(lower[order])
        if not key_order:
            order = rank_order(pa, n, pb, n, pb)            # np.lexsort((pb, pa))
        self.key_order = key_order
        if measure:
            self._auto = key_order
            self._auto_left = AUTO_REUSE
        pa, pb, key_a, key_b = pa[order], pb[order], key_a[order], key_b[order]
        sph_a = st.shape[pa] == SPHERE
        sph_b = (st.shape[pb] == SPHERE) | (st.shape[pb] == PLANE)
        simple = sph_a & sph_b
        nh = np.where(simple, 1, MAX_POINTS).astype(np.int64)
        hist = np.zeros(nh.size, dtype=np.int64)
        if nh.size:
            np.cumsum(nh[:-1], out=hist[1:])
        n_hist = int(nh.sum())
        shear = np.zeros((n_hist, 3))
        touching = np.zeros(n_hist, dtype=np.bool_)
        hu, hv, hr = history_keys(st, pa, pb)
        horder = rank_order(urank[pa], n, urank[pb], n, hr)  # np.lexsort((hr, hv, hu))
        hu, hv, hr = hu[horder], hv[horder], hr[horder]
        _carry_history(self.h_u, self.h_v, self.h_r, self.h_hist, self.shear, self.touching,
                       hu, hv, hr, hist[horder], nh[horder], shear, touching)
        self.h_u, self.h_v, self.h_r, self.h_hist = hu, hv, hr, hist[horder]
        self.h_nh = nh[horder]
        self.pa, self.pb, self.key_a, self.key_b = pa, pb, key_a, key_b
        self.hist, self.nh, self.shear, self.touching = hist, nh, shear, touching
        self.general = not bool(simple.all())
        self.simple_idx = np.flatnonzero(simple)
        self.general_idx = np.flatnonzero(~simple)
        self._set_outputs(pa.size)
        # canonical summation order: per owned, movable body, its pairs by partner key
        no = st.n_owned
        side_a = np.flatnonzero(pa < no)
        side_b = np.flatnonzero(pb < no)
        body = np.concatenate([pa[side_a], pb[side_b]])
        partner = np.concatenate([pb[side_a], pa[side_b]])
        pair = np.concatenate([side_a, side_b])
        side = np.concatenate([np.zeros(side_a.size, np.int64), np.ones(side_b.size, np.int64)])
        # np.lexsort((key[partner], body))
        order = rank_order(body, no, rank[partner], n, partner)
        self.entry = (2 * pair + side)[order].astype(np.int64)
        counts = np.bincount(body, minlength=no)[:no]
        self.ptr = np.zeros(no + 1, dtype=np.int64)
        np.cumsum(counts, out=self.ptr[1:])
        # state of the sparse sums (accumulate): marks, touched bodies, gravity of kept rows
        self.touched = np.zeros(no, dtype=np.uint8)
        self.listed = np.empty((2, no), dtype=np.int64)
        self.n_listed = np.full(1, -1, dtype=np.int64)
        self.kept_gravity = np.full(3, np.nan)
        if not keep_refs:
            st.ref_position[:n] = st.position[:n]
            st.ref_orientation[:n] = st.orientation[:n]
        self.gap = np.empty(pa.size)
        _pair_gaps(pa, pb, st.shape, st.params, st.ref_position, st.image, box, self.gap)
        # rounding of the gaps and of the displacement, far below this
        self.hair = 1e-9 * (1.0 + float(np.abs(st.ref_position[:n]).max(initial=0.0))
                            + float(np.abs(box).max(initial=0.0)))
        self.builds += 1

    def forget_order(self) -> None:
        """Measure the choice of key order (``key_order=None``) at the next rebuild again:
        called when the owned bodies have been reordered in memory."""
        self._auto = None

    def export_history(self, uids: np.ndarray) -> np.ndarray:
        """The springs of touching contacts of the bodies ``uids`` (records of :data:`HISTORY`),
        to travel with them when they migrate to another rank. Open contacts have no history
        (their springs are zero), so they need not travel."""
        uids = np.asarray(uids, dtype=np.int64)
        if uids.size == 0 or self.h_u.size == 0:
            return np.empty(0, dtype=HISTORY)
        sel = np.flatnonzero(np.isin(self.h_u, uids) | np.isin(self.h_v, uids))
        return self._history_records(sel)

    def _history_records(self, sel: np.ndarray) -> np.ndarray:
        """The history rows ``sel`` as records, keeping those with a touching point."""
        sel = sel[_any_touching(sel, self.h_hist, self.h_nh, self.touching)]
        out = np.zeros(sel.size, dtype=HISTORY)
        out["u"], out["v"], out["r"], out["nh"] = (self.h_u[sel], self.h_v[sel], self.h_r[sel],
                                                   self.h_nh[sel])
        first = self.h_hist[sel]
        for c in range(MAX_POINTS):
            live = c < out["nh"]
            rows = first + np.minimum(c, out["nh"] - 1)
            out["shear"][:, c] = np.where(live[:, None], self.shear[rows], 0.0)
            out["touching"][:, c] = live & self.touching[rows]
        return out

    def import_history(self, rec: np.ndarray) -> None:
        """Merge springs that came with migrating bodies into the history carried over at the
        next rebuild (a contact known here already has the same values: both ranks computed it
        from identical copies)."""
        if rec.shape[0] == 0:
            return
        base = self.shear.shape[0]
        nh = rec["nh"]
        offs = np.zeros(nh.size, dtype=np.int64)
        np.cumsum(nh[:-1], out=offs[1:])
        total = int(nh.sum())
        shear = np.zeros((total, 3))
        touching = np.zeros(total, dtype=np.bool_)
        for c in range(MAX_POINTS):
            live = np.flatnonzero(c < nh)
            shear[offs[live] + c] = rec["shear"][live, c]
            touching[offs[live] + c] = rec["touching"][live, c]
        self.shear = np.concatenate([self.shear, shear])
        self.touching = np.concatenate([self.touching, touching])
        hu = np.concatenate([self.h_u, rec["u"]])
        hv = np.concatenate([self.h_v, rec["v"]])
        hr = np.concatenate([self.h_r, rec["r"]])
        hh = np.concatenate([self.h_hist, base + offs])
        hn = np.concatenate([self.h_nh, nh])
        order = np.lexsort((hr, hv, hu))
        self.h_u, self.h_v, self.h_r = hu[order], hv[order], hr[order]
        self.h_hist, self.h_nh = hh[order], hn[order]

    def export_touching(self) -> np.ndarray:
        """The springs of every touching contact (records of :data:`HISTORY`), for checkpoints:
        every history row, without the uid search of :meth:`export_history`."""
        if self.h_u.size == 0:
            return np.empty(0, dtype=HISTORY)
        return self._history_records(np.arange(self.h_u.size))

    def n_touching(self) -> int:
        return int(np.count_nonzero(self.touching))

    def contact_halves(self, st, root: bool) -> int:
        """Touching contact points of the last force evaluation, counted in halves so that the
        sum over ranks is twice the number of physical contacts: a point between two bodies kept
        here (owned, or replicated) counts 2, one with a shadow 1 (the other copy of the pair,
        on the shadow's owner or across a periodic seam, gives the other half); a point between
        two replicated bodies (evaluated on every rank) counts on rank 0 (``root``) only, and
        there a periodic image of a replicated body (a slot after the owned ones) counts as a
        shadow: two global bodies touching across a seam meet as (A, image of B) and (image of
        A, B), one half each, as on one rank."""
        return _contact_halves(self.pa, self.pb, self.hist, self.nh, self.touching, st.flags,
                               st.n_owned, root)


#: key order is used if at least this fraction of its steps from one lower body to the next
#: stay within LOCAL_SLOTS slots
LOCAL_FRACTION = 0.5
LOCAL_SLOTS = 64
#: rebuilds that reuse a measured choice of key order before it is measured again (the
#: measure sorts the pairs by key: in the demo, whose uids lie scattered in space, a sort
#: thrown away at every rebuild). Between two sorts of the owned bodies (which call
#: forget_order) their memory order changes only by arrivals, departures and additions.
AUTO_REUSE = 15


def _key_order_is_local(lower_slots: np.ndarray) -> bool:
    """Whether pairs in key order visit their lower bodies nearly in memory order. Measured on
    the 64,000-sphere bed (one thread, contact phase per step): with uids in lattice order key
    order takes 19-23 ms against 30 ms in slot order (the sums come with the pair sweep); with
    the same bodies' uids shuffled it takes 58-68 ms against 28-36 ms (the pair sweep jumps
    through memory). The partners of a body are its spatial neighbours, near in memory either
    way, so only the steps between lower bodies are looked at: 60 % stay within 64 slots
    with uids in lattice order, 0.15 % when shuffled."""
    d = np.diff(lower_slots)
    d = d[d != 0]
    if d.size == 0:
        return True
    return bool(np.count_nonzero(np.abs(d) <= LOCAL_SLOTS) >= LOCAL_FRACTION * d.size)


@njit(cache=True)
def _any_touching(sel, h_hist, h_nh, touching):
    """Which history rows ``sel`` have at least one touching contact point."""
    keep = np.zeros(sel.shape[0], dtype=np.bool_)
    for i in range(sel.shape[0]):
        r = sel[i]
        for c in range(h_hist[r], h_hist[r] + h_nh[r]):
            if touching[c]:
                keep[i] = True
                break
    return keep


@njit(cache=True)
def _contact_halves(pa, pb, hist, nh, touching, flags, n_owned, root):
    total = 0
    for p in range(pa.shape[0]):
        a = pa[p]
        b = pb[p]
        rep_a = (flags[a] & REPLICATED) != 0
        rep_b = (flags[b] & REPLICATED) != 0
        if rep_a and rep_b:
            w = ((1 if a < n_owned else 0) + (1 if b < n_owned else 0)) if root else 0
        else:
            w = (1 if (a < n_owned or rep_a) else 0) + (1 if (b < n_owned or rep_b) else 0)
        if w == 0:
            continue
        for c in range(hist[p], hist[p] + nh[p]):
            if touching[c]:
                total += w
    return total
