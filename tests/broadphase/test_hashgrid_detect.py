"""The HHG detection step by rows of cells (``parsim.broadphase.hashgrid_detect``), path by path.

The detection sorts the bodies into rows of cells; a row of more than ``SHORT`` bodies is searched
through x tables (two planes at a time for the grid being swept, span-limited tables for the
coarser grids that finer bodies probe, a binary search where those tables do not fit), in a
shorter row the windows' ends are counted from the x indices, and the hashed grids wrap at both
ends of every axis. The random-sequence tests elsewhere rarely fill a row beyond ``SHORT``
bodies; here every path is driven on purpose (and the test checks that it was), against the
brute-force oracle.
"""

from __future__ import annotations

import numpy as np
import pytest

import broadphase_oracle as orc
from broadphase_configs import HHG_DEFAULTS


def hhg(**kw):
    from parsim.broadphase import HierarchicalHashGrid

    return HierarchicalHashGrid(**{**HHG_DEFAULTS, **kw})


def cells_of(bp, rank: int) -> tuple[np.ndarray, int]:
    """The cells of the bodies of the grid of this rank (finest first), and its x bits."""
    G = bp._G
    g = int(G.order[rank])
    n = bp.bodies.n
    return bp._b_cell[:n][bp._b_grid[:n] == g].astype(np.int64), int(G.bits[g, 0])


def row_lengths(bp) -> dict[int, np.ndarray]:
    """Bodies per row of cells (z, y) of every grid (by rank, finest first), from the grid's
    own cell assignment."""
    G = bp._G
    out = {}
    for r in range(int(G.n[0])):
        cells, bx = cells_of(bp, r)
        g = int(G.order[r])
        out[r] = np.bincount(cells >> bx, minlength=1 << int(G.bits[g, 1] + G.bits[g, 2]))
    return out


def x_cells(bp, rank: int) -> np.ndarray:
    cells, bx = cells_of(bp, rank)
    return cells & ((1 << bx) - 1)


def check(bp, ids, lo, hi, label):
    orc.assert_pairs_equal(bp.pairs(), orc.pairs(ids, lo, hi), label=label)


@pytest.mark.parametrize("centre", [0.0, -3.0, 1.0e6])
def test_long_rows_across_the_wrap_of_every_axis(centre):
    # 3,000 cubes of edge 1 in a 12^3 box around `centre`: 32^3 cells of 1.41, the box spans 9
    # of them per axis, so rows hold ~40 bodies (x tables) and, around 0 (and wherever the
    # hash wraps), the x = 2**bx - 1 and x = 0 cells are neighbours in x, y and z
    from parsim.broadphase.hashgrid_detect import SHORT

    rng = np.random.default_rng(5)
    n = 3000
    c = centre + rng.uniform(-6, 6, (n, 3))
    lo, hi = c - 0.5, c + 0.5
    ids = rng.permutation(n).astype(np.int64)
    bp = hhg()
    bp.add(ids, lo, hi)
    lengths = row_lengths(bp)[0]
    assert lengths.max() > 4 * SHORT
    xs = x_cells(bp, 0)
    mx = (1 << int(bp._G.bits[int(bp._G.order[0]), 0])) - 1
    if centre == 0.0:
        assert (xs == 0).any() and (xs == mx).any()
    check(bp, ids, lo, hi, f"centre {centre}")
    for step in range(3):  # drift: rows change, cells cross the wrap
        c = c + rng.normal(0, 0.3, c.shape)
        lo, hi = c - 0.5, c + 0.5
        bp.update(ids, lo, hi)
        check(bp, ids, lo, hi, f"centre {centre}, step {step}")


