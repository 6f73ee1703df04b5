"""The hierarchical hash grid (HHG) of the pe physics engine (Schornbaum 2009), parsim's default
broad phase.

Bodies are AABBs; each is stored in exactly one cell of exactly one grid of a hierarchy whose cell
sizes differ by the hierarchy factor ``f``. Grids are created lazily (Algorithm 3), are hashed and
spatially unbounded (power-of-two cell counts per axis; the modulo is a bit mask), grow by doubling
every axis when a grid's bodies exceed ``cells / min_grid_density``, and never shrink. Adding,
removing and re-hashing a body are O(1) (per-cell block containers with swap-remove, a dense list of
occupied cells). Below ``activation_threshold`` bodies no grid is built and pairs are found by an
all-pairs test; above it the grids are built, irrevocably. The update phase (Algorithm 2) re-hashes
only bodies whose cell or grid changed: a body changing grid leaves its container and enters
another at once; a body changing cell within its grid only has its new cell noted (the detection
step reads the cells, not the containers), and its container follows before the next query or
removal (``_sync``, O(1) per body listed); ``update_strategy="reinsert"`` clears and re-inserts
everything instead (kept for comparison, thesis Fig. 25). The detection step (Algorithm 4) reports
each overlapping pair once. The kernels and the memory layout are in ``hashgrid_kernels.py``, the
detection step in ``hashgrid_detect.py`` (bodies sorted into rows of cells, 8-wide vector tests).
"""

from __future__ import annotations

import math

import numpy as np

from . import hashgrid_kernels as K
from .hashgrid_detect import BOX_PAD, FX_PAD, find_pairs_rows, find_pairs_rows_flat, table_sizes
from .base import BroadPhase, BroadPhaseError, check_boxes, collect_pairs
from .brute_force import all_pairs, scan_box, scan_ray


_NO_CELLS = np.empty(0, dtype=np.int64)
_NO_SLOTS = np.empty(0, dtype=np.int64)  # no bodies dropped from grown grids


