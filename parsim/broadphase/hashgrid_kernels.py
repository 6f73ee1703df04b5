"""Numba kernels of the hierarchical hash grid (HHG); the Python front end is ``hashgrids.py``.

Data layout (all flat numpy arrays; see Schornbaum 2009, sections 3.1-3.6):

* ``GridTable`` -- one row per hash grid (at most ``MAX_GRIDS``), created lazily by Algorithm 3:
  cell size and its inverse, ``bits`` = log2 of the cell count per axis (powers of two, so the
  modulo of geometric hashing is a bit mask), ``base`` = offset of the grid's cells in the flat
  ``cells`` array, ``count`` = bodies held, ``order`` = grid ids sorted by cell size (``rank`` is
  its inverse), ``clo``/``chi`` = grow-only bounds of the centres stored (clip rays), ``n[0]`` =
  number of grids.
* ``cells`` -- int32 per cell of every grid: the index of the cell's container plus one, or 0
  when empty (so that a new table is ``np.zeros``: the pages no cell of it touches are never
  written, where a table of -1 was written whole; a fresh structure of 300,000 bodies has a
  64 MB table, of which its bodies touch a few MB).
  That is the only per-cell memory (4 bytes): neighbour offsets are not stored but computed by
  wrap arithmetic on the three axis indices, and empty cells own no container.
* ``Containers`` -- dense list of the occupied cells of all grids (this *is* the grid-global list
  of occupied cells of the thesis): one int32 row per container (cell, grid, body count,
  first/last block, a query stamp; columns ``C_*``), so an edit touches one line of it.
  Removing the last body of a cell swap-removes its container, O(1).
* ``BlockPool`` -- a container's bodies live in a doubly linked chain of fixed blocks of
  ``BLOCK`` int32 slots, taken from one pool with a free list. Every body remembers its entry
  (``block * BLOCK + offset``), so removal moves the container's last entry into the hole and
  frees the tail block when it empties: O(1) whatever the cell's population.

A body is hashed by the centre of its AABB; a grid is *suitable* for a body of size ``s`` (longest
AABB edge) when ``cell / f <= s < cell``. Because every body is smaller than its grid's cell, two
bodies of one grid can only overlap if their cells are neighbours, and a body overlapping a body of
a coarser grid H has its centre within the cells of H covering its AABB grown by half a cell of H.
"""

from __future__ import annotations

import math
from collections import namedtuple

import numpy as np
from numba import njit

from .base import grow_hits, ray_box_enter
from .prefetch import prefetch


BLOCK = 4
MAX_GRIDS = 64
HASH_LIMIT = 2.0**50  # |coordinate| / cell size above which float64 cannot hash exactly (thesis 3.2)
ID_BITS = 27  # containers (<= bodies) must stay below 2**ID_BITS (checked by the front end)

GridTable = namedtuple("GridTable", "cell inv bits base count order rank clo chi n")
Containers = namedtuple("Containers", "row n")
# the columns of a container's row (int32, 8 per row: one row is half a cache line, so an edit
# touches one line of container data instead of one per field; the table is aligned to a line,
# see new_containers)
C_CELL, C_GRID, C_SIZE, C_HEAD, C_TAIL, C_STAMP = 0, 1, 2, 3, 4, 5
C_COLS = 8
BlockPool = namedtuple("BlockPool", "entries next prev meta")  # meta: [high-water, free head]

# status codes returned by kernels
OK = 0
TOO_MANY_GRIDS = 1
NOT_HASHABLE = 2
BAD_BOX = 3  # a non-finite corner, lo > hi or an edge that overflows (base.check_boxes names it)
TOO_LARGE = 4  # a body whose grid's cell size would overflow float64


def new_grid_table() -> GridTable:
    g = MAX_GRIDS
    return GridTable(
        cell=np.zeros(g), inv=np.zeros(g), bits=np.zeros((g, 3), np.int64),
        base=np.full(g, -1, np.int64), count=np.zeros(g, np.int64),
        order=np.zeros(g, np.int64), rank=np.zeros(g, np.int64),
        clo=np.full((g, 3), np.inf), chi=np.full((g, 3), -np.inf), n=np.zeros(1, np.int64),
    )


def aligned_empty(shape: tuple, dtype, align: int = 64) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose data starts on an ``align``-byte boundary (numpy only
    promises 16 bytes)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize  # (np.prod: 2 us of a small structure's add)
    buf = np.empty(nbytes + align, np.uint8)
    start = -buf.ctypes.data % align
    return buf[start: start + nbytes].view(dtype).reshape(shape)


def new_containers(cap: int) -> Containers:
    # rows are written when a container is created (rows >= n are never read): np.empty, so
    # that capacity not used yet costs no page faults. Aligned to a cache line, so that no
    # 32-byte row straddles two lines: with numpy's 16-byte alignment, which left half of the
    # rows split (their tail and the rest in the next line, which the row prefetch of
    # edit_cells does not fetch) or none, depending on where malloc put the array, a reused
    # structure of 1e6 bodies took 98 ns per body to add and remove, aligned 88 (removals
    # 52 -> 43; 1e4 bodies unchanged, 45; 2026-11-29)
    return Containers(aligned_empty((cap, C_COLS), np.int32), np.zeros(1, np.int64))


def new_pool(cap_blocks: int) -> BlockPool:
    # blocks are written when allocated (entries, next, prev): np.empty as above
    return BlockPool(np.empty(cap_blocks * BLOCK, np.int32), np.empty(cap_blocks, np.int32),
                     np.empty(cap_blocks, np.int32), np.array([0, -1], np.int64))


