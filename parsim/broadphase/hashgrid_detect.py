"""The detection step of the hierarchical hash grid (Algorithm 4), by rows of cells.

Every body already knows its grid and cell (``hashgrid_kernels``). Detection needs, for each
body, the bodies of its own cell, of 13 of its 26 neighbour cells, and of the neighbourhood of its
AABB in every coarser grid. The bodies are first sorted by cell with two counting sorts -- by the
cell's x index, then by its *row* (grid, z, y) -- and their AABBs copied in that order into six
compact coordinate arrays. A row of cells is then one contiguous, x-sorted run of bodies, found in
a small table indexed by row (``rows``: one entry per row of every grid, about ``cells ** (2/3)``
per grid, a few per cent of the bodies).

The 13 half neighbours of a cell are the next cell in its own row and three x cells in each of
four rows (dy, dz) = (1, 0), (-1, 1), (0, 1), (1, 1). In a row of more than ``SHORT`` bodies the
three cells are a window found in an x table of the row (first body at or after each x), built
once per row for the two planes of rows in use; in a shorter row the window's ends are counted
from the x indices of its (at most eight) bodies by one vector compare each
(``simd.count_below8``). The windows are tested eight candidates at a time
(``simd.overlap_mask8``). The hashed grids wrap (cell x = 0 is the +x
neighbour of x = 2**bx - 1); the wrap is handled at the two ends of a row.

Where rows are sparse (the very polydisperse scenario: 2.4 bodies per row of its finest grid, one
window in seven holding a body), finding the windows costs more than testing every candidate: a
row whose half neighbours hold at most ``WHOLE_MAX`` bodies tests them whole, without windows. Its
own row and the next (dy = 1) are one run of entries, the three rows dy = -1, 0, 1 of the next
plane another (a third and fourth only where y wraps), each tested with one or two vectors
(chosen per row, so that no loop's trip count depends on the body: with the window loop, whose
trip count varies from body to body, the detection of the very polydisperse scenario took 1.06
ms, with the runs 0.77; 2026-11-29, alternated in one process). A vector is tested along x
first (``simd.overlap_x8``), the full test only where a lane passes: in a run of other x cells
that is rare and the branch predictable (0.72 -> 0.65 ms).
Bodies of every x cell in those rows are tested, whatever their x: two boxes of one grid that
overlap lie in neighbouring cells, and the offset (dy, dz) between their rows says which of the
two holds the other in its half neighbourhood (four cells or more per axis: the offsets are
distinct), so each overlapping pair is still reported exactly once.

On the windowed path the cell pairs are those of the thesis' cell-by-cell walk: each pair of
neighbouring cells meets once, and each overlapping pair is reported once.

A sparse grid whose bodies probe no coarser grid (``FLAT_PER_ROW``) skips the row loop:
``flat_sweep`` runs one loop over its bodies, each against its whole runs, filtered by a float32
test of sixteen lanes along x (very polydisperse: detection 0.67-0.69 -> 0.51-0.53 ms). That
takes a build of its own, ``find_pairs_rows_flat`` (the same source with ``_FLAT`` on); the
plain build, without those branches, serves the scenes with no such grid: every placement of
the switch in the one kernel tried cost their row loop 1-5 % (dense scenes, the scaling study).
The caller picks the build (``HierarchicalHashGrid._pairs``).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.cpython.unsafe.numbers import trailing_zeros

from .hashgrid_kernels import ID_BITS, SCAN_COARSE_MAX, _coord
from .prefetch import prefetch
from ..parallel import variant
from .simd import LANES, count_below8, overlap_mask4, overlap_mask8, overlap_x8, overlap_x16f

#: the four rows of three x cells among the 13 half neighbours of a cell, as (dy, dz)
ROW_DY = np.array([1, -1, 0, 1], dtype=np.int64)
ROW_DZ = np.array([0, 1, 1, 1], dtype=np.int64)

#: in rows of cells holding at most this many bodies the x windows are counted (one vector
#: compare of the row's x indices per window end); longer rows have x tables
SHORT = LANES

#: the most windows of one body: own row 2, forward rows 4 x 2, coarser grids 63 x 9 rows x 2
WINDOWS_MAX = 10 + 64 * 18

#: a row whose own run (the rest of its row and the next row) and forward plane run (three rows of
#: the next plane) each hold at most this many bodies (not counting itself) tests them whole:
#: two vectors at most per run, no x windows
WHOLE_MAX = 2 * LANES

#: boxes that overlap nothing after the last compact entry: a run's vector tests read up to
#: ``BOX_PAD - 1`` entries past its start (two vectors on the whole path, so WHOLE_MAX may not
#: exceed it). The caller allocates ``box`` with this padding (``HierarchicalHashGrid``).
BOX_PAD = 2 * LANES
assert WHOLE_MAX <= BOX_PAD

#: a grid holding at most this many bodies per occupied row of cells on average, none more
#: than ``FLAT_ROW_MAX`` in a row, whose bodies probe no coarser grid, is swept body by body
#: (``flat_sweep``), every row tested whole. (Per *occupied* row: the scaling study's clusters,
#: 1,000 to 10,000 bodies in a few per cent of the rows, 12 to 25 per row, took up to 1.5x the
#: time of the row loop's x windows when swept so.)
FLAT_PER_ROW = 4
FLAT_ROW_MAX = 16

#: float32 x bounds (``fx``) past the last compact entry: ``flat_sweep`` reads sixteen lanes
FX_PAD = 16

#: False in ``find_pairs_rows``, True in ``find_pairs_rows_flat``: whether sparse grids are swept
#: by ``flat_sweep`` (numba folds the branches on it)
_FLAT = False

#: the index type of the sorts' scattered writes: int64 in ``find_pairs_rows``, unsigned in
#: ``find_pairs_rows_flat`` (no code for negative indices; see ``flat_sweep``): very
#: polydisperse detection 0.96x; in the plain build the scaling study's single sizes took
#: 1.02x with it (reference 0.99x), so it stays signed there
_IX = np.int64

#: ``toff`` of a row without an x table
NO_TABLE = -(1 << 62)

#: gather distance (bodies) of the AABB copy: the slot ``PF_GATHER`` places ahead is prefetched.
#: 64 rather than 12 since 2026-11-29: with 12 the copy waited on memory whenever the AABBs
#: were not in cache (after an ``update``, or other work, between two calls). Kernel alone,
#: caches flushed before each call (64 MB written), median of 50: reference 4.58 -> 4.12 ms
#: (the copy 0.95 -> 0.73), very polydisperse 1.32 -> 1.21; with warm caches 4.12 -> 3.86 and
#: 1.07 -> 1.10 (distances 12, 24, 40, 64, 96 compared; 64 and 96 alike)
PF_GATHER = 64


@njit(cache=True)
def table_sizes(G):
    """Entries of the row table (one per (grid, z, y), plus one) and of the x tables (two planes
    of rows of ``2**bx + 1`` entries, for the grid needing most) for the grids of ``G``. (A
    kernel: with numpy's reductions on these few rows it took tens of microseconds per
    ``pairs()`` call.)"""
    rows = np.int64(1)
    xtab = np.int64(1)
    for g in range(G.n[0]):
        bx = np.int64(G.bits[g, 0])
        by = np.int64(G.bits[g, 1])
        rows += np.int64(1) << (by + np.int64(G.bits[g, 2]))
        xtab = max(xtab, 2 * (np.int64(1) << by) * ((np.int64(1) << bx) + 1))
    return rows, xtab


@njit(cache=True, inline="always")
def _emit(out, cid, ia, q, msk, n, over):
    """``flat_sweep``'s pairs of the body of id ``ia`` with the entries q + k of the set bits k
    of ``msk``, written from row ``n`` of ``out`` as ``find_pairs_rows`` writes them (on
    overflow counting on in ``over``, from row 0 again); returns the new (n, over). Inlined
    by numba: the same code as written out at each of its two calls."""
    while msk != 0:
        ib = cid[q + trailing_zeros(msk)]
        out[n, 0] = min(ia, ib)
        out[n, 1] = max(ia, ib)
        n += 1
        if n == out.shape[0] - 1:  # overflow: keep counting, the caller retries
            over += n
            n = 0
        msk &= msk - 1
    return n, over


@njit(cache=True)
def flat_sweep(rows, keys, box, fx, cid, rb, by, bz, shift_row, out, st):
    """Every pair of the bodies of a sparse grid (rows ``rb`` to ``rb + 2**(by + bz)``; see
    ``FLAT_PER_ROW``) with the bodies of the same grid, body by body: each body against the
    runs of entries of its half neighbours' rows, tested whole (as ``find_pairs_rows`` does
    where they hold few bodies): the rest of its row and the next row, the three rows (y - 1,
    y, y + 1) of the next plane; at y = 0 and y = my the rows across the wrap are runs of their
    own. ``keys``: the sorted keys (row, x, slot) of the compact entries. Writes the pairs as
    ``find_pairs_rows`` does (``out``, counts in ``st``).

    Why: in the very polydisperse scenario's fine grid (40,000 bodies, 2.4 per row) the loop
    over each row's bodies missed its exit in the branch predictor about once per row, and
    the x windows cost more than the candidates they spare. Here one loop runs over all bodies,
    and a run of up to sixteen candidates is filtered by one float32 test along x
    (``simd.overlap_x16f`` on ``fx``, which the gather filled), the exact test only where a
    lane passes (about one body in twenty there).

    Each overlapping pair once: same-row pairs by the earlier entry; otherwise, with at least
    four cells per axis, the offset between the two rows puts one of them, not both, in the
    other's half neighbourhood.

    The hot path indexes with unsigned integers (``np.uintp``): with a signed index numba adds
    the wrap of negative ones (a compare and a select, and the array's length kept live), and
    the loop kept its counters on the stack; 0.19-0.20 -> 0.16 ms (very polydisperse, alone,
    warm, 2026-11-29)."""
    LX = box[0]
    LY = box[1]
    LZ = box[2]
    HX = box[3]
    HY = box[4]
    HZ = box[5]
    FL = fx[0]
    FH = fx[1]
    my = (np.int64(1) << by) - 1
    mz = (np.int64(1) << bz) - 1
    n = st[0]
    over = st[1]
    run0 = np.empty(4, dtype=np.int64)  # the runs of a body of a row at the wrap
    run1 = np.empty(4, dtype=np.int64)
    for a in range(rows[rb], rows[rb + ((my + 1) << bz)]):
        u = np.uintp(a)  # (an unsigned index: no code for negative ones, see below)
        row = keys[u] >> shift_row
        y = (row - rb) & my
        pz = row - y                                           # row (z, 0)
        pb = rb + (((((row - rb) >> by) + 1) & mz) << by)      # row (z + 1, 0)
        b = a + 1
        fl = FL[u]
        fh = FH[u]
        if 0 < y < my:
            oe = rows[np.uintp(row + 2)]
            p1s = rows[np.uintp(pb + y - 1)]
            p1e = rows[np.uintp(pb + y + 2)]
            if oe - b <= 16 and p1e - p1s <= 16:  # (nearly always)
                own = overlap_x16f(FL, FH, b, fl, fh) & ((np.int64(1) << (oe - b)) - 1)
                fwd = overlap_x16f(FL, FH, p1s, fl, fh) & ((np.int64(1) << (p1e - p1s)) - 1)
                if own | fwd == 0:
                    continue
                # the exact test of the (at most four) vectors of eight where a lane passed
                ia = cid[a]
                for h in range(4):
                    f = ((own if h < 2 else fwd) >> ((h & 1) * LANES)) & 0xFF
                    if f == 0:
                        continue
                    qh = (b if h < 2 else p1s) + (h & 1) * LANES
                    msk = f & overlap_mask8(LX, LY, LZ, HX, HY, HZ, qh, LX[a], LY[a], LZ[a],
                                            HX[a], HY[a], HZ[a])
                    n, over = _emit(out, cid, ia, qh, msk, n, over)
                continue
            run0[0], run1[0], run0[1], run1[1] = b, oe, p1s, p1e
            nr = 2
        elif y == 0:
            run0[0], run1[0] = b, rows[row + 2]
            run0[1], run1[1] = rows[pb], rows[pb + 2]
            run0[2], run1[2] = rows[pb + my], rows[pb + my + 1]
            nr = 3
        else:
            run0[0], run1[0] = b, rows[row + 1]
            run0[1], run1[1] = rows[pz], rows[pz + 1]
            run0[2], run1[2] = rows[pb + my - 1], rows[pb + my + 1]
            run0[3], run1[3] = rows[pb], rows[pb + 1]
            nr = 4
        # the runs, sixteen candidates at a time: the float32 filter, then the exact test of
        # the eight lanes of each half where one passes
        ia = cid[a]
        for k in range(nr):
            e = run1[k]
            for q in range(run0[k], e, 16):
                f = overlap_x16f(FL, FH, q, fl, fh)
                if e - q < 16:
                    f &= (np.int64(1) << (e - q)) - 1
                for h in range(2):
                    if (f >> (h * LANES)) & 0xFF == 0:
                        continue
                    qh = q + h * LANES
                    msk = overlap_mask8(LX, LY, LZ, HX, HY, HZ, qh, LX[a], LY[a], LZ[a],
                                        HX[a], HY[a], HZ[a])
                    msk &= (f >> (h * LANES)) & 0xFF
                    n, over = _emit(out, cid, ia, qh, msk, n, over)
    st[0] = n
    st[1] = over


@njit(cache=True)
def find_pairs_rows(ids, lo, hi, n_slots, b_grid, b_cell, G, words, tmp, box, cid, xs, fx,
                    flags, rows, ptab, toff, ctab, out):
    """Every overlapping pair once (Algorithm 4), through bodies sorted into rows of cells.

    Scratch, caller-owned and reused between calls: ``words``, ``tmp`` (int64) of at least
    ``n_slots`` entries, ``cid`` (int64) and ``xs`` (int32) of ``n_slots + LANES``; ``box``
    float64[6, >= n_slots + BOX_PAD] (the compact lo x, y, z, hi x, y, z); ``fx``
    float32[2, >= n_slots + FX_PAD] (lo x and hi x as float32, for ``flat_sweep``); ``flags``
    int64[1]: ``find_pairs_rows_flat`` writes 1 there if it swept a grid so, else 0; ``rows``
    int64 and ``ptab`` int32 of the sizes ``table_sizes(G)``. After the sorts, row ``r`` of the
    grids (grid rank, then z, then y) holds compact entries ``rows[r] : rows[r + 1]``, sorted
    by the cells' x index ``xs`` (unless every grid is swept by ``flat_sweep``), with ids
    ``cid``. Writes id pairs (a < b) into ``out`` and
    returns their number; a number above ``out.shape[0] - 2`` means the buffer overflowed
    (contents invalid): retry with that size.
    """
    ng = G.n[0]
    # per grid (indexed by grid id): first row; the widest x index
    row0 = np.zeros(max(ng, 1) + 1, dtype=np.int64)
    xbits = np.int64(0)
    acc = np.int64(0)
    for r in range(ng):
        g = G.order[r]
        row0[g] = acc
        acc += np.int64(1) << (G.bits[g, 1] + G.bits[g, 2])
        xbits = max(xbits, G.bits[g, 0])
    n_rows = acc
    slot_mask = (np.int64(1) << ID_BITS) - 1
    xmask_all = (np.int64(1) << xbits) - 1
    shift_row = ID_BITS + xbits

    # 1. keys (row, x, slot) in slot order, with the histograms of x and of rows
    cnt_x = np.zeros((np.int64(1) << xbits) + 1, dtype=np.int64)
    rows[: n_rows + 1] = 0
    m = 0
    for s in range(n_slots):
        g = b_grid[s]
        if g < 0:
            continue
        c = np.int64(b_cell[s])
        bx = G.bits[_IX(g), 0]
        x = c & ((np.int64(1) << bx) - 1)
        row = row0[_IX(g)] + (c >> bx)
        tmp[_IX(m)] = (((row << xbits) | x) << ID_BITS) | s
        cnt_x[_IX(x + 1)] += 1
        rows[_IX(row + 1)] += 1
        m += 1
    # the grids swept by flat_sweep (by rank; see FLAT_PER_ROW): in find_pairs_rows_flat only
    all_flat = False
    if _FLAT:
        flat = np.zeros(max(ng, 1), dtype=np.bool_)
        any_flat = False
        for r in range(ng):
            g = G.order[r]
            probe = False
            for r2 in range(r + 1, ng):
                probe |= G.count[G.order[r2]] > SCAN_COARSE_MAX
            n_rows_g = np.int64(1) << (G.bits[g, 1] + G.bits[g, 2])
            if probe or min(G.bits[g, 1], G.bits[g, 2]) < 2 or G.count[g] > FLAT_PER_ROW * n_rows_g:
                continue
            longest = 0
            occupied = 0
            for hr in range(row0[g], row0[g] + n_rows_g):  # (rows[hr + 1]: row hr's count, yet)
                longest = max(longest, rows[hr + 1])
                occupied += rows[hr + 1] > 0
            flat[r] = longest <= FLAT_ROW_MAX and G.count[g] <= FLAT_PER_ROW * occupied
            any_flat |= flat[r]
        all_flat = True
        for r in range(ng):
            all_flat &= flat[r] or G.count[G.order[r]] == 0
        flags[0] = any_flat
    # 2. counting sort by x (stable), then by row (stable): rows of cells, each sorted by x;
    # by row only if every grid is swept by flat_sweep, which needs no x order
    if not all_flat:
        for x in range(xmask_all + 1):
            cnt_x[x + 1] += cnt_x[x]
        for i in range(m):
            w = tmp[i]
            x = (w >> ID_BITS) & xmask_all
            words[_IX(cnt_x[x])] = w
            cnt_x[x] += 1
    else:  # (the keys back into words, so that the scatter below reads them there)
        words[:m] = tmp[:m]
    for r in range(n_rows):
        rows[r + 1] += rows[r]
    # scatter by row; rows[r] advances to the end of row r, so it is shifted back afterwards
    for i in range(m):
        w = words[i]
        r = _IX(w >> shift_row)
        tmp[_IX(rows[r])] = w
        rows[r] += 1
    for r in range(n_rows, 0, -1):
        rows[r] = rows[r - 1]
    rows[0] = 0
    # 3. the AABBs and ids in that order (sequential writes; the reads by slot prefetched)
    LX = box[0]
    LY = box[1]
    LZ = box[2]
    HX = box[3]
    HY = box[4]
    HZ = box[5]
    FL = fx[0]
    FH = fx[1]
    lo_flat = lo.reshape(lo.shape[0] * 3)
    hi_flat = hi.reshape(hi.shape[0] * 3)
    # (prefetched: both ends of each 24-byte corner, which straddles two cache lines for a
    # quarter of the slots, and the id; with the first lines only, and no id, the reference
    # scenario's pairs() took 1.10x as long: three runs, alternated in one process, 2026-11-27)
    for j in range(m):
        if j + PF_GATHER < m:
            sp = tmp[j + PF_GATHER] & slot_mask
            prefetch(lo_flat, 3 * sp)
            prefetch(lo_flat, 3 * sp + 2)
            prefetch(hi_flat, 3 * sp)
            prefetch(hi_flat, 3 * sp + 2)
            prefetch(ids, sp)
        w = tmp[j]
        s = w & slot_mask
        LX[j] = lo[s, 0]
        LY[j] = lo[s, 1]
        LZ[j] = lo[s, 2]
        HX[j] = hi[s, 0]
        HY[j] = hi[s, 1]
        HZ[j] = hi[s, 2]
        if _FLAT:  # (here: a pass of its own took 30-50 us more, very polydisperse)
            FL[j] = np.float32(lo[s, 0])
            FH[j] = np.float32(hi[s, 0])
        cid[j] = ids[s]
        xs[j] = (w >> ID_BITS) & xmask_all
    if _FLAT:
        for j in range(m, m + FX_PAD):
            FL[j] = np.inf
            FH[j] = -np.inf
    # boxes that overlap nothing after the last (BOX_PAD)
    for j in range(m, m + BOX_PAD):
        LX[j] = np.inf
        LY[j] = np.inf
        LZ[j] = np.inf
        HX[j] = -np.inf
        HY[j] = -np.inf
        HZ[j] = -np.inf

    def fill_xtable(tab, off, s0, s1):
        """The x table of the row of compact entries s0:s1 (sorted by x, not empty):
        ``tab[off + t]`` = the first entry at or after x = t, for t from the row's first x to
        its last x + 1 (= s1)."""
        x0 = np.int64(xs[s0])
        x1 = np.int64(xs[s1 - 1])
        # count the entries of each x, then a running sum: entry t = s0 + entries with x < t
        # (the sum is carried in a register; a backward min over the table, each step
        # reading the entry the last one wrote, took twice as long)
        for t in range(x0, x1 + 2):
            tab[off + t] = 0
        for j in range(s0, s1):
            tab[off + xs[j] + 1] += 1
        acc = np.int32(s0)
        for t in range(x0, x1 + 2):
            acc += tab[off + t]
            tab[off + t] = acc

    def first_at(tab, off, f0, f1, t):
        """The first entry at or after x = t of a row with an x table (``fill_xtable``) whose
        x run from f0 to f1 - 1: below f0 the row's start, beyond f1 its end."""
        return tab[off + min(max(t, f0), f1)]

    # x tables of the long rows of the grids that finer bodies probe, packed one after the
    # other into ``ctab`` as far as it holds them; a long row without one (toff = NO_TABLE)
    # is searched
    toff[:n_rows] = NO_TABLE
    used = 0
    cap = ctab.shape[0]
    for r in range(1, ng):
        h = G.order[r]
        if G.count[h] <= SCAN_COARSE_MAX:
            continue
        finer = 0
        for r0 in range(r):
            finer += G.count[G.order[r0]]
        if finer == 0:
            continue
        hr0 = row0[h]
        for hr in range(hr0, hr0 + (np.int64(1) << (G.bits[h, 1] + G.bits[h, 2]))):
            s0 = rows[hr]
            s1 = rows[hr + 1]
            if s1 - s0 <= SHORT:
                continue
            x0 = np.int64(xs[s0])
            span = np.int64(xs[s1 - 1]) - x0 + 2
            if used + span > cap:
                continue
            toff[hr] = used - x0  # the entry of x = t is ctab[toff + t]
            fill_xtable(ctab, used - x0, s0, s1)
            used += span

    n_out = out.shape[0]
    st = np.zeros(2, dtype=np.int64)  # [count in buffer, count of earlier overflowed buffers]
    wlo = np.empty(WINDOWS_MAX, dtype=np.int64)
    whi = np.empty(WINDOWS_MAX, dtype=np.int64)

    def run_windows(a, k, narrow):
        """Test body ``a`` against the compact entries ``wlo[w] : whi[w]``, w < k, eight at a
        time, or, if ``narrow``, four at a time where a window holds at most four; write the
        overlapping pairs as ids (a < b). ``narrow``: every window is x cells of a long row of
        the body's own grid, so that almost all hold four candidates or fewer. Elsewhere (coarse
        rows; short rows, tested whole until 2026-11-27) the lengths vary, and the choice of
        width cost more than it saved (more polydisperse scenario: 16.3-16.5 -> 18.3 ms with
        every window eligible). With the short rows' windows counted, letting them take the
        choice too measured no gain (2026-11-27, very polydisperse, one process)."""
        n = st[0]
        over = st[1]
        l0 = LX[a]
        l1 = LY[a]
        l2 = LZ[a]
        h0 = HX[a]
        h1 = HY[a]
        h2 = HZ[a]
        ia = cid[a]
        for w in range(k):
            b = wlo[w]
            e = whi[w]
            while True:
                left = e - b
                if narrow and left <= 4:
                    msk = overlap_mask4(LX, LY, LZ, HX, HY, HZ, b, l0, l1, l2, h0, h1, h2)
                    msk &= (np.int64(1) << max(left, 0)) - 1
                else:
                    msk = overlap_mask8(LX, LY, LZ, HX, HY, HZ, b, l0, l1, l2, h0, h1, h2)
                    if left < LANES:
                        msk &= (np.int64(1) << left) - 1
                while msk != 0:
                    ib = cid[b + trailing_zeros(msk)]
                    out[n, 0] = min(ia, ib)
                    out[n, 1] = max(ia, ib)
                    n += 1
                    if n == n_out - 1:  # overflow: keep counting, the caller retries
                        over += n
                        n = 0
                    msk &= msk - 1
                b += LANES
                if b >= e:
                    break
        st[0] = n
        st[1] = over

    def test8(a, b, left):
        """The overlap mask of body ``a`` with the ``left`` (may be <= 0) entries from b on,
        eight at most: x alone first (a run tested whole is mostly bodies of other x cells),
        the full test only if some lane passes."""
        keep = (np.int64(1) << min(max(left, 0), LANES)) - 1
        if overlap_x8(LX, HX, b, LX[a], HX[a]) & keep == 0:
            return np.int64(0)
        msk = overlap_mask8(LX, LY, LZ, HX, HY, HZ, b, LX[a], LY[a], LZ[a], HX[a], HY[a],
                            HZ[a])
        return msk & keep

    def emit(a, b, msk):
        """Write the pairs of body ``a`` with the entries b + k of the set bits k of ``msk``.
        (``run_windows`` and ``scan_all`` write this loop out, their counts in registers. A
        shared helper returning the counts measured 1.01-1.02x the time on the reference
        scenario, 2026-11-29; so did the variant with only ``scan_all`` using it, which
        suggests code layout rather than the helper, but no gain was in sight either.)"""
        n = st[0]
        over = st[1]
        ia = cid[a]
        while msk != 0:
            ib = cid[b + trailing_zeros(msk)]
            out[n, 0] = min(ia, ib)
            out[n, 1] = max(ia, ib)
            n += 1
            if n == n_out - 1:  # overflow: keep counting, the caller retries
                over += n
                n = 0
            msk &= msk - 1
        st[0] = n
        st[1] = over

    def scan_all(a, e):
        """Test body ``a`` against the entries 0:e, eight at a time, writing the pairs of a
        vector without a branch per pair: eight rows written, the count advanced by each
        lane's bit (a big body overlaps many: in the very polydisperse scenario 26,000 pairs
        from 5,000 vectors, whose per-pair loop mispredicted its exit once per vector)."""
        n = st[0]
        over = st[1]
        l0 = LX[a]
        l1 = LY[a]
        l2 = LZ[a]
        h0 = HX[a]
        h1 = HY[a]
        h2 = HZ[a]
        ia = cid[a]
        for b in range(0, e, LANES):
            msk = overlap_mask8(LX, LY, LZ, HX, HY, HZ, b, l0, l1, l2, h0, h1, h2)
            if e - b < LANES:
                msk &= (np.int64(1) << (e - b)) - 1
            if msk == 0:
                continue
            if n + LANES < n_out - 1:
                for k in range(LANES):
                    ib = cid[b + k]
                    out[_IX(n), 0] = min(ia, ib)
                    out[_IX(n), 1] = max(ia, ib)
                    n += (msk >> k) & 1
            else:
                while msk != 0:
                    ib = cid[b + trailing_zeros(msk)]
                    out[n, 0] = min(ia, ib)
                    out[n, 1] = max(ia, ib)
                    n += 1
                    if n == n_out - 1:  # overflow: keep counting, the caller retries
                        over += n
                        n = 0
                    msk &= msk - 1
        st[0] = n
        st[1] = over

    def lower(q0, q1, x):
        """First index in [q0, q1] whose x is >= x (the run, not empty, is sorted by x); a
        branch-free binary search (its trip count depends on the run's length only)."""
        base = q0
        n = q1 - q0
        while n > 1:
            half = n >> 1
            base = base + half if xs[base + half] < x else base
            n -= half
        return base + (xs[base] < x)

    def first_in(t0, qs_, n_, lo_x, hi_x, t):
        """The first entry at or after x = t of a row: from its x table (offset t0 >= 0, x run
        lo_x to hi_x - 1), or for a short row (t0 < 0; start qs_, n_ entries) by a count."""
        if t0 < 0:
            return qs_ + count_below8(xs, qs_, n_, t)
        return first_at(ptab, t0, lo_x, hi_x, t)

    def coarse_first(q0, q1, to, t):
        """The first entry at or after x = t of the coarse row q0:q1 (not empty unless short):
        counted in a short row, from its x table (offset ``to``) or by binary search."""
        if q1 - q0 <= SHORT:
            return q0 + count_below8(xs, q0, q1 - q0, t)
        if to != NO_TABLE:
            return first_at(ctab, to, np.int64(xs[q0]), np.int64(xs[q1 - 1]) + 1, t)
        return lower(q0, q1, t)

    def forward(k, x, mx, t0, qs_, qe_, lo_x, hi_x):
        """The windows of a body at x in one forward row (start qs_, end qe_, x table offset
        t0, -1 for a short row, x run lo_x to hi_x - 1) from window k on; returns the next k."""
        n_ = qe_ - qs_
        p = first_in(t0, qs_, n_, lo_x, hi_x, x - 1)
        u = first_in(t0, qs_, n_, lo_x, hi_x, x + 2)
        wlo[k] = p
        whi[k] = u
        k += u > p
        if x == 0:  # x - 1 wraps to mx
            wlo[k] = first_in(t0, qs_, n_, lo_x, hi_x, mx)
            whi[k] = qe_
            k += 1
        elif x == mx:  # x + 1 wraps to 0
            wlo[k] = qs_
            whi[k] = first_in(t0, qs_, n_, lo_x, hi_x, np.int64(1))
            k += 1
        return k

    def coarse_windows(r, a, k):
        """The windows of body ``a`` in every coarser grid with many bodies, from window k on:
        the rows of the cells that can hold a partner (centres within half a cell of the AABB:
        at most 3 x 3 x 3); returns the next k."""
        for r2 in range(r + 1, ng):
            h = G.order[r2]
            if G.count[h] <= SCAN_COARSE_MAX:
                continue
            inv = G.inv[h]
            half_cell = 0.5 * G.cell[h]
            hrb = row0[h]
            hby = G.bits[h, 1]
            hmx = (np.int64(1) << G.bits[h, 0]) - 1
            hmy = (np.int64(1) << hby) - 1
            hmz = (np.int64(1) << G.bits[h, 2]) - 1
            cx0 = _coord(LX[a] - half_cell, inv) & hmx
            cx1 = _coord(HX[a] + half_cell, inv) & hmx
            cy0 = _coord(LY[a] - half_cell, inv)
            cy1 = _coord(HY[a] + half_cell, inv)
            cz0 = _coord(LZ[a] - half_cell, inv)
            cz1 = _coord(HZ[a] + half_cell, inv)
            for cz in range(cz0, cz1 + 1):
                for cy in range(cy0, cy1 + 1):
                    hr = hrb + (((cz & hmz) << hby) | (cy & hmy))
                    q0 = rows[hr]
                    q1 = rows[hr + 1]
                    to = toff[hr]
                    wlo[k] = coarse_first(q0, q1, to, cx0)
                    if cx0 <= cx1:
                        whi[k] = coarse_first(q0, q1, to, cx1 + 1)
                        k += whi[k] > wlo[k]
                    else:  # the x range wraps: [cx0, mx] and [0, cx1]
                        whi[k] = q1
                        wlo[k + 1] = q0
                        whi[k + 1] = coarse_first(q0, q1, to, cx1 + 1)
                        k += 2
        return k

    # the own row (0) and the four forward rows: start, end, x table offset (-1: a short row,
    # its windows counted), first x and last x + 1
    qs = np.empty(5, dtype=np.int64)
    qe = np.empty(5, dtype=np.int64)
    qt = np.empty(5, dtype=np.int64)
    qx0 = np.empty(5, dtype=np.int64)
    qx1 = np.empty(5, dtype=np.int64)
    for r in range(ng):
        g = G.order[r]
        if G.count[g] == 0:
            continue
        bx = G.bits[g, 0]
        by = G.bits[g, 1]
        nx = np.int64(1) << bx
        ny = np.int64(1) << by
        nz = np.int64(1) << G.bits[g, 2]
        mx = nx - 1
        my = ny - 1
        mz = nz - 1
        tw = nx + 1
        rb = row0[g]
        coarse_probe = False
        for r2 in range(r + 1, ng):
            coarse_probe |= G.count[G.order[r2]] > SCAN_COARSE_MAX
        if _FLAT and flat[r]:
            # (with a sparse coarser grid's scan, as below)
            if r > 0 and 0 < G.count[g] <= SCAN_COARSE_MAX:
                fine_end = rows[rb]
                for a in range(fine_end, rows[rb + ny * nz]):
                    scan_all(a, fine_end)
            flat_sweep(rows, tmp, box, fx, cid, rb, by, G.bits[g, 2], shift_row, out, st)
            continue
        for zi in range(nz + 1):
            # the x tables of the long rows of plane zi, two planes kept (by parity); plane 0
            # again at zi = nz, for the last plane's forward rows
            z = zi & mz
            for y in range(ny):
                row = rb + ((z << by) | y)
                s0 = rows[row]
                s1 = rows[row + 1]
                if s1 - s0 <= SHORT:
                    continue
                fill_xtable(ptab, ((z & 1) * ny + y) * tw, s0, s1)
            if zi == 0:
                continue
            z = zi - 1  # sweep plane z: its tables and those of the next plane exist
            for y in range(ny):
                row = rb + ((z << by) | y)
                s0 = rows[row]
                s1 = rows[row + 1]
                if s0 == s1:
                    continue
                # sparse neighbourhood: the half neighbours' rows as at most four runs of
                # entries, tested whole (no x windows; see WHOLE_MAX)
                zq = (z + 1) & mz
                pb = rb + (zq << by)
                if y < my:                    # rows (z, y) and (z, y + 1) are one run
                    oe = rows[row + 2]
                    o2s = oe
                    o2e = oe
                else:                         # (z, y + 1) wraps to (z, 0)
                    oe = s1
                    o2s = rows[rb + (z << by)]
                    o2e = rows[rb + (z << by) + 1]
                if y == 0:                    # (zq, -1) wraps to (zq, my)
                    p1s = rows[pb]
                    p1e = rows[pb + 2]
                    p2s = rows[pb + my]
                    p2e = rows[pb + my + 1]
                elif y < my:                  # rows (zq, y - 1 .. y + 1): one run
                    p1s = rows[pb + y - 1]
                    p1e = rows[pb + y + 2]
                    p2s = p1e
                    p2e = p1e
                else:                         # (zq, my + 1) wraps to (zq, 0)
                    p1s = rows[pb + my - 1]
                    p1e = rows[pb + my + 1]
                    p2s = rows[pb]
                    p2e = rows[pb + 1]
                if oe - s0 <= WHOLE_MAX + 1 and p1e - p1s <= WHOLE_MAX:
                    # per row, not per body: how many vectors each run needs (one or two)
                    own2 = oe - s0 - 1 > LANES
                    p12 = p1e - p1s > LANES
                    edge = y == 0 or y == my
                    for a in range(s0, s1):
                        b = a + 1
                        msk = test8(a, b, oe - b)
                        if msk != 0:
                            emit(a, b, msk)
                        if own2:
                            msk = test8(a, b + LANES, oe - b - LANES)
                            if msk != 0:
                                emit(a, b + LANES, msk)
                        msk = test8(a, p1s, p1e - p1s)
                        if msk != 0:
                            emit(a, p1s, msk)
                        if p12:
                            msk = test8(a, p1s + LANES, p1e - p1s - LANES)
                            if msk != 0:
                                emit(a, p1s + LANES, msk)
                        if edge or coarse_probe:
                            wlo[0] = o2s
                            whi[0] = o2e
                            k = np.int64(o2e > o2s)
                            wlo[k] = p2s
                            whi[k] = p2e
                            k += p2e > p2s
                            if coarse_probe:
                                k = coarse_windows(r, a, k)
                            run_windows(a, k, False)
                    continue
                for q in range(5):
                    if q == 0:
                        yq = y
                        zq = z
                    else:
                        yq = (y + ROW_DY[q - 1]) & my
                        zq = (z + ROW_DZ[q - 1]) & mz
                    qr = rb + ((zq << by) | yq)
                    a = rows[qr]
                    e = rows[qr + 1]
                    qs[q] = a
                    qe[q] = e
                    if e - a > SHORT:
                        qt[q] = ((zq & 1) * ny + yq) * tw
                        qx0[q] = xs[a]
                        qx1[q] = xs[e - 1] + 1
                    else:
                        qt[q] = -1
                # the rows' parameters as scalars (the window stores cannot alias them: with
                # the arrays the window building reloaded them for every body; pairs() of the
                # reference 7.02-7.20 -> 6.72-6.83 ms, alternated six times, 2026-11-27)
                f0t, f0x0, f0x1 = qt[0], qx0[0], qx1[0]
                f1t, f1s, f1e, f1x0, f1x1 = qt[1], qs[1], qe[1], qx0[1], qx1[1]
                f2t, f2s, f2e, f2x0, f2x1 = qt[2], qs[2], qe[2], qx0[2], qx1[2]
                f3t, f3s, f3e, f3x0, f3x1 = qt[3], qs[3], qe[3], qx0[3], qx1[3]
                f4t, f4s, f4e, f4x0, f4x1 = qt[4], qs[4], qe[4], qx0[4], qx1[4]
                # every window of this row's bodies is x cells of a long row of their grid
                narrow = min(f0t, f1t, f2t, f3t, f4t) >= 0 and not coarse_probe
                for a in range(s0, s1):
                    x = np.int64(xs[a])
                    # own row: the rest of the cell and the +x cell (they follow a), and
                    # across the wrap the x = 0 cell after x = mx (in a short row the ends
                    # counted; until 2026-11-27 a short row was tested whole: all after a)
                    # (a window is written always and kept if not empty: k += end > start,
                    # no branch; about half of the windows are empty)
                    wlo[0] = a + 1
                    whi[0] = first_in(f0t, s0, s1 - s0, f0x0, f0x1, x + 2)
                    k = np.int64(whi[0] > a + 1)
                    if x == mx:
                        wlo[k] = s0
                        whi[k] = first_in(f0t, s0, s1 - s0, f0x0, f0x1, np.int64(1))
                        k += 1
                    # the four forward rows: three x cells each
                    k = forward(k, x, mx, f1t, f1s, f1e, f1x0, f1x1)
                    k = forward(k, x, mx, f2t, f2s, f2e, f2x0, f2x1)
                    k = forward(k, x, mx, f3t, f3s, f3e, f3x0, f3x1)
                    k = forward(k, x, mx, f4t, f4s, f4e, f4x0, f4x1)
                    # every coarser grid with many bodies: the rows of the cells that can hold
                    # a partner (centres within half a cell of the AABB: at most 3 x 3 x 3)
                    if coarse_probe:
                        k = coarse_windows(r, a, k)
                    run_windows(a, k, narrow)
        # a sparse coarser grid: its bodies against every finer body, which precede them
        if r > 0 and 0 < G.count[g] <= SCAN_COARSE_MAX:
            fine_end = rows[rb]
            for a in range(fine_end, rows[rb + ny * nz]):
                scan_all(a, fine_end)
    return st[1] + st[0]


#: ``find_pairs_rows`` with the sparse grids swept by ``flat_sweep`` (see the module's notes)
find_pairs_rows_flat = variant(find_pairs_rows.py_func, "_flat", _FLAT=True, _IX=np.uintp)