class HierarchicalHashGrid(BroadPhase):
    """Hierarchical hash grid broad phase.

    Parameters
    ----------
    hierarchy_factor : float > 1
        Ratio of the cell sizes of successive grids (thesis default 2).
    initial_cells : int, power of two >= 4
        Cells per axis of a newly created grid (thesis: 16, i.e. 4096 cells).
    min_grid_density : float > 0
        A grid doubles its cells per axis when its bodies exceed ``cells / min_grid_density``.
    activation_threshold : int >= 0
        With at most this many finite bodies no grid is built (all-pairs is faster).
    update_strategy : {"incremental", "reinsert"}
        Algorithm 2 (re-hash only what changed) or clear-and-re-insert on every ``update``.
    """

    # a grid grows to at most 2**_max_cell_bits cells (4 GiB of int32 cell table at 30); more
    # bodies in one grid than that allows raise BroadPhaseError (tests lower the limit)
    _max_cell_bits = 30
    # the x tables of the coarse grids' long rows (detection) hold up to this many entries per
    # body, plus the constant; rows beyond them are binary-searched (tests set 0 to force that)
    _coarse_table_per_body = 2
    _coarse_table_extra = 4096

    def __init__(self, hierarchy_factor: float = 2.0, initial_cells: int = 16,
                 min_grid_density: float = 8, activation_threshold: int = 32,
                 update_strategy: str = "incremental"):
        f = float(hierarchy_factor)
        if not (math.isfinite(f) and f > 1.0):
            raise BroadPhaseError(f"hierarchy_factor must be a finite number > 1, got {hierarchy_factor!r}")
        ic = int(initial_cells)
        if ic != initial_cells or ic < 4 or ic & (ic - 1):
            raise BroadPhaseError(
                f"initial_cells must be a power of two >= 4 (every cell needs 26 distinct "
                f"neighbours), got {initial_cells!r}")
        dens = float(min_grid_density)
        if not (math.isfinite(dens) and dens > 0):
            raise BroadPhaseError(f"min_grid_density must be a finite number > 0, got {min_grid_density!r}")
        thr = int(activation_threshold)
        if thr != activation_threshold or thr < 0:
            raise BroadPhaseError(f"activation_threshold must be an integer >= 0, got {activation_threshold!r}")
        if update_strategy not in ("incremental", "reinsert"):
            raise BroadPhaseError(
                f"update_strategy must be 'incremental' or 'reinsert', got {update_strategy!r}")
        super().__init__()
        self.hierarchy_factor = f
        self.initial_cells = ic
        self.min_grid_density = dens
        self.activation_threshold = thr
        self.update_strategy = update_strategy
        self._init_bits = ic.bit_length() - 1
        self._active = False
        self._G = K.new_grid_table()
        self._cells = np.empty(0, dtype=np.int32)
        self._new_body_arrays(self.bodies.capacity)
        self._stamp = np.zeros(1, dtype=np.int64)
        self._last_pairs = 0  # sizes the next pair buffer
        self._scratch = self._new_scratch(0)  # detection's compact arrays, reused between calls
        # which build of the detection runs next (see _pairs)
        self._flat_hint = True
        self._flat_wait = 0
        self._flag = np.zeros(1, dtype=np.int64)
        self._tables = self._new_tables(1, 1, 0)  # detection's row and x tables (grow with grids)
        self._new_cell = np.empty(0, dtype=np.int64)  # update's new cells, reused between calls
        # _prepare_grids' shortcut: the grids [0, _ng_ready) have cells, and each holds up to
        # _fits bodies without growing (the smallest cells / min_grid_density over them)
        self._ng_ready = 0
        self._fits = math.inf

    # ---- introspection ----------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """True once the grids are built (more than ``activation_threshold`` bodies were held)."""
        return self._active

    def grid_info(self) -> dict:
        """The grids, finest first: ``cell_size``, ``dims`` (cells per axis), ``n_bodies``."""
        ng = int(self._G.n[0])
        order = self._G.order[:ng]
        return {
            "cell_size": self._G.cell[order].copy(),
            "dims": (np.int64(1) << self._G.bits[order]).astype(np.int64),
            "n_bodies": self._G.count[order].copy(),
        }

    def _nbytes(self) -> int:
        arrays = [self._cells, self._b_grid, self._b_cell, self._b_home, self._b_entry,
                  self._dirty, self._listed, self._stamp,
                  *self._G, *self._C, *self._P, *self._scratch, *self._tables, self._new_cell]
        return sum(a.nbytes for a in arrays)

    # ---- capacity -----------------------------------------------------------------------------
    @staticmethod
    def _new_scratch(n: int) -> tuple:
        """``find_pairs_rows``' scratch for ``n`` bodies: two key arrays of the sorts, the compact
        AABBs (six coordinate arrays, padded with ``BOX_PAD`` boxes: a run's vector tests read up
        to ``BOX_PAD - 1`` entries past its start), the ids and the cells' x index in compact
        order (eight entries more, read past the end of a run by the counts and by the coarse
        scan's branch-free pair writes), and the x bounds as float32 for ``flat_sweep`` (92
        bytes per body with the x tables below)."""
        return (np.empty(n, np.int64), np.empty(n, np.int64), np.empty((6, n + BOX_PAD)),
                np.empty(n + 8, np.int64), np.empty(n + 8, np.int32),
                np.empty((2, n + FX_PAD), np.float32))

    def _new_tables(self, n_rows: int, n_xtab: int, n: int) -> tuple:
        """The detection's tables: first body of every row of cells, two planes of x tables,
        the coarse rows' x table offsets and their x tables (``_coarse_table_*``)."""
        return (np.empty(n_rows, np.int64), np.empty(n_xtab, np.int32),
                np.empty(n_rows, np.int64), np.empty(self._coarse_entries(n), np.int32))

    def _coarse_entries(self, n: int) -> int:
        return self._coarse_table_per_body * n + self._coarse_table_extra

    @staticmethod
    def _pool_blocks(cap: int) -> int:
        # containers <= bodies and blocks <= containers + bodies / BLOCK: never overflows.
        return cap + cap // K.BLOCK + 16

    def _new_body_arrays(self, cap: int) -> None:
        """Empty per-body arrays, containers and block pool for ``cap`` bodies (only the
        rows of stored bodies are read: np.empty, except the flags, which must start clear)."""
        self._b_grid = np.full(cap, -1, dtype=np.int8)
        self._b_cell = np.empty(cap, dtype=np.int32)   # each body's cell (detection reads it)
        self._b_home = np.empty(cap, dtype=np.int32)   # the cell of the container holding it
        self._b_entry = np.empty(cap, dtype=np.int32)
        # bodies whose cell left their container's cell since the last _sync, each listed once
        self._dirty = np.empty(cap, dtype=np.int32)
        self._listed = np.zeros(cap, dtype=np.uint8)
        self._n_dirty = 0
        self._C = K.new_containers(cap)
        self._P = K.new_pool(self._pool_blocks(cap))

    def _reserve(self, n_total: int) -> None:
        if n_total >= 1 << K.ID_BITS:
            raise BroadPhaseError(
                f"{n_total} bodies exceed what one hash grid holds (2**{K.ID_BITS} - 1); "
                "split the domain over more ranks")
        if not self.bodies.reserve(n_total):
            return
        cap = self.bodies.capacity
        if self.bodies.n == 0 and self._C.n[0] == 0:
            # nothing stored (a fresh structure's first add): new arrays and nothing to copy;
            # with no container, no block is in use and the pool starts over (as clear_all)
            self._new_body_arrays(cap)
            return
        for name in ("_b_grid", "_b_cell", "_b_home", "_b_entry", "_dirty", "_listed"):
            old = getattr(self, name)
            if name == "_b_grid":
                new = np.full(cap, -1, dtype=old.dtype)
            else:  # (the flags must start clear: np.zeros, which, like np.empty, touches no page)
                new = (np.zeros if name == "_listed" else np.empty)(cap, dtype=old.dtype)
            new[: old.shape[0]] = old
            setattr(self, name, new)
        old_c = self._C
        new_c = K.new_containers(cap)
        for a, b in zip(old_c[:-1], new_c[:-1]):
            b[: a.shape[0]] = a
        new_c.n[0] = old_c.n[0]
        self._C = new_c
        old_p = self._P
        nb = self._pool_blocks(cap)
        new_p = K.new_pool(nb)
        new_p.entries[: old_p.entries.shape[0]] = old_p.entries
        new_p.next[: old_p.next.shape[0]] = old_p.next
        new_p.prev[: old_p.prev.shape[0]] = old_p.prev
        new_p.meta[:] = old_p.meta
        self._P = new_p

    # ---- grid assignment and growth -------------------------------------------------------------
    def _assign(self, lo, hi, idx, leaving=None) -> np.ndarray:
        """Grid of each body idx[i] of lo/hi (Algorithm 3). ``leaving``: the grids the same
        bodies leave (an update), if any. Raises, with created grids rolled back and nothing
        else changed, if a body cannot be hashed or a grid would outgrow its cell limit."""
        out = np.empty(idx.shape[0], dtype=np.int64)
        n_before = int(self._G.n[0])
        order_before = self._G.order.copy()
        status, i = K.assign_grids(lo, hi, idx, out, self._G, self.hierarchy_factor, self._init_bits)
        full = self._overfull(out, leaving) if status == K.OK else -1
        if status != K.OK or full >= 0:
            self._G.n[0] = n_before
            self._G.order[:] = order_before
            self._G.rank[order_before[:n_before]] = np.arange(n_before)
            if full >= 0:
                self._raise_too_many_cells(full)
            j = int(idx[i])
            if status == K.TOO_MANY_GRIDS:
                raise BroadPhaseError(
                    f"body {j} (size {float((hi[j] - lo[j]).max())!r}) would need more than "
                    f"{K.MAX_GRIDS} grids; body sizes span too many hierarchy levels")
            if status == K.TOO_LARGE:
                raise BroadPhaseError(
                    f"the box in row {j} of lo/hi (size {float((hi[j] - lo[j]).max())!r}) "
                    "would need a grid cell larger than float64 holds; register a body that "
                    "large with add_infinite, or use smaller coordinates")
            self._raise_not_hashable(lo, hi, j)
        return out

    def _overfull(self, grids, leaving) -> int:
        """A grid that would need more than 2**_max_cell_bits cells (or its first size, if
        larger) once bodies enter ``grids`` and leave ``leaving``, else -1. Checked before
        anything is stored, so that the error leaves the structure as it was; free unless the
        bodies are many (each grid holds at most all of them)."""
        if self.bodies.n + grids.shape[0] <= (1 << self._max_cell_bits) / self.min_grid_density:
            return -1
        G = self._G
        ng = int(G.n[0])
        target = G.count[:ng] + np.bincount(grids, minlength=ng)[:ng]
        if leaving is not None:
            target = target - np.bincount(leaving, minlength=ng)[:ng]
        bits = np.maximum(G.bits[:ng].sum(axis=1), self._max_cell_bits)
        full = np.flatnonzero(target > np.ldexp(1.0, bits) / self.min_grid_density)
        return int(full[0]) if full.size else -1

    def _raise_too_many_cells(self, g) -> None:
        raise BroadPhaseError(
            f"grid {g} (cell size {self._G.cell[g]!r}) would exceed 2**{self._max_cell_bits} "
            "cells; lower min_grid_density or split the domain over more ranks")

    def _raise_not_hashable(self, lo, hi, j) -> None:
        centre = 0.5 * (lo[j] + hi[j])
        raise BroadPhaseError(
            f"body at index {j} has centre {centre.tolist()}, more than 2**50 cells of its grid "
            "from the origin: float64 cannot hash it exactly (HHG thesis 3.2); shift the "
            "coordinates closer to the origin or use larger bodies")

    def _prepare_grids(self, pending: np.ndarray) -> np.ndarray:
        """Allocate cells for new grids and grow grids that the pending bodies would overfill.

        ``pending`` are the slots about to be inserted (``_b_grid`` set, not in any cell yet).
        Returns the slots of bodies taken out of grown grids (to be re-inserted with the pending).
        """
        G = self._G
        ng = int(G.n[0])
        if ng == self._ng_ready and self.bodies.n <= self._fits:
            # no new grid, and no grid can overfill: each holds at most all stored bodies
            # (the pending ones included). Saves ~3.5 us of a small batch's fixed cost.
            return _NO_SLOTS
        pending_grids = self._b_grid[pending]
        target = (G.count[:ng] + np.bincount(pending_grids, minlength=ng)[:ng]).tolist()
        # the per-grid bookkeeping in Python ints: a handful of grids, and numpy scalars cost
        # microseconds each (this is most of the fixed cost of an add of 1,000 bodies)
        old_bits = G.bits[:ng].tolist()
        old_base = G.base[:ng].tolist()
        count = G.count[:ng].tolist()
        bits = [list(b) for b in old_bits]
        for g in range(ng):
            while target[g] > (1 << sum(bits[g])) / self.min_grid_density:
                if sum(bits[g]) >= self._max_cell_bits:  # refused by _assign already
                    self._raise_too_many_cells(g)
                bits[g] = [b + 1 for b in bits[g]]
        grown = [bits[g] != old_bits[g] for g in range(ng)]
        new = [b < 0 for b in old_base]
        if not any(grown) and not any(new):
            self._note_ready(ng, bits)
            return _NO_SLOTS
        # take the bodies already in grown grids out of their cells (O(1) each; growth is rare)
        if any(grown[g] and count[g] > 0 for g in range(ng)):
            grown_mask = np.zeros(K.MAX_GRIDS, dtype=np.bool_)
            grown_mask[:ng] = grown
            grid_of = self._b_grid[: self.bodies.n]
            in_grown = grid_of >= 0
            in_grown[in_grown] = grown_mask[grid_of[in_grown]]
            in_grown[pending] = False
            dropped = np.flatnonzero(in_grown)
        else:
            dropped = np.empty(0, dtype=np.int64)
        if dropped.size:
            keep = self._b_grid[dropped]
            self._edit(K.REMOVE, dropped)
            self._b_grid[dropped] = keep
        sizes = [1 << sum(b) for b in bits]
        new_base = [0] * ng
        for g in range(1, ng):
            new_base[g] = new_base[g - 1] + sizes[g - 1]
        cells = np.zeros(sum(sizes), dtype=np.int32)  # (0: empty, see hashgrid_kernels)
        for g in range(ng):
            if not grown[g] and not new[g]:
                cells[new_base[g]: new_base[g] + sizes[g]] = \
                    self._cells[old_base[g]: old_base[g] + sizes[g]]
        self._cells = cells
        G.base[:ng] = new_base
        G.bits[:ng] = bits
        self._note_ready(ng, bits)
        return dropped

    def _note_ready(self, ng: int, bits: list) -> None:
        """Record that grids [0, ng) have cells, with ``bits`` per axis (for the shortcut)."""
        self._ng_ready = ng
        self._fits = min((1 << sum(b)) / self.min_grid_density for b in bits) if bits else math.inf

    def _place(self, slots: np.ndarray) -> None:
        """Insert bodies whose ``_b_grid`` is set, growing grids first (O(1) per body amortised)."""
        dropped = self._prepare_grids(slots)
        if dropped.size:
            slots = np.concatenate([dropped, slots])
        self._edit(K.INSERT, slots)

    def _edit(self, op, slots, new_cell=_NO_CELLS) -> None:
        """Insert / remove / move bodies in their cells' containers (one kernel call per
        batch); an insert sets both the body's cell and its container's cell."""
        b = self.bodies
        K.edit_cells(op, slots, new_cell, b.lo, b.hi, self._b_grid, self._b_home,
                     self._b_entry, self._G, self._cells, self._C, self._P)
        if op == K.INSERT:
            self._b_cell[slots] = self._b_home[slots]

    def _sync(self) -> None:
        """Bring the containers up to date with the bodies' cells: move every body listed by
        the updates since the last call whose cell differs from its container's (O(1) each,
        at most once per body however many updates moved it). The detection step reads the
        bodies' cells and needs no containers, so the update leaves this to the queries and
        removals, which read them (``K.note_moves``)."""
        n = self._n_dirty
        if n == 0:
            return
        slots = self._dirty[:n].astype(np.int64)
        self._listed[slots] = 0
        self._n_dirty = 0
        self._edit(K.MOVE, slots, self._b_cell[slots].astype(np.int64))

    def _activate(self, grids, slots) -> None:
        """Build the grids over every stored body: ``grids`` their grid ids, ``slots`` 0..n-1."""
        b = self.bodies
        self._b_grid[: b.n] = grids
        self._active = True
        self._place(slots)

    # ---- BroadPhase hooks -------------------------------------------------------------------------
    def _add(self, ids, lo, hi):
        b = self.bodies
        n_total = b.n + ids.shape[0]
        self._reserve(n_total)
        if not self._active and n_total <= self.activation_threshold:
            b.append(ids, lo, hi)
            return
        if not self._active:
            # validate everything before storing anything (a fresh structure's first add, with
            # nothing stored yet, needs no copy of the boxes: 48 bytes per body less to write)
            if b.n:
                all_lo = np.concatenate([b.lo[: b.n], lo])
                all_hi = np.concatenate([b.hi[: b.n], hi])
            else:
                all_lo, all_hi = lo, hi
            every = np.arange(n_total, dtype=np.int64)
            grids = self._assign(all_lo, all_hi, every)
            b.append(ids, lo, hi)
            self._activate(grids, every)
            return
        grids = self._assign(lo, hi, np.arange(ids.shape[0], dtype=np.int64))
        slots = b.append(ids, lo, hi)
        self._b_grid[slots] = grids
        self._place(slots)

    #: calls of the plain detection build between two looks of the other for a sparse grid
    #: (``_pairs``); such a look costs a dense scene a few per cent of one call
    FLAT_RECHECK = 64

    #: (the incremental update checks the boxes in its first pass, the others here)
    _update_checks_boxes = True

    def _update(self, slots, lo, hi):
        b = self.bodies
        if not self._active or self.update_strategy == "reinsert":
            check_boxes(lo, hi)
        if not self._active:
            b.lo[slots] = lo
            b.hi[slots] = hi
            return
        if self.update_strategy == "reinsert":
            idx = np.arange(slots.shape[0], dtype=np.int64)
            grids = self._assign(lo, hi, idx, self._b_grid[slots])
            b.lo[slots] = lo
            b.hi[slots] = hi
            self._listed[self._dirty[: self._n_dirty]] = 0  # every body is placed anew
            self._n_dirty = 0
            K.clear_all(self._G, self._cells, self._C, self._P)
            self._b_grid[slots] = grids
            self._place(np.arange(b.n, dtype=np.int64))
            return
        if self._new_cell.shape[0] < slots.shape[0]:  # grows with the store, reused per call
            self._new_cell = np.empty(self.bodies.capacity, dtype=np.int64)
        new_cell = self._new_cell[: slots.shape[0]]
        # (ids equal to the stored ones in stored order always come as that array: slots_of
        # and all_slots check for them first, so no identity test is needed here)
        every = b.is_all(slots)
        status, i, n_changers = K.update_scan(slots, every, lo, hi, self._b_grid, self._G,
                                              self.hierarchy_factor, new_cell)
        if status == K.BAD_BOX:
            check_boxes(lo, hi)  # raises, naming the first bad box
        if status != K.OK:
            self._raise_not_hashable(lo, hi, i)
        changers = np.flatnonzero(new_cell < 0) if n_changers else _NO_SLOTS
        if changers.size:
            grids = self._assign(lo, hi, changers, self._b_grid[slots[changers]])
        if every:  # (memcpy: faster than a kernel's loop, see note_moves)
            np.copyto(b.lo[: b.n], lo)
            np.copyto(b.hi[: b.n], hi)
        self._n_dirty = K.note_moves(slots, every, new_cell, lo, hi, b.lo, b.hi, self._b_cell,
                                     self._b_home, self._listed, self._dirty, self._n_dirty)
        if changers.size:
            moving = slots[changers]
            self._edit(K.REMOVE, moving)
            self._b_grid[moving] = grids
            self._place(moving)

    def _remove(self, slots):
        if self._active:
            self._sync()  # (the dirty list holds slots, which the swap-removes renumber)
            self._edit(K.REMOVE, slots)
        src, dst = self.bodies.swap_remove(slots)
        K.relocate_bodies(src, dst, self._b_grid, self._b_cell, self._b_home, self._b_entry,
                          self._P)

    def _pairs(self):
        b = self.bodies
        if not self._active:
            return all_pairs(b.ids, b.lo, b.hi, b.n)
        if self._scratch[0].shape[0] < b.n:  # grows with the body store (never per call)
            self._scratch = self._new_scratch(b.capacity)
        n_rows, n_xtab = table_sizes(self._G)
        t = self._tables
        if (t[0].shape[0] < n_rows or t[1].shape[0] < n_xtab
                or t[3].shape[0] < self._coarse_entries(b.n)):
            self._tables = self._new_tables(max(n_rows, t[0].shape[0]), max(n_xtab, t[1].shape[0]),
                                            b.capacity)
        # the build that sweeps sparse grids body by body while the last one it ran swept one,
        # else the plain build, with a look every FLAT_RECHECK calls (hashgrid_detect's notes)
        flat = self._flat_hint or self._flat_wait <= 0
        pairs, self._last_pairs = collect_pairs(
            find_pairs_rows_flat if flat else find_pairs_rows,
            (b.ids, b.lo, b.hi, b.n, self._b_grid, self._b_cell, self._G, *self._scratch,
             self._flag, *self._tables), self._last_pairs)
        if flat:
            self._flat_hint = bool(self._flag[0])
            self._flat_wait = self.FLAT_RECHECK
        else:
            self._flat_wait -= 1
        return pairs

    def _query_box(self, lo, hi):
        b = self.bodies
        if not self._active:
            return scan_box(b.ids, b.lo, b.hi, b.n, lo, hi)
        self._sync()
        return K.query_box_cells(b.ids, b.lo, b.hi, self._G, self._cells, self._C, self._P,
                                 lo, hi)

    def _raycast(self, o, d, t_max):
        b = self.bodies
        if not self._active:
            return scan_ray(b.ids, b.lo, b.hi, b.n, o, d, t_max)
        self._sync()
        return K.raycast_cells(b.ids, b.lo, b.hi, self._G, self._cells, self._C, self._P,
                               o, d, t_max, self._stamp)