# ------------------------------------------------------------------------------------------
# hashing
# ------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _coord(x, inv):
    return np.int64(np.floor(x * inv))


@njit(cache=True, inline="always")
def _index_s(ix, iy, iz, bx, by, mx, my, mz):
    """_index with the grid's shifts and masks already unpacked (hot loops)."""
    return (ix & mx) | ((iy & my) << bx) | ((iz & mz) << (bx + by))


@njit(cache=True, inline="always")
def _cell_of(cx, cy, cz, inv, bx, by, bz):
    """Linear cell index of a centre in a grid of inverse cell size ``inv`` and ``2**b*`` cells
    per axis (scalars only: no per-call reference counting)."""
    return _index_s(_coord(cx, inv), _coord(cy, inv), _coord(cz, inv), bx, by,
                    (np.int64(1) << bx) - 1, (np.int64(1) << by) - 1, (np.int64(1) << bz) - 1)


@njit(cache=True)
def _create_grid(G, cell, pos, init_bits):
    """Create a grid of the given cell size at rank ``pos`` of the order; return its id."""
    ng = G.n[0]
    g = ng
    G.cell[g] = cell
    G.inv[g] = 1.0 / cell
    for d in range(3):
        G.bits[g, d] = init_bits
        G.clo[g, d] = np.inf
        G.chi[g, d] = -np.inf
    G.base[g] = -1  # cells not allocated yet (the Python owner allocates them)
    G.count[g] = 0
    for r in range(ng, pos, -1):
        G.order[r] = G.order[r - 1]
    G.order[pos] = g
    for r in range(ng + 1):
        G.rank[G.order[r]] = r
    G.n[0] = ng + 1
    return g


@njit(cache=True)
def assign_grids(lo, hi, idx, out_grid, G, f, init_bits):
    """Choose (or create) the suitable grid of each body ``idx[i]`` of ``lo``/``hi``.

    Writes ``out_grid[i]``; may append rows to ``G``. Returns ``(status, i)``: OK, or
    TOO_MANY_GRIDS / NOT_HASHABLE / TOO_LARGE (its cell size would overflow float64; a cell of
    infinite size would never be left by the search below) with the offending position ``i``.
    """
    sqrt_f = np.sqrt(f)
    for i in range(idx.shape[0]):
        s = idx[i]
        size = max(hi[s, 0] - lo[s, 0], hi[s, 1] - lo[s, 1], hi[s, 2] - lo[s, 2])
        ng = G.n[0]
        g = -1
        if ng == 0:
            if not (size * sqrt_f < np.inf):
                return TOO_LARGE, i
            g = _create_grid(G, size * sqrt_f if size > 0.0 else 1.0, 0, init_bits)
        elif size <= 0.0:
            g = G.order[0]  # a point fits the finest grid (any cell larger than it would do)
        else:
            for r in range(ng):
                x = G.cell[G.order[r]]
                if size < x:
                    x = x / f
                    if size < x:
                        while size < x:
                            x = x / f
                        if ng == MAX_GRIDS:
                            return TOO_MANY_GRIDS, i
                        g = _create_grid(G, x * f, r, init_bits)
                    else:
                        g = G.order[r]
                    break
            if g < 0:  # larger than every cell: new coarsest grid
                x = G.cell[G.order[ng - 1]]
                while size >= x:
                    x = x * f
                if not (x < np.inf):
                    return TOO_LARGE, i
                if ng == MAX_GRIDS:
                    return TOO_MANY_GRIDS, i
                g = _create_grid(G, x, ng, init_bits)
        far = max(abs(0.5 * (lo[s, 0] + hi[s, 0])), abs(0.5 * (lo[s, 1] + hi[s, 1])),
                  abs(0.5 * (lo[s, 2] + hi[s, 2])))
        if far * G.inv[g] > HASH_LIMIT:
            return NOT_HASHABLE, i
        out_grid[i] = g
    return OK, -1


# ------------------------------------------------------------------------------------------
# containers and blocks
# ------------------------------------------------------------------------------------------

# Numba note: a jitted helper that takes arrays (or tuples of arrays) as arguments pays an atomic
# reference-count increment and decrement per array per call, even when inlined; in these
# per-body loops that cost ~100x the work itself. The helpers are therefore closures defined
# inside the kernel, which numba inlines with the enclosing arrays captured, not passed.

@njit(cache=True, inline="always")
def _grow_centre_bounds(clo, chi, g, cx, cy, cz):
    """Grow grid g's grow-only bounds of the stored centres (used to clip rays) by one centre."""
    clo[g, 0] = min(clo[g, 0], cx)
    clo[g, 1] = min(clo[g, 1], cy)
    clo[g, 2] = min(clo[g, 2], cz)
    chi[g, 0] = max(chi[g, 0], cx)
    chi[g, 1] = max(chi[g, 1], cy)
    chi[g, 2] = max(chi[g, 2], cz)


INSERT = 0
REMOVE = 1
MOVE = 2
PF_CELL = 16  # prefetch distances of edit_cells, in bodies: the cell-table entry, and
PF_ROW = 6    # the container row (and block entry) once the entry has arrived
#: an insert's third prefetch, once the container row has arrived: the entry it writes (since
#: 2026-11-29; reused structure, 1e6 bodies: add 49-51 -> 47-48 ns per body, twice; 1e4 and
#: 1e5 unchanged). The same for a removal's filling body (its ``b_entry``) made removals slower
PF_ENTRY = 2


