"""Random sequential addition (RSA) of bodies in a box region, computed rank-locally.

The ``random`` and ``rain`` generators place ``count`` bodies at uniformly random places where
their bounding spheres overlap nothing: not each other, not the bodies already there. A plain
RSA adds the bodies one after the other, each avoiding all earlier ones, so every rank would
make every body. Here the work is split into cells, in three layers:

1. *Counts.* The region is cut into fine cells holding about ``PER_CELL`` bodies each. A cell's
   share of the ``count`` bodies is proportional to its free room: the part of it where a body
   of the generator's base size can be centred inside the region, times the fraction of
   ``SAMPLES`` hashed points there that are clear of the bodies already in the simulation. The
   shares are rounded by largest remainder (ties by a hashed permutation of the cells), so the
   total is exactly ``count``.
2. *Sizes.* Body ``s`` of fine cell ``c`` has ordinal ``c * cap + s`` (``cap``: the largest
   count of a cell) and uid ``first uid + ordinal``; its size, velocity and orientation are
   pure functions of the generator's key and the ordinal. The uids of a batch therefore have
   gaps (cells under obstacles hold none).
3. *Places.* Generation cells merge fine cells until their side reaches the largest bounding
   diameter, so a body drawn in its generation cell can only touch bodies of that cell and the
   26 around it. They are filled in 8 colours (the parities of their indices): cells of one
   colour are never neighbours, so a body only has to avoid the bodies placed before it in its
   neighbour cells of earlier colours and in its own cell (biggest first, which packs best),
   and the bodies already in the simulation.

A cell's places depend on its neighbours of earlier colours, those on theirs: at most ``HALO``
= 7 cells away. A rank computes the cells within 7 generation cells of its block and keeps the
bodies whose centre it owns; the bodies are the same bits on any number of ranks, and no rank
holds every body. Communication: the bodies already in the simulation near the rank's cells
(two all-to-alls) and a few dozen scalar reductions (the count rounding's threshold is found by
bisection).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bodies import INFINITE, REPLICATED

PER_CELL = 32       #: bodies per fine cell aimed at (fewer make crowded cells fail more often)
SAMPLES = 64        #: hashed points per fine cell that measure its free room
HALO = 7            #: dependency reach in generation cells: 8 colours wait for the earlier ones

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
# streams of this module's hashes (the config generators use streams 0..10 of parsim.randoms)
_PLACE, _PERM, _ROOM = 11, 12, 13

OBSTACLE = np.dtype([("position", np.float64, 3), ("radius", np.float64)])
_BOX = np.dtype([("lo", np.float64, 3), ("hi", np.float64, 3)])


class NoRoom(ValueError):
    """The region has no free room for the generator's bodies (the bodies there fill it)."""


class TooSmall(ValueError):
    """The region is too small for the generator's largest body."""