def test_a_grid_that_never_grows_wraps_everything():
    # 4^3 cells (the smallest grid) that never grow: 2,000 bodies of a 40^3 box hash 7 times
    # around every axis into 16 rows of ~125 bodies; each cell's neighbours across the wrap are
    # its neighbours in space too, and distinct (4 cells per axis)
    rng = np.random.default_rng(6)
    n = 2000
    c = rng.uniform(-20, 20, (n, 3))
    half = rng.uniform(0.4, 0.45, (n, 1))  # one grid
    lo, hi = c - half, c + half
    ids = np.arange(n, dtype=np.int64)
    bp = hhg(initial_cells=4, min_grid_density=1e-6)
    bp.add(ids, lo, hi)
    assert bp.grid_info()["dims"].tolist() == [[4, 4, 4]]
    assert row_lengths(bp)[0].min() > 60
    check(bp, ids, lo, hi, "4^3 cells")
    sel = rng.choice(n, n // 3, replace=False)
    lo[sel] += 7.3
    hi[sel] += 7.3
    bp.update(ids[sel], lo[sel], hi[sel])
    check(bp, ids, lo, hi, "4^3 cells, a third moved")


@pytest.mark.parametrize("tables", ["x tables", "binary search"])
def test_coarse_grids_with_long_rows(tables):
    # three size classes with hundreds of bodies each in a small box around the origin: the
    # finer bodies probe the coarser grids' long rows through their x tables, or, with no room
    # for tables, by binary search; the probes' x range wraps for bodies near 0
    from parsim.broadphase.hashgrid_detect import SHORT

    rng = np.random.default_rng(7)
    counts, sizes = (2500, 1200, 500), (0.5, 1.0, 2.0)
    c = rng.uniform(-8, 8, (sum(counts), 3))
    size = np.repeat(sizes, counts) * rng.uniform(0.75, 0.99, sum(counts))
    lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
    ids = rng.permutation(sum(counts)).astype(np.int64) * 3 + 11
    bp = hhg()
    if tables == "binary search":
        bp._coarse_table_per_body = 0
        bp._coarse_table_extra = 0
    bp.add(ids, lo, hi)
    lengths = row_lengths(bp)
    assert len(lengths) == 3
    assert lengths[1].max() > SHORT and lengths[2].max() > SHORT  # probed long rows
    check(bp, ids, lo, hi, tables)
    for step in range(2):
        c = c + rng.normal(0, 0.2, c.shape)
        lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
        bp.update(ids, lo, hi)
        check(bp, ids, lo, hi, f"{tables}, step {step}")


@pytest.mark.parametrize("big", [20.0, 150.0])
def test_sparse_coarse_grid_and_short_rows(big):
    # a sparse gas (rows of 1-12 bodies, nine in ten at most SHORT: windows counted; the
    # probed mid-size grid's rows all short) with 10 big bodies in a grid of their
    # own (at most SCAN_COARSE_MAX bodies: scanned against every finer body) and 300 mid-size
    # ones (probed); at 150 the big bodies overlap most of the others, the first and the last
    # of every run included
    from parsim.broadphase.hashgrid_detect import SHORT
    from parsim.broadphase.hashgrid_kernels import SCAN_COARSE_MAX

    rng = np.random.default_rng(8)
    counts, sizes = (4000, 300, 10), (1.0, 3.0, big)
    assert counts[2] <= SCAN_COARSE_MAX < counts[1]
    c = rng.uniform(-60, 60, (sum(counts), 3))
    size = np.repeat(sizes, counts)
    lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
    ids = np.arange(sum(counts), dtype=np.int64)
    bp = hhg()
    bp.add(ids, lo, hi)
    assert bp.grid_info()["n_bodies"].tolist() == list(counts)
    lengths = row_lengths(bp)
    fine = lengths[0][lengths[0] > 0]
    assert (fine <= SHORT).mean() > 0.9 and ((fine >= 2) & (fine <= SHORT)).any()  # counted
    assert lengths[1].max() <= SHORT                   # the probed grid: short rows only
    check(bp, ids, lo, hi, "sparse")


@pytest.mark.parametrize("coarse", [False, True])
def test_short_rows_give_x_windows_across_the_wrap(coarse):
    # a slab of ~1,000 bodies 4 units thick in x around 0, in a 16^3 grid that never grows:
    # rows (z, y) hold ~4 bodies (at most SHORT: their windows are counted from the x indices),
    # and the slab straddles the wrap of x (cells -2..1 hash to 14, 15, 0, 1), so the x = mx
    # and x = 0 cells of a short row are neighbours, in the own row and in the forward rows.
    # With ``coarse``, 60 bodies of twice the size form a grid of short rows that the fine
    # bodies probe (over SCAN_COARSE_MAX bodies), whose x range wraps around 0 too.
    from parsim.broadphase.hashgrid_detect import SHORT
    from parsim.broadphase.hashgrid_kernels import SCAN_COARSE_MAX

    rng = np.random.default_rng(9)
    counts = (1000, 60) if coarse else (1000,)
    sizes = (0.9, 1.8)[: len(counts)]
    n = sum(counts)
    c = np.column_stack([rng.uniform(-2, 2, n), rng.uniform(-10, 10, (n, 2))])
    size = np.repeat(sizes, counts) * rng.uniform(0.9, 1.0, n)
    lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
    ids = rng.permutation(n).astype(np.int64) * 5 + 2
    bp = hhg(initial_cells=16, min_grid_density=1e-6)
    bp.add(ids, lo, hi)
    info = bp.grid_info()
    assert info["n_bodies"].tolist() == list(counts)
    assert (info["dims"] == 16).all()
    lengths = row_lengths(bp)
    short_bodies = 0
    for r, counts_r in lengths.items():
        occupied = counts_r[counts_r > 0]
        assert np.median(occupied) <= SHORT
        short_bodies += occupied[occupied <= SHORT].sum()
    assert short_bodies > 0.8 * n
    xs = x_cells(bp, 0)
    assert (xs == 0).any() and (xs == 15).any()
    if coarse:
        assert counts[1] > SCAN_COARSE_MAX
        xc = x_cells(bp, 1)
        assert (xc == 0).any() and (xc == 15).any()
    check(bp, ids, lo, hi, f"short rows, coarse {coarse}")
    for step in range(3):  # drift within the slab: bodies cross the wrap
        c = c + rng.normal(0, 0.4, c.shape)
        lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
        bp.update(ids, lo, hi)
        check(bp, ids, lo, hi, f"short rows, coarse {coarse}, step {step}")


def whole_row_paths(bp, rank: int = 0) -> dict[str, int]:
    """How many occupied rows of the grid of this rank take each path of the sparse
    detection (``WHOLE_MAX``): tested whole, with two vectors for the own run or for the
    forward plane's run, with a wrapped run at y = 0 or y = my, or through x windows."""
    from parsim.broadphase.hashgrid_detect import LANES, WHOLE_MAX

    G = bp._G
    g = int(G.order[rank])
    by, bz = int(G.bits[g, 1]), int(G.bits[g, 2])
    L = row_lengths(bp)[rank].reshape(1 << bz, 1 << by)  # [z, y]
    ny, nz = 1 << by, 1 << bz
    found = dict(whole=0, own_two=0, plane_two=0, wrapped=0, windows=0)
    for z in range(nz):
        zq = (z + 1) % nz
        for y in range(ny):
            if L[z, y] == 0:
                continue
            own = L[z, y] + (L[z, y + 1] if y < ny - 1 else 0)
            plane = sum(L[zq, yy] for yy in (y - 1, y, y + 1) if 0 <= yy < ny)
            if own > WHOLE_MAX + 1 or plane > WHOLE_MAX:
                found["windows"] += 1
                continue
            found["whole"] += 1
            found["own_two"] += own - 1 > LANES
            found["plane_two"] += plane > LANES
            found["wrapped"] += (y == 0 and L[zq, ny - 1] > 0) or (y == ny - 1 and (
                L[z, 0] > 0 or L[zq, 0] > 0))
    return found


@pytest.mark.parametrize("coarse", [False, True])
def test_sparse_rows_tested_whole(coarse):
    # a thin gas wrapped around a 16^3 grid that never grows, with a denser cluster: most rows'
    # half neighbours (the rest of the own row and the row after it, the three rows of the next
    # plane) hold at most WHOLE_MAX bodies and are tested whole, one or two vectors a run, the
    # runs across the wrap of y and z included; the cluster's rows take the x windows. With
    # ``coarse``, 60 bodies of twice the size form a grid the fine bodies probe as well.
    from parsim.broadphase.hashgrid_kernels import SCAN_COARSE_MAX

    rng = np.random.default_rng(10)
    gas, cluster = 700, 700
    counts = (gas + cluster, 60) if coarse else (gas + cluster,)
    n = sum(counts)
    c = np.concatenate([rng.uniform(-12, 12, (gas, 3)), rng.normal(3.0, 1.6, (cluster, 3)),
                        rng.uniform(-12, 12, (n - gas - cluster, 3))])
    sizes = (0.9, 1.8)[: len(counts)]
    size = np.repeat(sizes, counts) * rng.uniform(0.9, 1.0, n)
    lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
    ids = rng.permutation(n).astype(np.int64) * 7 + 3
    bp = hhg(initial_cells=16, min_grid_density=1e-6)
    bp.add(ids, lo, hi)
    assert bp.grid_info()["n_bodies"].tolist() == list(counts)
    if coarse:
        assert counts[1] > SCAN_COARSE_MAX
    paths = whole_row_paths(bp)
    assert paths["whole"] > 100 and paths["windows"] > 5, paths
    assert min(paths["own_two"], paths["plane_two"], paths["wrapped"]) > 0, paths
    check(bp, ids, lo, hi, f"sparse rows, coarse {coarse}")
    for step in range(3):
        c = c + rng.normal(0, 0.4, c.shape)
        lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
        bp.update(ids, lo, hi)
        check(bp, ids, lo, hi, f"sparse rows, coarse {coarse}, step {step}")


def is_flat(bp, rank: int = 0) -> bool:
    """Whether the grid of this rank is swept body by body (``flat_sweep``): sparse, no row
    longer than ``FLAT_ROW_MAX``, four cells or more along y and z, and no coarser grid that
    its bodies probe."""
    from parsim.broadphase.hashgrid_detect import FLAT_PER_ROW, FLAT_ROW_MAX
    from parsim.broadphase.hashgrid_kernels import SCAN_COARSE_MAX

    G = bp._G
    g = int(G.order[rank])
    by, bz = int(G.bits[g, 1]), int(G.bits[g, 2])
    coarser = [int(G.count[int(G.order[r])]) for r in range(rank + 1, int(G.n[0]))]
    return (0 < int(G.count[g]) <= FLAT_PER_ROW << (by + bz) and min(by, bz) >= 2
            and row_lengths(bp)[rank].max() <= FLAT_ROW_MAX
            and all(c <= SCAN_COARSE_MAX for c in coarser))


@pytest.mark.parametrize("centre", [0.0, 1.0e6])
def test_sparse_grid_swept_body_by_body(centre):
    # a thin gas over a 16^3 grid that never grows (256 rows, at most FLAT_PER_ROW bodies per
    # occupied row on average, none more than FLAT_ROW_MAX), with a denser cluster, is swept
    # body by body, every row tested whole:
    # runs of one and two vectors of eight, longer runs (the cluster's: more than sixteen
    # candidates, where the row loop would take x windows) in pieces of sixteen, the first
    # and last rows with their wrapped runs; and one big body scanned against all. Corners on
    # a grid of 1/4, so that many boxes touch exactly (closed boxes overlap); around 1e6
    # float32's step is 1/16, and the float32 filter must still keep every overlap.
    rng = np.random.default_rng(12)
    gas, cluster = 600, 250
    n = gas + cluster + 1
    c = np.concatenate([rng.uniform(-12, 12, (gas, 3)), rng.normal(3.0, 2.0, (cluster, 3)),
                        np.zeros((1, 3))])
    size = np.concatenate([np.full(gas + cluster, 0.75), [9.0]])

    def boxes(c):
        lo = np.round((centre + c - size[:, None] / 2) * 4) / 4
        return lo, lo + size[:, None]

    lo, hi = boxes(c)
    ids = rng.permutation(n).astype(np.int64) * 5 + 1
    bp = hhg(initial_cells=16, min_grid_density=1e-6)
    bp.add(ids, lo, hi)
    assert bp.grid_info()["n_bodies"].tolist() == [gas + cluster, 1]
    assert is_flat(bp)
    paths = whole_row_paths(bp)  # ("windows": the rows with runs of more than sixteen)
    assert paths["whole"] > 100 and paths["windows"] > 3, paths
    assert min(paths["own_two"], paths["plane_two"], paths["wrapped"]) > 0, paths
    assert len(orc.pairs(ids, lo, hi)) > 100
    check(bp, ids, lo, hi, f"flat sweep, centre {centre}")
    for step in range(3):
        c = c + rng.normal(0, 0.4, c.shape)
        c[-1] = 0.0
        lo, hi = boxes(c)
        bp.update(ids, lo, hi)
        assert is_flat(bp)
        check(bp, ids, lo, hi, f"flat sweep, centre {centre}, step {step}")


def test_a_sparse_grid_with_a_long_row_is_swept_by_rows():
    # the same thin gas, but one row holds more than FLAT_ROW_MAX bodies (a line of boxes along
    # x): the grid takes the row loop (x windows for the long row), with the same pairs
    from parsim.broadphase.hashgrid_detect import FLAT_ROW_MAX

    rng = np.random.default_rng(13)
    gas, line = 600, FLAT_ROW_MAX + 8
    c = np.concatenate([rng.uniform(-12, 12, (gas, 3)),
                        np.column_stack([np.linspace(-11, 11, line), np.full(line, 0.3),
                                         np.full(line, -0.4)])])
    lo, hi = c - 0.375, c + 0.375
    ids = np.arange(c.shape[0], dtype=np.int64)
    bp = hhg(initial_cells=16, min_grid_density=1e-6)
    bp.add(ids, lo, hi)
    assert row_lengths(bp)[0].max() > FLAT_ROW_MAX and not is_flat(bp)
    check(bp, ids, lo, hi, "sparse grid with a long row")


def test_the_detection_build_follows_the_scene(monkeypatch):
    # HierarchicalHashGrid._pairs runs find_pairs_rows_flat while the last call of it swept a
    # grid body by body, else the plain build, and looks again every FLAT_RECHECK calls; on a
    # sparse scene the plain build (the row loop) gives the same pairs as the flat one
    import parsim.broadphase.hashgrids as H

    calls = []

    def counted(kernel, name):
        def run(*args):
            calls.append(name)
            return kernel(*args)
        return run

    monkeypatch.setattr(H, "find_pairs_rows", counted(H.find_pairs_rows, "plain"))
    monkeypatch.setattr(H, "find_pairs_rows_flat", counted(H.find_pairs_rows_flat, "flat"))
    monkeypatch.setattr(H.HierarchicalHashGrid, "FLAT_RECHECK", 3)
    rng = np.random.default_rng(14)
    n = 600
    sparse = rng.uniform(-12, 12, (n, 3))
    dense = rng.uniform(-3, 3, (n, 3))
    ids = np.arange(n, dtype=np.int64)
    bp = hhg(initial_cells=16, min_grid_density=1e-6)
    bp.add(ids, sparse - 0.375, sparse + 0.375)
    assert is_flat(bp)
    for _ in range(3):
        check(bp, ids, sparse - 0.375, sparse + 0.375, "sparse")
    assert calls == ["flat"] * 3
    bp.update(ids, dense - 0.375, dense + 0.375)
    assert not is_flat(bp)
    calls.clear()
    bp._last_pairs = 10 ** 5  # (a buffer large enough: no second run of a kernel in a call)
    for _ in range(6):
        check(bp, ids, dense - 0.375, dense + 0.375, "dense")
    assert calls == ["flat", "plain", "plain", "plain", "flat", "plain"]
    # the plain build on the sparse scene
    bp.update(ids, sparse - 0.375, sparse + 0.375)
    bp._flat_hint, bp._flat_wait = False, 10
    calls.clear()
    check(bp, ids, sparse - 0.375, sparse + 0.375, "sparse, plain build")
    assert calls == ["plain"]


@pytest.mark.parametrize("scene", ["sparse", "dense"])
def test_a_pair_buffer_too_small_is_counted_past_and_retried(monkeypatch, scene):
    # the detection's first buffer holds 8 rows: each build counts on past the end (from row 0
    # again) and returns the true count, the caller runs it once more with that size; the
    # pairs equal the oracle's either way (flat_sweep's writes and the row loop's)
    import parsim.broadphase.hashgrids as H
    from parsim.broadphase.base import collect_pairs

    sizes = []

    def small_first(kernel, args, expected):
        out = np.empty((8, 2), dtype=np.int64)
        m = kernel(*args, out)
        sizes.append(m)
        return collect_pairs(kernel, args, m)

    monkeypatch.setattr(H, "collect_pairs", small_first)
    rng = np.random.default_rng(15)
    n = 600
    c = rng.uniform(-12, 12, (n, 3)) if scene == "sparse" else rng.uniform(-3, 3, (n, 3))
    c = np.concatenate([c, np.zeros((1, 3))])
    size = np.concatenate([np.full(n, 0.75), [9.0]])[:, None]
    lo, hi = c - size / 2, c + size / 2
    ids = np.arange(n + 1, dtype=np.int64)
    bp = hhg(initial_cells=16, min_grid_density=1e-6)
    bp.add(ids, lo, hi)
    assert is_flat(bp) == (scene == "sparse")
    expected = orc.pairs(ids, lo, hi)
    assert len(expected) > 50
    for _ in range(2):  # the first build, then the one the flag picks
        check(bp, ids, lo, hi, f"{scene}, small buffer")
    assert sizes == [len(expected)] * 2