@njit(cache=True)
def edit_cells(op, slots, new_cell, lo, hi, b_grid, b_cell, b_entry, G, cells, C, P):
    """Insert, remove or move bodies in their cells; O(1) each.

    * ``op == INSERT``: put bodies (``b_grid`` already set) into the cell of their centre;
      writes b_cell, b_entry (``new_cell`` unused).
    * ``op == REMOVE``: take bodies out of their cells (their slots stay); sets b_grid to -1.
    * ``op == MOVE``: move body ``slots[i]`` to the container of cell ``new_cell[i]`` (same
      grid) when that differs from its container's cell ``b_cell``. The update does not call
      it: it notes the new cells (:func:`note_moves`) and the containers follow when
      something reads them (``HierarchicalHashGrid._sync``).

    ``b_cell`` here is the cell whose container holds each body (the grid's ``_b_home``).

    A container's bodies sit in a chain of BLOCK-entry blocks; every body remembers its entry
    (block * BLOCK + offset), so a removal moves the container's last entry into the hole, frees an
    emptied tail block, and swap-removes an emptied container from the dense list.
    """

    def alloc_block():
        b = P.meta[1]
        if b >= 0:
            P.meta[1] = P.next[b]
        else:
            b = P.meta[0]
            P.meta[0] = b + 1
        P.next[b] = -1
        P.prev[b] = -1
        return b

    def insert(s, g, cell):
        k = cells[G.base[g] + cell] - 1
        if k < 0:
            k = C.n[0]
            C.n[0] = k + 1
            C.row[k, C_CELL] = cell
            C.row[k, C_GRID] = g
            C.row[k, C_SIZE] = 0
            b = alloc_block()
            C.row[k, C_HEAD] = b
            C.row[k, C_TAIL] = b
            C.row[k, C_STAMP] = 0
            cells[G.base[g] + cell] = k + 1
        p = C.row[k, C_SIZE]
        r = p % BLOCK
        if p > 0 and r == 0:
            nb = alloc_block()
            t = C.row[k, C_TAIL]
            P.next[t] = nb
            P.prev[nb] = t
            C.row[k, C_TAIL] = nb
        e = C.row[k, C_TAIL] * BLOCK + r
        P.entries[e] = s
        b_entry[s] = e
        C.row[k, C_SIZE] = p + 1
        G.count[g] += 1

    def remove(s, g, cell):
        k = cells[G.base[g] + cell] - 1
        e = b_entry[s]
        p = C.row[k, C_SIZE] - 1
        t = C.row[k, C_TAIL]
        last_e = t * BLOCK + p % BLOCK
        if last_e != e:
            m = P.entries[last_e]
            P.entries[e] = m
            b_entry[m] = e
        C.row[k, C_SIZE] = p
        if p % BLOCK == 0:  # the tail block is empty now: free it
            pt = P.prev[t]
            P.next[t] = P.meta[1]
            P.meta[1] = t
            C.row[k, C_TAIL] = pt
            if pt >= 0:
                P.next[pt] = -1
        if p == 0:  # the cell is empty: swap-remove its container
            cells[G.base[g] + cell] = 0
            last = C.n[0] - 1
            if k != last:
                C.row[k, C_CELL] = C.row[last, C_CELL]
                C.row[k, C_GRID] = C.row[last, C_GRID]
                C.row[k, C_SIZE] = C.row[last, C_SIZE]
                C.row[k, C_HEAD] = C.row[last, C_HEAD]
                C.row[k, C_TAIL] = C.row[last, C_TAIL]
                C.row[k, C_STAMP] = C.row[last, C_STAMP]
                cells[G.base[C.row[k, C_GRID]] + C.row[k, C_CELL]] = k + 1
            C.n[0] = last
        G.count[g] -= 1

    # Inserts and removals: one pass lists the cell-table index of every body, a second edits,
    # prefetching (a hint, see prefetch.py) the cell-table entry of the body PF_CELL places
    # ahead and the container row of the body PF_ROW ahead (its cell entry has arrived by
    # then; for an insert only if the cell is occupied), for removals also its block entry, in
    # chunks of CHI bodies. At 1e6 bodies the cell table is 64 MB and every edit used to wait
    # for its entry: the prefetches halve the removals and take a quarter off the inserts
    # (2026-11-24, docs/broadphase.md). The insert's row prefetch, with one loop per
    # operation (a shared loop with both kinds of prefetch slowed the removals by 20 %),
    # took the insert pass at 1e6 from 64-71 to 36-39 ns per body into a grid already
    # allocated. The touch rounds used for moves (below) made inserts and removals 15-25 %
    # slower than no rounds at all.
    #
    # Moves (the containers catching up with the update), in chunks of CH movers: list the
    # bodies that change cell, touch what their edits will read in three dependent rounds
    # (independent loads within a round, so the cache misses overlap instead of queuing one
    # after another along each edit's chain cell -> container -> block -> entry), then edit.
    # The touched values are summed and returned only so that the compiler keeps the loads.
    # The rounds make the update of the reference scenario 15 % faster; prefetches in the
    # first round instead of loads gained nothing measurable there. Chunks of CH movers
    # rather than CH bodies: there ~10 % of the bodies change cell per step, so a chunk of 64
    # bodies held ~6 misses to overlap per round (move pass 2.5 -> 2.0 ms, 2026-11-24). (Until
    # 2026-11-27 every update made these moves; now only ``_sync`` does, see note_moves.)
    if op != MOVE:
        n_all = slots.shape[0]
        CHI = 4096  # bodies per chunk: ``at`` stays a small, reused scratch (no page faults)
        at = np.empty(min(n_all, CHI), dtype=np.int64)  # index into cells, -1: nothing to do
        for i0 in range(0, n_all, CHI):
            i1 = min(i0 + CHI, n_all)
            for i in range(i0, i1):
                s = slots[i]
                g = b_grid[s]
                if op == INSERT:
                    cx = 0.5 * (lo[s, 0] + hi[s, 0])
                    cy = 0.5 * (lo[s, 1] + hi[s, 1])
                    cz = 0.5 * (lo[s, 2] + hi[s, 2])
                    c = _cell_of(cx, cy, cz, G.inv[g], G.bits[g, 0], G.bits[g, 1], G.bits[g, 2])
                    b_cell[s] = c
                    at[i - i0] = G.base[g] + c
                    _grow_centre_bounds(G.clo, G.chi, g, cx, cy, cz)
                else:
                    at[i - i0] = G.base[g] + b_cell[s] if g >= 0 else -1
            if op == INSERT:
                for i in range(i0, i1):
                    j = i - i0 + PF_CELL
                    if j < i1 - i0:
                        prefetch(cells, at[j])
                    j = i - i0 + PF_ROW
                    if j < i1 - i0:
                        kj = cells[at[j]] - 1
                        if kj >= 0:  # an occupied cell: its container row is read too
                            prefetch(C.row[kj], 0)
                    j = i - i0 + PF_ENTRY
                    if j < i1 - i0:
                        kj = cells[at[j]] - 1
                        if kj >= 0:  # ... and the entry after its tail is written
                            prefetch(P.entries, C.row[kj, C_TAIL] * BLOCK
                                     + C.row[kj, C_SIZE] % BLOCK)
                    s = slots[i]
                    insert(s, b_grid[s], b_cell[s])
            else:
                for i in range(i0, i1):
                    j = i - i0 + PF_CELL
                    if j < i1 - i0 and at[j] >= 0:
                        prefetch(cells, at[j])
                    j = i - i0 + PF_ROW
                    if j < i1 - i0 and at[j] >= 0:
                        prefetch(C.row[max(cells[at[j]] - 1, 0)], 0)
                        prefetch(P.entries, b_entry[slots[i0 + j]])
                    if at[i - i0] < 0:
                        continue
                    s = slots[i]
                    remove(s, b_grid[s], b_cell[s])
                    b_grid[s] = -1
        return 0
    CH = 64
    mv = np.empty(CH, dtype=np.int64)
    cnew = np.empty(CH, dtype=np.int64)
    acc = 0
    n_all = slots.shape[0]
    i = 0
    while i < n_all:
        # list up to CH movers (bodies changing cell)
        nm = 0
        while i < n_all and nm < CH:
            s = slots[i]
            mv[nm] = i
            c = new_cell[i]
            cnew[nm] = c
            nm += (c >= 0) & (c != b_cell[s])
            i += 1
        for j in range(nm):
            s = slots[mv[j]]
            base = G.base[b_grid[s]]
            acc += cells[base + b_cell[s]] + cells[base + cnew[j]] + b_entry[s]
        for j in range(nm):
            s = slots[mv[j]]
            base = G.base[b_grid[s]]
            acc += C.row[cells[base + b_cell[s]] - 1, C_SIZE]
            k2 = cells[base + cnew[j]] - 1
            if k2 >= 0:
                acc += C.row[k2, C_TAIL]
        # the sole body of its cell moving to an empty cell (most movers where cells hold
        # fewer than one body on average) takes its container along: the container is
        # relabelled, its block and entry stay (no swap-remove, no block freed or taken)
        ns = 0
        for j in range(nm):
            s = slots[mv[j]]
            base = G.base[b_grid[s]]
            k = cells[base + b_cell[s]] - 1
            sole = C.row[k, C_SIZE] == 1 and cells[base + cnew[j]] == 0
            mv[ns] = mv[j]
            cnew[ns] = cnew[j]
            if sole:
                cells[base + b_cell[s]] = 0
                cells[base + cnew[j]] = k + 1
                C.row[k, C_CELL] = cnew[j]
                b_cell[s] = cnew[j]
            else:
                ns += 1
        nm = ns
        for j in range(nm):
            acc += P.entries[b_entry[slots[mv[j]]]]
        for j in range(min(nm, C.n[0])):  # the cells of the containers likely to fill holes
            kk = C.n[0] - 1 - j
            acc += cells[G.base[C.row[kk, C_GRID]] + C.row[kk, C_CELL]]
        for j in range(nm):
            s = slots[mv[j]]
            base = G.base[b_grid[s]]
            k = cells[base + b_cell[s]] - 1
            t = C.row[k, C_TAIL]
            acc += P.entries[t * BLOCK + (C.row[k, C_SIZE] - 1) % BLOCK] + P.next[t] + P.prev[t]
            k2 = cells[base + cnew[j]] - 1
            if k2 >= 0:
                acc += P.entries[C.row[k2, C_TAIL] * BLOCK]
        for j in range(nm):
            s = slots[mv[j]]
            g = b_grid[s]
            remove(s, g, b_cell[s])
            insert(s, g, cnew[j])
            b_cell[s] = cnew[j]
    return acc


