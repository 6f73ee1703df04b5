"""Cartesian domain decomposition: which block (rank) owns which point of the domain.

The domain is cut into ``nx x ny x nz`` blocks of equal size; rank ``(cx * ny + cy) * nz + cz``
owns block ``(cx, cy, cz)``. Every rank computes ownership from the same *cut coordinates*
(``lo + k * (hi - lo) / n``), and a point exactly on a cut belongs to the upper block, so a body
on a block bound is assigned to the same rank by every rank (no body is lost or duplicated).

Pure geometry, no MPI: the communication lives in :mod:`parsim.comm`.
"""

from __future__ import annotations

import math

import numpy as np

#: no neighbour on this side (a wall, or an unbounded axis)
NONE = -1


def default_blocks(size: int, lo, hi, periodic, gravity=(0.0, 0.0, 0.0)) -> tuple[int, int, int]:
    """Factor ``size`` into three block counts as ``MPI_Dims_create`` does (as equal as
    possible), giving the largest count to the longest axis of the domain. The axis along which
    gravity mostly acts comes last: bodies settle along it, so cutting across it would leave
    the upper blocks empty."""
    factors = []
    n = size
    p = 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    dims = [1, 1, 1]
    for f in sorted(factors, reverse=True):      # greedy: largest factor to the smallest dim
        k = int(np.argmin(dims))
        dims[k] *= f
    dims.sort(reverse=True)
    lo = np.asarray(lo, dtype=float)
    hi = np.asarray(hi, dtype=float)
    length = np.where(np.isfinite(hi - lo), hi - lo, 0.0)
    g = np.abs(np.asarray(gravity, dtype=float))
    if g.max() > 0:
        length[int(np.argmax(g))] = -1.0         # the settling axis last
    order = np.argsort(-length, kind="stable")   # longest axis first
    out = [1, 1, 1]
    for d, k in zip(order, dims):
        out[int(d)] = k
    return tuple(out)


class Decomposition:
    """The block of one rank in a Cartesian grid of blocks, and its neighbours.

    Parameters
    ----------
    blocks : 3 ints
        Block counts per axis (their product is the number of ranks).
    rank : int
        This rank.
    lo, hi : float[3]
        Domain corners (may be infinite on an axis with one block).
    periodic : bool[3]
    """

    def __init__(self, blocks, rank: int, lo, hi, periodic):
        self.dims = tuple(int(b) for b in blocks)
        if len(self.dims) != 3 or min(self.dims) < 1:
            raise ValueError(f"blocks must be 3 integers >= 1, got {blocks!r}")
        self.size = self.dims[0] * self.dims[1] * self.dims[2]
        self.rank = int(rank)
        self.lo = np.asarray(lo, dtype=np.float64)
        self.hi = np.asarray(hi, dtype=np.float64)
        self.periodic = np.asarray(periodic, dtype=bool)
        for d in range(3):
            if self.dims[d] > 1 and not (math.isfinite(self.lo[d]) and math.isfinite(self.hi[d])):
                raise ValueError(f"cannot cut the unbounded axis {'xyz'[d]} into {self.dims[d]} "
                                 "blocks: give the simulation a finite domain")
        self.coords = self.coords_of(self.rank)
        # inner cut coordinates per axis, and this block's bounds
        self.cuts = []
        self.block_lo = np.empty(3)
        self.block_hi = np.empty(3)
        for d in range(3):
            n = self.dims[d]
            k = np.arange(1, n, dtype=np.float64)
            cuts = self.lo[d] + (self.hi[d] - self.lo[d]) * k / n if n > 1 else np.empty(0)
            self.cuts.append(cuts)
            c = self.coords[d]
            self.block_lo[d] = self.lo[d] if c == 0 else cuts[c - 1]
            self.block_hi[d] = self.hi[d] if c == n - 1 else cuts[c]
        # neighbour ranks below / above along each axis, and whether the link crosses the
        # periodic seam (then a copy sent across it is shifted by one box length)
        self.down = [NONE] * 3
        self.up = [NONE] * 3
        self.seam_down = [False] * 3
        self.seam_up = [False] * 3
        for d in range(3):
            n, c = self.dims[d], self.coords[d]
            for step, attr, seam in ((-1, self.down, self.seam_down), (1, self.up, self.seam_up)):
                t = c + step
                crosses = t < 0 or t >= n
                if crosses and not self.periodic[d]:
                    continue
                nc = list(self.coords)
                nc[d] = t % n
                attr[d] = self.rank_of(nc)
                seam[d] = crosses

    def coords_of(self, rank: int) -> tuple[int, int, int]:
        nx, ny, nz = self.dims
        return (rank // (ny * nz), (rank // nz) % ny, rank % nz)

    def rank_of(self, coords) -> int:
        nx, ny, nz = self.dims
        return (int(coords[0]) * ny + int(coords[1])) * nz + int(coords[2])

    def owner_coords(self, position: np.ndarray) -> np.ndarray:
        """Block coordinates (int64[n, 3]) owning each point (positions already wrapped into
        the domain on periodic axes)."""
        p = np.asarray(position, dtype=np.float64).reshape(-1, 3)
        out = np.zeros((p.shape[0], 3), dtype=np.int64)
        for d in range(3):
            if self.dims[d] > 1:
                out[:, d] = np.searchsorted(self.cuts[d], p[:, d], side="right")
        return out

    def owner_rank(self, position: np.ndarray) -> np.ndarray:
        c = self.owner_coords(position)
        nx, ny, nz = self.dims
        return (c[:, 0] * ny + c[:, 1]) * nz + c[:, 2]

    def owns(self, position: np.ndarray) -> np.ndarray:
        """bool[n]: the points this rank's block owns."""
        return self.owner_rank(position) == self.rank

    def width(self) -> np.ndarray:
        return self.block_hi - self.block_lo

    def describe(self) -> str:
        return (f"rank {self.rank} of {self.size}, block {self.coords} of {self.dims}, "
                f"[{tuple(map(float, self.block_lo))}, {tuple(map(float, self.block_hi))})")