@njit(cache=True, inline="always")
def _mix(z):
    """splitmix64's finaliser on a uint64 (as ``parsim.randoms``)."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def subkey(key: int, stream: int) -> np.uint64:
    """A key for one of this module's hash streams, derived from the generator's key."""
    a = _mix(np.uint64(key & 0xFFFFFFFFFFFFFFFF))
    return np.uint64(_mix(np.uint64(a) ^ np.uint64(stream)))


@njit(cache=True, inline="always")
def _uniform(key, index, draw, axis):
    z = _mix(key ^ np.uint64(index))
    z = _mix(z ^ np.uint64(draw * 3 + axis))
    return np.float64(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@njit(cache=True)
def permute(cells, total, key):
    """A bijection of [0, total) applied to ``cells``: a 4-round Feistel network on the
    smallest even number of bits that holds ``total``, walked along its cycle until it lands
    below ``total``."""
    bits = 2
    while (np.int64(1) << bits) < total:
        bits += 2
    half = np.uint64(bits // 2)
    mask = (np.uint64(1) << half) - np.uint64(1)
    out = np.empty(cells.shape[0], dtype=np.int64)
    for i in range(cells.shape[0]):
        x = np.uint64(cells[i])
        while True:
            left = x >> half
            right = x & mask
            for r in range(4):
                f = _mix(key ^ (np.uint64(r) << np.uint64(56)) ^ right) & mask
                left, right = right, left ^ f
            x = (left << half) | right
            if x < np.uint64(total):
                break
        out[i] = np.int64(x)
    return out


@njit(cache=True)
def _register(c0, dims, ex, ey, ez, obs_pos, obs_r, extra):
    """CSR lists, per cell of the box ``c0 .. c0 + dims`` (x-major) of the grid with edges
    ``ex, ey, ez``, of the obstacles whose sphere grown by ``extra`` reaches into the cell."""
    ncell = dims[0] * dims[1] * dims[2]
    start = np.zeros(ncell + 1, dtype=np.int64)
    lo_c = np.empty(3, dtype=np.int64)
    hi_c = np.empty(3, dtype=np.int64)
    olist = np.empty(0, dtype=np.int64)
    fillp = np.empty(0, dtype=np.int64)
    for sweep in range(2):
        if sweep == 1:
            for l in range(ncell):
                start[l + 1] += start[l]
            olist = np.empty(start[ncell], dtype=np.int64)
            fillp = start[:ncell].copy()
        for j in range(obs_r.shape[0]):
            reach = obs_r[j] + extra
            empty = False
            for d in range(3):
                e = ex if d == 0 else (ey if d == 1 else ez)
                a = np.searchsorted(e, obs_pos[j, d] - reach, side="right") - 1
                b = np.searchsorted(e, obs_pos[j, d] + reach, side="right") - 1
                lo_c[d] = max(a, c0[d]) - c0[d]
                hi_c[d] = min(b, c0[d] + dims[d] - 1) - c0[d]
                if lo_c[d] > hi_c[d]:
                    empty = True
            if empty:
                continue
            for x in range(lo_c[0], hi_c[0] + 1):
                for y in range(lo_c[1], hi_c[1] + 1):
                    for z in range(lo_c[2], hi_c[2] + 1):
                        l = (x * dims[1] + y) * dims[2] + z
                        if sweep == 0:
                            start[l + 1] += 1
                        else:
                            olist[fillp[l]] = j
                            fillp[l] += 1
    return start, olist


@njit(cache=True)
def room(c0, dims, n, ex, ey, ez, rlo, rhi, r0, obs_pos, obs_r, key, samples):
    """Free room of the fine cells of the box ``c0 .. c0 + dims`` (x-major), as an integer:
    the share of the cell (in 1/1024) where a body of bounding radius ``r0`` can be centred
    inside the region, times how many of ``samples`` hashed points there (keyed by the cell's
    flat index in the grid of ``n`` cells) are clear of the obstacles. Returns (room, share)."""
    ostart, olist = _register(c0, dims, ex, ey, ez, obs_pos, obs_r, r0)
    out = np.zeros(dims[0] * dims[1] * dims[2], dtype=np.int64)
    shares = np.zeros(dims[0] * dims[1] * dims[2], dtype=np.int64)
    p = np.empty(3)
    lo = np.empty(3)
    hi = np.empty(3)
    for lx in range(dims[0]):
        for ly in range(dims[1]):
            for lz in range(dims[2]):
                l = (lx * dims[1] + ly) * dims[2] + lz
                g = (c0[0] + lx, c0[1] + ly, c0[2] + lz)
                flat = (g[0] * n[1] + g[1]) * n[2] + g[2]
                share = 1.0
                for d in range(3):
                    e = ex if d == 0 else (ey if d == 1 else ez)
                    lo[d] = max(e[g[d]], rlo[d] + r0)
                    hi[d] = min(e[g[d] + 1], rhi[d] - r0)
                    share *= max(hi[d] - lo[d], 0.0) / (e[g[d] + 1] - e[g[d]])
                q = np.int64(share * 1024.0)
                shares[l] = q
                if q == 0:
                    continue
                k = 0
                for s in range(samples):
                    for d in range(3):
                        p[d] = lo[d] + _uniform(key, flat, s, d) * (hi[d] - lo[d])
                    free = True
                    for i in range(ostart[l], ostart[l + 1]):
                        j = olist[i]
                        r2 = 0.0
                        for d in range(3):
                            r2 += (obs_pos[j, d] - p[d]) ** 2
                        if r2 < (obs_r[j] + r0) ** 2:
                            free = False
                            break
                    if free:
                        k += 1
                out[l] = k * q
    return out, shares


@njit(cache=True)
def _sub_edges(e, s):
    """Edges of the grid that splits every cell of the edges ``e`` into ``s`` equal parts."""
    n = e.shape[0] - 1
    out = np.empty(n * s + 1)
    for i in range(n):
        for k in range(s):
            out[i * s + k] = e[i] + (e[i + 1] - e[i]) * (k / s)
    out[n * s] = e[n]
    return out


@njit(cache=True, inline="always")
def _sub_index(x, se, lo, hi):
    """The cell ``i`` of the edges ``se`` with ``se[i] <= x < se[i + 1]`` (searchsorted's),
    found from a guess and kept within ``lo .. hi`` (as :func:`_register` clamps)."""
    i = lo + np.int64((x - se[lo]) / (se[hi + 1] - se[lo]) * (hi + 1 - lo))
    i = min(max(i, lo), hi)
    while i > lo and x < se[i]:
        i -= 1
    while i < hi and x >= se[i + 1]:
        i += 1
    return i


@njit(cache=True)
def _shell_sort(keys, vals):
    """Sort ``keys`` and ``vals`` alike by ``keys``, in place (Shell sort: numba's
    ``np.argsort`` costs ~10 s of compile time)."""
    n = keys.shape[0]
    gap = 1
    while gap < n // 3:
        gap = 3 * gap + 1
    while gap > 0:
        for i in range(gap, n):
            k, v = keys[i], vals[i]
            j = i
            while j >= gap and keys[j - gap] > k:
                keys[j] = keys[j - gap]
                vals[j] = vals[j - gap]
                j -= gap
            keys[j] = k
            vals[j] = v
        gap //= 3


#: sub-cells per axis of a generation cell for the obstacle lists of :func:`fill` (at most)
SUB_MAX = 8


@njit(cache=True)
def fill(c0, dims, ex, ey, ez, rlo, rhi, start, size, ordinal, radius, obs_pos, obs_r, rb_max,
         key, attempts, pos, placed):
    """RSA over the box of generation cells ``c0 .. c0 + dims`` (edges ``ex, ey, ez``), colour
    by colour. Local cell l (x-major) holds the bodies ``start[l] .. start[l] + size[l]`` of
    the body arrays (``ordinal``, bounding ``radius``), biggest first. Writes ``pos`` and
    ``placed`` (1 if the body found a free place in ``attempts[l]`` draws).

    A draw is tested against the obstacles listed for its *sub-cell* (each generation cell is
    split into up to ``SUB_MAX`` parts per axis, of about ``rb_max``): every obstacle whose
    sphere grown by ``rb_max`` reaches the sub-cell, nearest first (a draw in a crowded cell
    is rejected after a few tests instead of half a list of hundreds); and against the bodies
    placed in the neighbouring generation cells that its sphere grown by ``rb_max`` reaches.
    Both lists hold every body the draw can overlap, so the outcome is that of testing all."""
    ncell = dims[0] * dims[1] * dims[2]
    sub = np.empty(3, dtype=np.int64)
    for d in range(3):
        e = ex if d == 0 else (ey if d == 1 else ez)
        w = np.inf
        for i in range(c0[d], c0[d] + dims[d]):
            w = min(w, e[i + 1] - e[i])
        sub[d] = max(1, min(SUB_MAX, np.int64(w / max(rb_max, 1e-300))))
    sx = _sub_edges(ex[c0[0]: c0[0] + dims[0] + 1], sub[0])
    sy = _sub_edges(ey[c0[1]: c0[1] + dims[1] + 1], sub[1])
    sz = _sub_edges(ez[c0[2]: c0[2] + dims[2] + 1], sub[2])
    sdims = dims * sub
    ostart, olist = _register(np.zeros(3, dtype=np.int64), sdims, sx, sy, sz, obs_pos, obs_r,
                              rb_max)
    # each sub-cell's list, nearest first (by the gap between its centre and the obstacle)
    for q in range(sdims[0] * sdims[1] * sdims[2]):
        a, b = ostart[q], ostart[q + 1]
        if b - a < 2:
            continue
        qx = q // (sdims[1] * sdims[2])
        qy = (q // sdims[2]) % sdims[1]
        qz = q % sdims[2]
        cx = 0.5 * (sx[qx] + sx[qx + 1])
        cy = 0.5 * (sy[qy] + sy[qy + 1])
        cz = 0.5 * (sz[qz] + sz[qz + 1])
        gap = np.empty(b - a)
        for i in range(a, b):
            j = olist[i]
            gap[i - a] = np.sqrt((obs_pos[j, 0] - cx) ** 2 + (obs_pos[j, 1] - cy) ** 2
                                 + (obs_pos[j, 2] - cz) ** 2) - obs_r[j]
        _shell_sort(gap, olist[a:b])
    nplaced = np.zeros(ncell, dtype=np.int64)
    ppos = np.empty((pos.shape[0], 3))          # placed bodies, packed at the start of a cell
    prad = np.empty(pos.shape[0])
    x = np.empty(3)
    clo = np.empty(3)
    chi = np.empty(3)
    for colour in range(8):
        for l in range(ncell):
            lx = l // (dims[1] * dims[2])
            ly = (l // dims[2]) % dims[1]
            lz = l % dims[2]
            gx, gy, gz = c0[0] + lx, c0[1] + ly, c0[2] + lz
            if (gx & 1) | ((gy & 1) << 1) | ((gz & 1) << 2) != colour:
                continue
            for b in range(start[l], start[l] + size[l]):
                r = radius[b]
                reach = r + rb_max
                clo[0], chi[0] = max(ex[gx], rlo[0] + r), min(ex[gx + 1], rhi[0] - r)
                clo[1], chi[1] = max(ey[gy], rlo[1] + r), min(ey[gy + 1], rhi[1] - r)
                clo[2], chi[2] = max(ez[gz], rlo[2] + r), min(ez[gz + 1], rhi[2] - r)
                ok = False
                for a in range(attempts[l]):
                    for d in range(3):
                        x[d] = clo[d] + _uniform(key, ordinal[b], a, d) * (chi[d] - clo[d])
                    qx = _sub_index(x[0], sx, lx * sub[0], lx * sub[0] + sub[0] - 1)
                    qy = _sub_index(x[1], sy, ly * sub[1], ly * sub[1] + sub[1] - 1)
                    qz = _sub_index(x[2], sz, lz * sub[2], lz * sub[2] + sub[2] - 1)
                    q = (qx * sdims[1] + qy) * sdims[2] + qz
                    ok = True
                    for k in range(ostart[q], ostart[q + 1]):
                        j = olist[k]
                        s = 0.0
                        for d in range(3):
                            s += (obs_pos[j, d] - x[d]) ** 2
                        if s < (obs_r[j] + r) ** 2:
                            ok = False
                            break
                    if ok:
                        # the neighbouring cells within reach (placed radii are <= rb_max)
                        x0 = lx - 1 if lx > 0 and x[0] - reach < ex[gx] else lx
                        x1 = lx + 1 if lx + 1 < dims[0] and x[0] + reach > ex[gx + 1] else lx
                        y0 = ly - 1 if ly > 0 and x[1] - reach < ey[gy] else ly
                        y1 = ly + 1 if ly + 1 < dims[1] and x[1] + reach > ey[gy + 1] else ly
                        z0 = lz - 1 if lz > 0 and x[2] - reach < ez[gz] else lz
                        z1 = lz + 1 if lz + 1 < dims[2] and x[2] + reach > ez[gz + 1] else lz
                        for dx in range(x0, x1 + 1):
                            for dy in range(y0, y1 + 1):
                                for dz in range(z0, z1 + 1):
                                    m = (dx * dims[1] + dy) * dims[2] + dz
                                    for k in range(start[m], start[m] + nplaced[m]):
                                        s = 0.0
                                        for d in range(3):
                                            s += (ppos[k, d] - x[d]) ** 2
                                        if s < (prad[k] + r) ** 2:
                                            ok = False
                                            break
                                    if not ok:
                                        break
                                if not ok:
                                    break
                            if not ok:
                                break
                    if ok:
                        break
                placed[b] = 1 if ok else 0
                if ok:
                    k = start[l] + nplaced[l]
                    for d in range(3):
                        ppos[k, d] = x[d]
                        pos[b, d] = x[d]
                    prad[k] = r
                    nplaced[l] += 1


def _inside(p, lo, hi):
    return (p >= lo).all(axis=1) & (p <= hi).all(axis=1)


def obstacles(sim, lo, hi):
    """Collective: (position, bounding radius) of the finite bodies already in ``sim`` whose
    centre lies in this rank's box [lo, hi] (``lo > hi``: none): the global bodies from this
    rank's own copies, the others from their owners (one all-to-all, each rank sending to the
    ranks whose boxes reach its bodies)."""
    st, net = sim.st, sim.net
    no = st.n_owned
    p, f, r = st.position[:no], st.flags[:no], st.bounding_radius[:no]
    finite = (f & INFINITE) == 0
    if net.size == 1:
        sel = finite & _inside(p, lo, hi)
        return np.ascontiguousarray(p[sel]), r[sel].copy()
    mine = np.zeros(1, dtype=_BOX)
    mine["lo"], mine["hi"] = lo, hi
    boxes = net.allgather_records(mine, _BOX)
    keep = finite & ((f & REPLICATED) != 0) & _inside(p, lo, hi)
    own = np.flatnonzero(finite & ((f & REPLICATED) == 0))
    q = p[own]
    parts, counts = [], np.zeros(net.size, dtype=np.int64)
    if own.size:
        qlo, qhi = q.min(axis=0), q.max(axis=0)
        for k in np.flatnonzero((boxes["lo"] <= qhi).all(axis=1)
                                & (boxes["hi"] >= qlo).all(axis=1)):
            sel = own[_inside(q, boxes["lo"][k], boxes["hi"][k])]
            counts[k] = sel.size
            rec = np.empty(sel.size, dtype=OBSTACLE)
            rec["position"], rec["radius"] = p[sel], r[sel]
            parts.append(rec)
    send = np.concatenate(parts) if parts else np.empty(0, dtype=OBSTACLE)
    got = net.alltoall_records(send, counts, OBSTACLE)
    pos = np.concatenate([p[keep], got["position"].reshape(-1, 3)])
    return np.ascontiguousarray(pos), np.concatenate([r[keep], got["radius"]])


def _edges(lo: float, hi: float, n: int, step: float) -> np.ndarray:
    e = lo + np.arange(n + 1) * step
    e[-1] = hi
    return e


def _block_range(edges: np.ndarray, blo: float, bhi: float, halo: int):
    """Cells (first, last) of a grid with ``edges`` that meet [blo, bhi], one more each side
    against rounding, and ``halo`` more; None if none."""
    n = edges.size - 1
    a = int(np.searchsorted(edges, blo, side="right")) - 2
    b = int(np.searchsorted(edges, bhi, side="right"))
    if b < 0 or a > n - 1:
        return None
    return max(a - halo, 0), min(b + halo, n - 1)


def _box_cells(c0, dims):
    return np.indices(dims).reshape(3, -1).T + c0          # x-major, as the kernels


class Batch:
    """One batch of RSA bodies as computed by this rank (see the module docstring).

    After :meth:`place`: ``ordinal`` (int64[m]), ``position`` (float[m, 3]) and the caller's
    ``size`` rows of the bodies whose centre this rank owns, ``placed`` (how many of the
    ``count`` found a place, on every rank) and ``uid_span`` (ordinals used: ``cells * cap``).
    """

    def __init__(self, sim, rlo, rhi, count: int, key: int, r0: float, sizes, attempts: int):
        self.sim, self.rlo, self.rhi = sim, np.asarray(rlo, float), np.asarray(rhi, float)
        self.count, self.key, self.r0, self.sizes, self.attempts = count, key, r0, sizes, attempts

    def place(self, existing_radius: float):
        sim, net, dec = self.sim, self.sim.net, self.sim.dec
        rlo, rhi, count, r0 = self.rlo, self.rhi, self.count, self.r0
        length = rhi - rlo
        side = (PER_CELL * float(np.prod(length)) / count) ** (1.0 / 3.0)
        n = np.maximum(1, np.floor(length / side)).astype(np.int64)
        total = int(np.prod(n))
        e = [_edges(rlo[d], rhi[d], int(n[d]), length[d] / n[d]) for d in range(3)]
        room_key = subkey(self.key, _ROOM)
        perm_key = subkey(self.key, _PERM)

        # 1. counts: free room of this rank's home fine cells (centre in its block)
        rng = [_block_range(e[d], dec.block_lo[d], dec.block_hi[d], 0) for d in range(3)]
        if any(x is None for x in rng):
            h0, hdims = np.zeros(3, np.int64), np.zeros(3, np.int64)
        else:
            h0 = np.array([x[0] for x in rng], np.int64)
            hdims = np.array([x[1] - x[0] + 1 for x in rng], np.int64)
        hcells = _box_cells(h0, hdims)
        centre = np.stack([0.5 * (e[d][hcells[:, d]] + e[d][hcells[:, d] + 1])
                           for d in range(3)], 1)
        home = dec.owner_rank(centre) == net.rank if hcells.size else np.zeros(0, bool)
        margin = r0 + existing_radius
        lo_b, hi_b = self._extent(e, h0, hdims, margin)
        op, orad = obstacles(sim, lo_b, hi_b)
        k_home = room(h0, hdims, n, e[0], e[1], e[2], rlo, rhi, r0, op, orad, room_key,
                      SAMPLES)[0][home]
        flat_home = self._flat(hcells[home], n)
        big_k = net.isum(int(k_home.sum()))
        if big_k == 0:
            raise NoRoom("has no free room for the bodies (the bodies already there fill it)")
        base = count * k_home // big_k
        rem = count * k_home % big_k
        extra = count - net.isum(int(base.sum()))
        t, p = self._threshold(rem, permute(flat_home, total, perm_key), extra)
        self.threshold = (t, p)
        n_home = base + ((rem > t) | ((rem == t) & (permute(flat_home, total, perm_key) >= p)))
        cap = max(1, int(net.max(float(n_home.max()) if n_home.size else 0.0)))
        self.uid_span = total * cap

        # 2. sizes: the largest body sets the generation cells
        ords = np.repeat(flat_home * cap, n_home) + _slots(n_home)
        size, rb = self.sizes(ords)
        rb_max = net.max(float(rb.max()) if rb.size else 0.0)
        if 2 * rb_max >= length.min():
            raise TooSmall(f"is too small for bodies of bounding diameter {2 * rb_max:.4g}")

        # 3. places: generation cells of >= m fine cells per axis (the last one takes the rest)
        m = np.maximum(1, np.ceil(2.0 * rb_max * (1.0 + 1e-9) / (length / n))).astype(np.int64)
        ng = np.maximum(1, n // m)
        fe = [np.minimum(np.arange(ng[d] + 1) * m[d], n[d]) for d in range(3)]
        for d in range(3):
            fe[d][-1] = n[d]
        ge = [e[d][fe[d]] for d in range(3)]
        rng = [_block_range(ge[d], dec.block_lo[d], dec.block_hi[d], HALO) for d in range(3)]
        empty = np.zeros(0, np.int64)
        if any(x is None for x in rng):
            obstacles(sim, np.full(3, np.inf), np.full(3, -np.inf))   # collective
            self.placed = count - net.isum(0)
            self.ordinal, self.position, self.size = empty, np.zeros((0, 3)), size[:0]
            self.radius = np.zeros(0)
            return self
        g0 = np.array([x[0] for x in rng], np.int64)
        gdims = np.array([x[1] - x[0] + 1 for x in rng], np.int64)
        f0 = np.array([fe[d][g0[d]] for d in range(3)], np.int64)
        fdims = np.array([fe[d][g0[d] + gdims[d]] for d in range(3)], np.int64) - f0
        lo_b, hi_b = self._extent(e, f0, fdims, rb_max + existing_radius)
        op, orad = obstacles(sim, lo_b, hi_b)
        fcells = _box_cells(f0, fdims)
        flat = self._flat(fcells, n)
        k, share = room(f0, fdims, n, e[0], e[1], e[2], rlo, rhi, r0, op, orad, room_key,
                        SAMPLES)
        base = count * k // big_k
        rem = count * k % big_k
        t, p = self.threshold
        nc = base + ((rem > t) | ((rem == t) & (permute(flat, total, perm_key) >= p)))
        # each fine cell's bodies go to its generation cell (local index, x-major)
        gcell = np.stack([np.searchsorted(fe[d], fcells[:, d], side="right") - 1 - g0[d]
                          for d in range(3)], 1)
        gl = (gcell[:, 0] * gdims[1] + gcell[:, 1]) * gdims[2] + gcell[:, 2]
        cell_of = np.repeat(gl, nc)
        fine_of = np.repeat(np.arange(flat.size), nc)
        ordinal = np.repeat(flat * cap, nc) + _slots(nc)
        size, rb = self.sizes(ordinal)
        order = np.lexsort((ordinal, -rb, cell_of))       # per generation cell, biggest first
        ordinal, size, rb, fine_of = ordinal[order], size[order], rb[order], fine_of[order]
        per_gen = np.bincount(cell_of, minlength=int(np.prod(gdims)))
        # draws per body in proportion to the room a cell has left: ``attempts`` in a free
        # cell, up to SAMPLES times as many where the bodies already there fill most of it
        free = np.bincount(gl, weights=k, minlength=per_gen.size)
        whole = np.bincount(gl, weights=share, minlength=per_gen.size) * SAMPLES
        tries = self.attempts * np.minimum(np.ceil(whole / np.maximum(free, 1.0)),
                                           SAMPLES).astype(np.int64)
        start = np.cumsum(per_gen) - per_gen
        pos = np.zeros((ordinal.size, 3))
        placed = np.zeros(ordinal.size, dtype=np.int8)
        fill(g0, gdims, ge[0], ge[1], ge[2], rlo, rhi, start, per_gen, ordinal, rb, op, orad,
             rb_max, subkey(self.key, _PLACE), tries, pos, placed)
        # a fine cell's misses are counted by the rank owning its centre
        fcentre = np.stack([0.5 * (e[d][fcells[:, d]] + e[d][fcells[:, d] + 1])
                            for d in range(3)], 1)
        mine = dec.owner_rank(fcentre) == net.rank
        missed = int(np.count_nonzero((placed == 0) & mine[fine_of]))
        self.placed = count - net.isum(missed)
        keep = (placed == 1) & (dec.owner_rank(pos) == net.rank)
        self.ordinal, self.position, self.size, self.radius = (ordinal[keep], pos[keep],
                                                               size[keep], rb[keep])
        return self

    def _extent(self, e, c0, dims, margin):
        if not dims.all():
            return np.full(3, np.inf), np.full(3, -np.inf)
        lo = np.array([e[d][c0[d]] for d in range(3)]) - margin
        hi = np.array([e[d][c0[d] + dims[d]] for d in range(3)]) + margin
        return lo, hi

    @staticmethod
    def _flat(cells, n):
        return (cells[:, 0] * n[1] + cells[:, 1]) * n[2] + cells[:, 2]

    def _threshold(self, rem: np.ndarray, perm: np.ndarray, extra: int):
        """The cells (of all ranks) that get one body more: the ``extra`` with the largest
        remainders, ties broken by the larger place in the permutation. Returns (t, p): a cell
        is one of them if ``rem > t`` or ``rem == t and perm >= p``; found by bisection, one
        sum over the ranks per halving."""
        net = self.sim.net
        none = np.iinfo(np.int64).max
        if extra <= 0:
            return none, none

        def largest(keys, mask, want):
            """The largest v with at least ``want`` keys (where ``mask``) >= v."""
            top = np.array([keys[mask].max() if mask.any() else 0], dtype=np.int64)
            lo, hi = 0, int(net.allreduce_array(top, "max")[0]) + 1
            while hi - lo > 1:              # count(>= lo) >= want > count(>= hi)
                mid = (lo + hi) // 2
                if net.isum(int(np.count_nonzero(mask & (keys >= mid)))) >= want:
                    lo = mid
                else:
                    hi = mid
            return lo

        every = np.ones(rem.shape[0], dtype=bool)
        t = largest(rem, every, extra)
        need = extra - net.isum(int(np.count_nonzero(rem > t)))
        return t, largest(perm, rem == t, need)


def _slots(counts: np.ndarray) -> np.ndarray:
    """0 .. counts[i] - 1 for every i, concatenated."""
    first = np.cumsum(counts) - counts
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(first, counts)