@njit(cache=True)
def relocate_bodies(move_src, move_dst, b_grid, b_cell, b_home, b_entry, P):
    """Replay the body store's swap-remove moves on the per-body arrays and the cell entries."""
    for k in range(move_src.shape[0]):
        src = move_src[k]
        if src < 0:
            continue
        dst = move_dst[k]
        b_grid[dst] = b_grid[src]
        b_cell[dst] = b_cell[src]
        b_home[dst] = b_home[src]
        b_entry[dst] = b_entry[src]
        if b_grid[dst] >= 0:
            P.entries[b_entry[dst]] = dst


@njit(cache=True)
def clear_all(G, cells, C, P):
    """Empty every grid (keeping their sizes): the 'clear and re-insert' update strategy."""
    for k in range(C.n[0]):
        cells[G.base[C.row[k, C_GRID]] + C.row[k, C_CELL]] = 0
    C.n[0] = 0
    P.meta[0] = 0
    P.meta[1] = -1
    for g in range(G.n[0]):
        G.count[g] = 0


# ------------------------------------------------------------------------------------------
# Algorithm 2: the update phase
# ------------------------------------------------------------------------------------------

@njit(cache=True)
def is_identity(slots):
    """Whether ``slots[i] == i`` for every i (one branch-free pass)."""
    same = 0
    for i in range(slots.shape[0]):
        same += slots[i] == i
    return same == slots.shape[0]


@njit(cache=True)
def note_moves(slots, every, new_cell, lo_new, hi_new, lo, hi, b_cell, b_home, listed, dirty,
               n_dirty):
    """Pass 2 of the incremental update: store the new AABBs and the new cells.

    ``slots[i]`` takes ``lo_new[i]``/``hi_new[i]`` and, if ``new_cell[i] >= 0`` (-1: a grid
    changer, left to the caller), the cell ``new_cell[i]`` in ``b_cell``, the cell the detection
    step reads. The containers are not edited: a body whose cell leaves its container's cell
    ``b_home`` is appended to ``dirty`` (from ``n_dirty`` on) unless already ``listed``, so the
    list never holds a body twice, and ``_sync`` moves the listed bodies before anything reads
    the containers (queries, removals). ``every``: slots is 0, 1, ..., n - 1, and the caller
    has copied the AABBs already (``np.copyto``: glibc's memcpy, 40 us faster than this
    kernel's loop for the very polydisperse scenario's 40,000 boxes after other work, 2026-11-29).
    ``new_cell`` is overwritten (a scratch afterwards). Returns the new length of ``dirty``."""
    n_all = slots.shape[0]
    if not every:
        for i in range(n_all):
            s = slots[i]
            for d in range(3):
                lo[s, d] = lo_new[i, d]
                hi[s, d] = hi_new[i, d]
    # the bodies whose cell changed (about one in ten per step in the benchmark's scenarios),
    # listed first without a branch: (index << 32) | cell, written over new_cell's entries
    # already read (k <= i). With the test as a branch, mispredicted for most of the changed
    # bodies, the very polydisperse scenario's pass took 49 us after a pairs() call, with the
    # list 35 (40,000 bodies; 2026-11-29)
    # (indices as unsigned integers, all of them >= 0: no code for negative ones; 45 -> 35 us
    # for the very polydisperse scenario, 140 -> 116 for the reference, 2026-11-29)
    k = 0
    for i in range(n_all):
        c = new_cell[i]
        new_cell[np.uintp(k)] = (np.int64(i) << 32) | c
        k += (c >= 0) & (c != b_cell[np.uintp(slots[i])])
    m = n_dirty
    for t in range(k):
        w = new_cell[t]
        s = np.uintp(slots[np.uintp(w >> 32)])
        c = np.int32(w & 0xFFFFFFFF)
        if c != b_home[s] and listed[s] == 0:
            listed[s] = 1
            dirty[np.uintp(m)] = s
            m += 1
        b_cell[s] = c
    return m


@njit(cache=True, inline="always")
def _order_key(v):
    """A finite float64 as an int64 in the same order: its bits, with the magnitude bits
    flipped for a negative number (:func:`_from_order_key` is the inverse)."""
    b = np.float64(v).view(np.int64)
    return b ^ ((b >> 63) & np.int64(0x7FFFFFFFFFFFFFFF))


@njit(cache=True, inline="always")
def _from_order_key(k):
    """The float64 of an :func:`_order_key`."""
    return np.int64(k ^ ((k >> 63) & np.int64(0x7FFFFFFFFFFFFFFF))).view(np.float64)


#: 1.5 * 2**52: ``v + MAGIC`` holds the integer ``v`` (|v| < 2**51) in its low mantissa bits
MAGIC = 6755399441055744.0


@njit(cache=True, error_model="numpy")
def _scan_finest(grid_of, lo_new, hi_new, G, f, out_cell):
    """:func:`update_scan` for the bodies of the finest grid (most bodies in most scenes; the
    grid of each body of the batch in ``grid_of``), in a loop LLVM vectorises: no branch, and
    the cell coordinates' low bits come from the bits of ``floor(v) + MAGIC`` (the same
    integers as ``_coord`` below the hash limit) instead of a float-to-int64 conversion,
    which AVX2 lacks. A body of another grid gets -1 here and is
    left to the caller. The finest grid's centre bounds grow by every body's centre (the
    others' and the changers' too: the bounds may be larger than needed, never smaller).
    Returns (changers among the finest grid's bodies, whether one of their centres is too far
    to hash, bodies of other grids, the first and last index of those, whether a box is bad: a
    non-finite corner, lo > hi or an edge too long for float64)."""
    g = G.order[0]
    cell = G.cell[g]
    inv = G.inv[g]
    lower = cell / f
    bx = G.bits[g, 0]
    by = G.bits[g, 1]
    mx = (np.int64(1) << bx) - 1
    my = (np.int64(1) << by) - 1
    mz = (np.int64(1) << G.bits[g, 2]) - 1
    sy = bx
    sz = bx + by
    lo_f = lo_new.reshape(-1)
    hi_f = hi_new.reshape(-1)
    # the bounds as order-preserving integer keys: integer minima and maxima vectorise,
    # float ones do not (the scan of 1e5 bodies: 0.63 ms with float bounds, 0.26 without)
    big = np.int64(1) << 62
    klo0 = klo1 = klo2 = big
    khi0 = khi1 = khi2 = -big
    changers = 0
    others = 0
    n_i = np.int64(out_cell.shape[0])
    first = n_i
    last = np.int64(-1)
    far = 0
    good = 0
    for i in range(out_cell.shape[0]):
        fin = grid_of[i] == g
        j = 3 * i
        a0, a1, a2 = lo_f[j], lo_f[j + 1], lo_f[j + 2]
        b0, b1, b2 = hi_f[j], hi_f[j + 1], hi_f[j + 2]
        size = max(b0 - a0, max(b1 - a1, b2 - a2))
        good += ((abs(a0) < np.inf) & (abs(a1) < np.inf) & (abs(a2) < np.inf)
                 & (abs(b0) < np.inf) & (abs(b1) < np.inf) & (abs(b2) < np.inf)
                 & (a0 <= b0) & (a1 <= b1) & (a2 <= b2) & (size < np.inf))
        ok = fin & (size < cell) & ((size >= lower) | (size <= 0.0))
        cx = 0.5 * (a0 + b0)
        cy = 0.5 * (a1 + b1)
        cz = 0.5 * (a2 + b2)
        far |= ok & (max(abs(cx), max(abs(cy), abs(cz))) * inv > HASH_LIMIT)
        ix = np.float64(np.floor(cx * inv) + MAGIC).view(np.int64)
        iy = np.float64(np.floor(cy * inv) + MAGIC).view(np.int64)
        iz = np.float64(np.floor(cz * inv) + MAGIC).view(np.int64)
        c = (ix & mx) | ((iy & my) << sy) | ((iz & mz) << sz)
        out_cell[i] = c if ok else -1
        changers += np.int64(fin & ~ok)
        others += np.int64(~fin)
        first = min(first, i + np.int64(fin) * n_i)   # (arithmetic, not a branch: vectorised)
        last = max(last, i - np.int64(fin) * n_i)
        kx = _order_key(cx)
        ky = _order_key(cy)
        kz = _order_key(cz)
        klo0 = min(klo0, kx)
        klo1 = min(klo1, ky)
        klo2 = min(klo2, kz)
        khi0 = max(khi0, kx)
        khi1 = max(khi1, ky)
        khi2 = max(khi2, kz)
    bad = good != out_cell.shape[0]
    if not far and not bad and out_cell.shape[0]:
        G.clo[g, 0] = min(G.clo[g, 0], _from_order_key(klo0))
        G.clo[g, 1] = min(G.clo[g, 1], _from_order_key(klo1))
        G.clo[g, 2] = min(G.clo[g, 2], _from_order_key(klo2))
        G.chi[g, 0] = max(G.chi[g, 0], _from_order_key(khi0))
        G.chi[g, 1] = max(G.chi[g, 1], _from_order_key(khi1))
        G.chi[g, 2] = max(G.chi[g, 2], _from_order_key(khi2))
    return changers, far, others, first, last, bad


@njit(cache=True)
def update_scan(slots, every, lo_new, hi_new, b_grid, G, f, out_cell):
    """Pass 1 of the incremental update (no mutation except grow-only centre bounds).

    For each body: if its grid is still suitable, ``out_cell[i]`` = its new cell; else -1 (it must
    change grid). ``every``: slots is 0, 1, ..., n - 1 (:func:`is_identity`). Returns
    ``(status, i, changers)``: BAD_BOX if a box has a non-finite corner, lo > hi or an edge too
    long for float64 (checked in the same vectorised pass, so that ``update`` makes no pass of
    its own; nothing changed), NOT_HASHABLE at the first body whose centre is too far from the
    origin for its grid; the number of bodies marked -1.
    """
    finest = G.order[0]
    ng = G.n[0]
    # the finest grid's bodies first, without branches; the loop below then does the others,
    # if any, or everything if a centre is too far to hash (it finds the first such body)
    n = slots.shape[0]
    # each body's grid in a contiguous array (a gather through slots stops the vectoriser)
    grid_of = b_grid[:n] if every else b_grid[slots]
    changers, far, others, first, last, bad_box = _scan_finest(grid_of, lo_new, hi_new, G, f,
                                                               out_cell)
    if bad_box:
        return BAD_BOX, -1, 0
    if not far and others == 0:
        return OK, -1, changers
    skip = not far
    if not skip:
        changers = 0
        first = 0
        last = n - 1
    lower = np.empty(ng)  # per grid the lower suitability bound: one division per grid
    for g in range(ng):
        lower[g] = G.cell[g] / f
    # (the finest grid's bodies reach this loop only on the way to an error, so every grid's
    # centre bounds are grown in memory here)
    status = OK
    bad = -1
    # (only from the first to the last body of another grid, unless a centre is too far: the
    # very polydisperse scenario's one big body made this a pass over all 40,000, 22 us of 71)
    for i in range(first, last + 1):
        g = b_grid[slots[i]]
        if skip and g == finest:
            continue
        size = max(hi_new[i, 0] - lo_new[i, 0], hi_new[i, 1] - lo_new[i, 1],
                   hi_new[i, 2] - lo_new[i, 2])
        cell_size = G.cell[g]
        if size < cell_size and (size >= lower[g] or (g == finest and size <= 0.0)):
            inv = G.inv[g]
            cx = 0.5 * (lo_new[i, 0] + hi_new[i, 0])
            cy = 0.5 * (lo_new[i, 1] + hi_new[i, 1])
            cz = 0.5 * (lo_new[i, 2] + hi_new[i, 2])
            if max(abs(cx), abs(cy), abs(cz)) * inv > HASH_LIMIT:
                status = NOT_HASHABLE
                bad = i
                break
            out_cell[i] = _cell_of(cx, cy, cz, inv, G.bits[g, 0], G.bits[g, 1], G.bits[g, 2])
            _grow_centre_bounds(G.clo, G.chi, g, cx, cy, cz)
        else:
            out_cell[i] = -1
            changers += 1
    return status, bad, changers


# ------------------------------------------------------------------------------------------
# Algorithm 4: the detection step is hashgrid_detect.py
# ------------------------------------------------------------------------------------------

#: A coarser grid with at most this many bodies is not probed cell by cell from every finer
#: body; its bodies are tested against all finer bodies instead (a contiguous scan, eight
#: candidates per vector test, where a probe of the usual 2 x 2 rows costs tens of ns per finer
#: body). Used by the detection step, ``hashgrid_detect.find_pairs_rows``.
SCAN_COARSE_MAX = 16


@njit(cache=True)
def query_box_cells(ids, lo, hi, G, cells, C, P, qlo, qhi):
    """Ids of bodies overlapping [qlo, qhi], visiting in each grid only the cells that can hold
    the centre of an overlapping body (the box grown by half a cell).

    Falls back to scanning every container when the cells to visit outnumber the bodies, or when
    the box is too far out to hash exactly. Each container is visited at most once per grid
    because a cell range never wraps onto itself (it is clipped to the grid's extent).
    """
    out = np.empty(64, dtype=np.int64)
    found = np.zeros(1, dtype=np.int64)

    def scan(k, out):  # test the bodies of container k; returns the (possibly grown) output
        m = found[0]
        b = C.row[k, C_HEAD]
        rem = C.row[k, C_SIZE]
        while rem > 0:
            cnt = min(rem, BLOCK)
            for j in range(cnt):
                s = P.entries[b * BLOCK + j]
                if not (lo[s, 0] > qhi[0] or qlo[0] > hi[s, 0] or lo[s, 1] > qhi[1]
                        or qlo[1] > hi[s, 1] or lo[s, 2] > qhi[2] or qlo[2] > hi[s, 2]):
                    if m == out.shape[0]:
                        grown = np.empty(2 * m, dtype=np.int64)
                        grown[:m] = out
                        out = grown
                    out[m] = ids[s]
                    m += 1
            rem -= cnt
            b = P.next[b]
        found[0] = m
        return out

    n_visit = 0.0
    for g in range(G.n[0]):
        if G.count[g] == 0:
            continue
        inv = G.inv[g]
        hc = 0.5 * G.cell[g]
        for d in range(3):
            if max(abs(qlo[d] - hc), abs(qhi[d] + hc)) * inv > HASH_LIMIT:
                n_visit = np.inf
        span = 1.0
        for d in range(3):
            w = np.floor((qhi[d] + hc) * inv) - np.floor((qlo[d] - hc) * inv) + 1.0
            span *= min(w, float(np.int64(1) << G.bits[g, d]))
        n_visit += span
    if n_visit > C.n[0]:
        for k in range(C.n[0]):
            out = scan(k, out)
        return out[: found[0]].copy()
    c0 = np.empty(3, dtype=np.int64)
    c1 = np.empty(3, dtype=np.int64)
    for g in range(G.n[0]):
        if G.count[g] == 0:
            continue
        inv = G.inv[g]
        hc = 0.5 * G.cell[g]
        for d in range(3):
            c0[d] = _coord(qlo[d] - hc, inv)
            c1[d] = _coord(qhi[d] + hc, inv)
            dim = np.int64(1) << G.bits[g, d]
            if c1[d] - c0[d] + 1 > dim:
                c1[d] = c0[d] + dim - 1
        base = G.base[g]
        bx = G.bits[g, 0]
        by = G.bits[g, 1]
        mx = (np.int64(1) << bx) - 1
        my = (np.int64(1) << by) - 1
        mz = (np.int64(1) << G.bits[g, 2]) - 1
        for cz in range(c0[2], c1[2] + 1):
            for cy in range(c0[1], c1[1] + 1):
                for cx in range(c0[0], c1[0] + 1):
                    k = cells[base + _index_s(cx, cy, cz, bx, by, mx, my, mz)] - 1
                    if k >= 0:
                        out = scan(k, out)
    return out[: found[0]].copy()


@njit(cache=True)
def _clip_ray(o, inv_d, blo, bhi, t0, t1):
    """Clip [t0, t1] to the box [blo, bhi]; returns (t0, t1) with t0 > t1 when it misses."""
    for d in range(3):
        if np.isinf(inv_d[d]):
            if o[d] < blo[d] or o[d] > bhi[d]:
                return 1.0, 0.0
            continue
        ta = (blo[d] - o[d]) * inv_d[d]
        tb = (bhi[d] - o[d]) * inv_d[d]
        if ta > tb:
            ta, tb = tb, ta
        t0 = max(t0, ta)
        t1 = min(t1, tb)
    return t0, t1


@njit(cache=True)
def raycast_cells(ids, lo, hi, G, cells, C, P, o, d, t_max, stamp):
    """Bodies whose AABB the segment o + t d (0 <= t <= t_max) enters, by grid traversal.

    In every grid the segment is clipped to the grid's centre bounds grown by one cell, then
    walked cell by cell (Amanatides & Woo); at each cell the 27-neighbourhood is searched, since
    a hit body's centre lies within half a cell of the hit point. A per-container stamp visits
    each container once. A grid whose walk would visit more cells than it has bodies is scanned
    instead. Returns (ids, t_enter), unsorted.
    """
    inv_d = np.empty(3)
    for a in range(3):
        inv_d[a] = 1.0 / d[a] if d[a] != 0.0 else np.inf
    out = np.empty(64, dtype=np.int64)
    tt = np.empty(64, dtype=np.float64)
    found = np.zeros(1, dtype=np.int64)

    def test(k, out, tt):  # slab-test the bodies of container k; returns the grown outputs
        m = found[0]
        b = C.row[k, C_HEAD]
        rem = C.row[k, C_SIZE]
        while rem > 0:
            cnt = min(rem, BLOCK)
            for j in range(cnt):
                s = P.entries[b * BLOCK + j]
                t = ray_box_enter(o[0], o[1], o[2], inv_d[0], inv_d[1], inv_d[2], lo[s], hi[s],
                                  t_max)
                if t >= 0.0:
                    if m == out.shape[0]:
                        out, tt = grow_hits(out, tt)
                    out[m] = ids[s]
                    tt[m] = t
                    m += 1
            rem -= cnt
            b = P.next[b]
        found[0] = m
        return out, tt

    p = np.empty(3)
    cur = np.empty(3, dtype=np.int64)
    step = np.empty(3, dtype=np.int64)
    t_next = np.empty(3)
    t_delta = np.empty(3)
    blo = np.empty(3)
    bhi = np.empty(3)
    for g in range(G.n[0]):
        if G.count[g] == 0:
            continue
        cell = G.cell[g]
        inv = G.inv[g]
        for a in range(3):
            blo[a] = G.clo[g, a] - cell
            bhi[a] = G.chi[g, a] + cell
        t0, t1 = _clip_ray(o, inv_d, blo, bhi, 0.0, t_max)
        if t0 > t1:
            continue
        # cells the walk crosses (bound), vs bodies in the grid
        walk = 4.0
        far = False
        for a in range(3):
            walk += (t1 - t0) * abs(d[a]) * inv
            p[a] = o[a] + t0 * d[a]
            if max(abs(blo[a]), abs(bhi[a])) * inv > HASH_LIMIT:
                far = True
        scan = far or walk * 27.0 > G.count[g] + 27.0
        if scan:
            for k in range(C.n[0]):
                if C.row[k, C_GRID] == g:
                    out, tt = test(k, out, tt)
            continue
        stamp[0] += 1
        mark = stamp[0]
        for a in range(3):
            cur[a] = _coord(p[a], inv)
            if d[a] > 0.0:
                step[a] = 1
                t_next[a] = t0 + ((cur[a] + 1) * cell - p[a]) * inv_d[a]
                t_delta[a] = cell * inv_d[a]
            elif d[a] < 0.0:
                step[a] = -1
                t_next[a] = t0 + (cur[a] * cell - p[a]) * inv_d[a]
                t_delta[a] = -cell * inv_d[a]
            else:
                step[a] = 0
                t_next[a] = np.inf
                t_delta[a] = np.inf
        base = G.base[g]
        bx = G.bits[g, 0]
        by = G.bits[g, 1]
        mx = (np.int64(1) << bx) - 1
        my = (np.int64(1) << by) - 1
        mz = (np.int64(1) << G.bits[g, 2]) - 1
        n_steps = 0
        max_steps = np.int64(walk) + 8
        while True:
            for dz in range(-1, 2):
                for dy in range(-1, 2):
                    for dx in range(-1, 2):
                        k = cells[base + _index_s(cur[0] + dx, cur[1] + dy, cur[2] + dz,
                                                  bx, by, mx, my, mz)] - 1
                        if k < 0 or C.row[k, C_STAMP] == mark:
                            continue
                        C.row[k, C_STAMP] = mark
                        out, tt = test(k, out, tt)
            # advance to the next cell along the ray
            a = 0
            if t_next[1] < t_next[a]:
                a = 1
            if t_next[2] < t_next[a]:
                a = 2
            if t_next[a] > t1 or n_steps > max_steps:
                break
            cur[a] += step[a]
            t_next[a] += t_delta[a]
            n_steps += 1
    n_out = found[0]
    return out[:n_out].copy(), tt[:n_out].copy()
