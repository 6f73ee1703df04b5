"""Hierarchical hash grid specifics (Schornbaum 2009, sections 3.2-3.7).

* activation threshold: at most ``activation_threshold`` bodies -> no grids (all-pairs), more ->
  grids built, irrevocably;
* the hierarchy is sparse and built lazily by Algorithm 3: the first grid's cell size is the first
  body's size times sqrt(f), every other cell size is c0 * f^k, and each body sits in the grid
  with ``cell/f <= size < cell`` (size = longest AABB edge);
* a grid doubles its cells per axis once it holds more than cells / min_grid_density bodies, and
  never shrinks;
* coordinates beyond 2**50 cells from the origin cannot be hashed exactly: BroadPhaseError;
* every configuration gives the oracle's answers (hierarchy factors 2, 3, 1.5; both update
  strategies; bodies changing grids as their AABBs grow and shrink; infinite bodies).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import broadphase_oracle as orc
from broadphase_configs import HHG_DEFAULTS, Config, check_hhg_invariants, grid_info


def hhg(**kw):
    from parsim.broadphase import HierarchicalHashGrid

    return HierarchicalHashGrid(**{**HHG_DEFAULTS, **kw})


def cfg_of(**kw) -> Config:
    return Config("HierarchicalHashGrid-test", "HierarchicalHashGrid", {**HHG_DEFAULTS, **kw})


def cubes(rng, n, edge, span, offset=0.0):
    lo = rng.uniform(offset, offset + span, (n, 3))
    return lo, lo + edge


class Tracker:
    """A HHG plus its oracle model, checking answers and grid invariants after every call."""

    def __init__(self, rng_seed=0, **kw):
        self.kw = {**HHG_DEFAULTS, **kw}
        self.cfg = cfg_of(**kw)
        self.bp = hhg(**kw)
        self.model = orc.Model()
        self.rng = np.random.default_rng(rng_seed)
        self.max_finite = 0
        self.max_total = 0

    def check(self, n_queries=2, label=""):
        self.max_finite = max(self.max_finite, len(self.model.boxes))
        self.max_total = max(self.max_total, len(self.model))
        orc.assert_matches(self.bp, self.model, self.rng, n_queries, label=label)
        _, lo, hi = self.model.arrays()
        check_hhg_invariants(self.bp, self.cfg, lo, hi, self.max_finite, self.max_total)

    def add(self, ids, lo, hi, **kw):
        self.bp.add(ids, lo, hi)
        self.model.add(ids, lo, hi)
        self.check(**kw)

    def update(self, ids, lo, hi, **kw):
        self.bp.update(ids, lo, hi)
        self.model.update(ids, lo, hi)
        self.check(**kw)

    def remove(self, ids, **kw):
        self.bp.remove(ids)
        self.model.remove(ids)
        self.check(**kw)

    def add_infinite(self, ids, **kw):
        self.bp.add_infinite(ids)
        self.model.add_infinite(ids)
        self.check(**kw)


# --------------------------------------------------------------------------------------------
# activation threshold (section 3.7)
# --------------------------------------------------------------------------------------------

def test_activation_threshold_one_body_at_a_time():
    t = Tracker(1, activation_threshold=32)
    lo, hi = cubes(t.rng, 40, 1.0, 6.0)  # dense: many pairs
    for i in range(32):
        t.add([i], lo[i : i + 1], hi[i : i + 1], n_queries=1)
        assert not t.bp.active, f"active with {i + 1} bodies (threshold 32)"
        assert grid_info(t.bp)["cell_size"].size == 0
    t.add([32], lo[32:33], hi[32:33], n_queries=5)
    assert t.bp.active, "33 bodies > threshold 32 but not active"
    assert int(grid_info(t.bp)["n_bodies"].sum()) == 33
    # removing back below the threshold keeps the grids (irrevocable)
    t.remove(np.arange(10, 33), n_queries=5)
    assert len(t.bp) == 10 and t.bp.active
    assert int(grid_info(t.bp)["n_bodies"].sum()) == 10
    # and the grids keep working for moves and new bodies
    t.update(np.arange(10), lo[:10] + 0.5, hi[:10] + 0.5, n_queries=5)
    t.add(np.arange(100, 105), lo[33:38], hi[33:38], n_queries=5)


def test_activation_threshold_in_one_batch():
    t = Tracker(2, activation_threshold=32)
    lo, hi = cubes(t.rng, 33, 1.5, 8.0)
    t.add(np.arange(32), lo[:32], hi[:32], n_queries=5)
    assert not t.bp.active
    t.update(np.arange(32), lo[:32] + 0.25, hi[:32] + 0.25)  # updates while inactive
    assert not t.bp.active
    t2 = Tracker(3, activation_threshold=32)
    t2.add(np.arange(33), lo, hi, n_queries=5)
    assert t2.bp.active


def test_activation_threshold_zero_activates_at_once():
    t = Tracker(4, activation_threshold=0)
    t.add([5], [[0.0, 0.0, 0.0]], [[2.0, 1.0, 0.5]])
    assert t.bp.active
    info = grid_info(t.bp)
    assert info["n_bodies"].tolist() == [1]
    # Algorithm 3, line 3: cell size = size of the first body (longest edge) * sqrt(f)
    assert info["cell_size"][0] == pytest.approx(2.0 * math.sqrt(2.0), rel=1e-14)
    assert info["dims"].tolist() == [[16, 16, 16]]


@pytest.mark.parametrize("threshold", [1, 5])
def test_small_thresholds(threshold):
    t = Tracker(5, activation_threshold=threshold)
    lo, hi = cubes(t.rng, threshold + 1, 1.0, 2.0)
    t.add(np.arange(threshold), lo[:threshold], hi[:threshold])
    assert not t.bp.active
    t.add([threshold], lo[threshold:], hi[threshold:])
    assert t.bp.active


def test_queries_on_inactive_grid():
    t = Tracker(6, activation_threshold=1000)
    lo, hi = cubes(t.rng, 300, 1.0, 10.0)
    t.add(np.arange(300), lo, hi, n_queries=20)
    t.add_infinite([1000, 1001], n_queries=5)
    t.update(np.arange(0, 300, 3), lo[::3] - 3.0, hi[::3] + 1.0, n_queries=20)
    t.remove(np.arange(1, 300, 4), n_queries=20)
    assert not t.bp.active


# --------------------------------------------------------------------------------------------
# the sparse hierarchy (sections 3.3, 3.4)
# --------------------------------------------------------------------------------------------

def expected_cell(c0: float, f: float, size: float) -> float:
    """Cell size c0 * f^k of the grid suitable for ``size`` (cell/f <= size < cell)."""
    k = math.floor(math.log(size / c0) / math.log(f)) + 1
    # guard the float log against an off-by-one at the boundary
    while c0 * f ** (k - 1) > size:
        k -= 1
    while c0 * f**k <= size:
        k += 1
    return c0 * f**k


@pytest.mark.parametrize("f", [2.0, 3.0, 1.5])
@pytest.mark.parametrize("first", ["small", "large"])
def test_sparse_hierarchy_two_sizes(f, first):
    # bodies of sizes 1 and 100 only: exactly two grids, whatever lies between is never created
    t = Tracker(7, activation_threshold=0, hierarchy_factor=f)
    s_lo, s_hi = cubes(t.rng, 50, 1.0, 30.0)
    b_lo, b_hi = cubes(t.rng, 20, 100.0, 300.0)
    small = (np.arange(50), s_lo, s_hi)
    large = (np.arange(100, 120), b_lo, b_hi)
    batches = [small, large] if first == "small" else [large, small]
    for b in batches:
        t.add(*b, n_queries=3)
    info = grid_info(t.bp)
    c0 = (1.0 if first == "small" else 100.0) * math.sqrt(f)
    other = 100.0 if first == "small" else 1.0
    expected = sorted([c0, expected_cell(c0, f, other)])
    assert info["cell_size"].tolist() == pytest.approx(expected, rel=1e-12)
    n_exp = [50, 20]
    assert info["n_bodies"].tolist() == n_exp
    for c, s in zip(expected, (1.0, 100.0)):
        assert c / f <= s < c


def test_sparse_hierarchy_many_sizes():
    # sizes 1, 2, 8, 64 with f = 2 and first size 1: cells sqrt2 * 2^k for k in {0, 1, 3, 6}
    t = Tracker(8, activation_threshold=0)
    sizes = [1.0, 8.0, 2.0, 64.0]
    for j, s in enumerate(sizes):
        lo, hi = cubes(t.rng, 10, s, 200.0)
        t.add(np.arange(10) + 10 * j, lo, hi)
    info = grid_info(t.bp)
    r2 = math.sqrt(2.0)
    assert info["cell_size"].tolist() == pytest.approx([r2, 2 * r2, 8 * r2, 64 * r2], rel=1e-14)
    assert info["n_bodies"].tolist() == [10, 10, 10, 10]


def test_size_is_the_longest_edge():
    # elongated 10 x 1 x 1 boxes belong to the grid of size 10, not 1 (section 3.8)
    t = Tracker(9, activation_threshold=0)
    lo, hi = cubes(t.rng, 20, 1.0, 20.0)
    t.add(np.arange(20), lo, hi)
    rods_lo = t.rng.uniform(0, 20, (20, 3))
    rods_hi = rods_lo + np.array([1.0, 10.0, 1.0])
    t.add(np.arange(20, 40), rods_lo, rods_hi)
    info = grid_info(t.bp)
    r2 = math.sqrt(2.0)
    assert info["cell_size"].tolist() == pytest.approx([r2, 8 * r2], rel=1e-14)
    assert info["n_bodies"].tolist() == [20, 20]


@pytest.mark.parametrize("strategy", ["incremental", "reinsert"])
def test_bodies_change_grid_when_their_aabb_grows_and_shrinks(strategy):
    # a rotating cube's AABB grows by up to sqrt(3): 1 -> 1.7 crosses the cell size sqrt(2)
    t = Tracker(10, activation_threshold=0, update_strategy=strategy)
    lo, hi = cubes(t.rng, 60, 1.0, 8.0)
    t.add(np.arange(60), lo, hi)
    assert grid_info(t.bp)["n_bodies"].tolist() == [60]
    grow = np.arange(0, 60, 3)
    c = (lo[grow] + hi[grow]) / 2
    t.update(grow, c - 0.85, c + 0.85, n_queries=5)
    info = grid_info(t.bp)
    r2 = math.sqrt(2.0)
    exact = strategy == "incremental"  # "reinsert" may rebuild the hierarchy from another body
    if exact:
        assert info["cell_size"].tolist() == pytest.approx([r2, 2 * r2], rel=1e-14)
        assert info["n_bodies"].tolist() == [40, 20]
    # far bigger (a long rod turning): jumps several grids
    t.update(grow[:5], c[:5] - np.array([0.5, 6.0, 0.5]), c[:5] + np.array([0.5, 6.0, 0.5]), n_queries=5)
    # everything shrinks back: the large grids may stay, but hold nothing
    t.update(np.arange(60), lo, hi, n_queries=5)
    info = grid_info(t.bp)
    if exact:
        assert info["n_bodies"][0] == 60 and info["cell_size"][0] == pytest.approx(r2, rel=1e-14)
    assert int(info["n_bodies"].sum()) == 60
    # and smaller than the first grid: a new grid below it
    t.update(grow, c - 0.25, c + 0.25, n_queries=5)
    info = grid_info(t.bp)
    if exact:
        assert info["cell_size"][0] == pytest.approx(r2 / 2, rel=1e-14)
        assert info["n_bodies"][0] == 20


# --------------------------------------------------------------------------------------------
# grid growth (section 3.4) and no shrinking (section 3.5)
# --------------------------------------------------------------------------------------------

def test_grid_growth_at_cells_over_density():
    # 16^3 cells, min_grid_density 8: 512 bodies fit, the 513th doubles every axis
    t = Tracker(11, activation_threshold=0, initial_cells=16, min_grid_density=8)
    lo, hi = cubes(t.rng, 600, 1.0, 60.0)
    t.add(np.arange(512), lo[:512], hi[:512], n_queries=3)
    info = grid_info(t.bp)
    assert info["dims"].tolist() == [[16, 16, 16]] and info["n_bodies"].tolist() == [512]
    t.add([512], lo[512:513], hi[512:513], n_queries=3)
    info = grid_info(t.bp)
    assert info["dims"].tolist() == [[32, 32, 32]] and info["n_bodies"].tolist() == [513]
    # grids never shrink
    t.remove(np.arange(0, 500), n_queries=5)
    info = grid_info(t.bp)
    assert info["dims"].tolist() == [[32, 32, 32]] and info["n_bodies"].tolist() == [13]
    t.update(np.arange(500, 513), lo[500:513] + 7.0, hi[500:513] + 7.0, n_queries=5)
    assert grid_info(t.bp)["dims"].tolist() == [[32, 32, 32]]


@pytest.mark.parametrize("batches", [1, 7])
def test_grid_growth_several_doublings(batches):
    # 5000 bodies > 32^3 / 8 = 4096: 64 per axis (64^3 / 8 = 32768 >= 5000), same when grown in steps
    t = Tracker(12, activation_threshold=32, initial_cells=16, min_grid_density=8)
    lo, hi = cubes(t.rng, 5000, 1.0, 150.0)
    for part in np.array_split(np.arange(5000), batches):
        t.add(part, lo[part], hi[part], n_queries=1)
    info = grid_info(t.bp)
    assert info["dims"].tolist() == [[64, 64, 64]] and info["n_bodies"].tolist() == [5000]


def test_grid_growth_is_per_grid():
    # 600 small bodies grow their grid; 10 large bodies keep theirs at 16^3
    t = Tracker(13, activation_threshold=0)
    lo, hi = cubes(t.rng, 600, 1.0, 80.0)
    t.add(np.arange(600), lo, hi, n_queries=2)
    blo, bhi = cubes(t.rng, 10, 50.0, 80.0)
    t.add(np.arange(1000, 1010), blo, bhi, n_queries=2)
    info = grid_info(t.bp)
    assert info["n_bodies"].tolist() == [600, 10]
    assert info["dims"].tolist() == [[32, 32, 32], [16, 16, 16]]


def test_grid_growth_other_parameters():
    # initial_cells 4, min_grid_density 1: 64 bodies fit in 4^3, the 65th -> 8^3, the 513th -> 16^3
    t = Tracker(14, activation_threshold=0, initial_cells=4, min_grid_density=1)
    lo, hi = cubes(t.rng, 513, 1.0, 40.0)
    t.add(np.arange(64), lo[:64], hi[:64])
    assert grid_info(t.bp)["dims"].tolist() == [[4, 4, 4]]
    t.add([64], lo[64:65], hi[64:65])
    assert grid_info(t.bp)["dims"].tolist() == [[8, 8, 8]]
    t.add(np.arange(65, 513), lo[65:], hi[65:], n_queries=5)
    assert grid_info(t.bp)["dims"].tolist() == [[16, 16, 16]]


def test_grid_growth_through_updates():
    # bodies moving into a grid by growing also count towards its density
    t = Tracker(15, activation_threshold=0, initial_cells=4, min_grid_density=1)
    lo, hi = cubes(t.rng, 100, 1.0, 30.0)
    t.add(np.arange(100), lo, hi)
    assert grid_info(t.bp)["dims"].tolist() == [[8, 8, 8]]
    c = (lo + hi) / 2
    t.update(np.arange(70), c[:70] - 0.9, c[:70] + 0.9, n_queries=5)  # 70 bodies -> grid 2
    info = grid_info(t.bp)
    assert info["n_bodies"].tolist() == [30, 70]
    assert info["dims"].tolist() == [[8, 8, 8], [8, 8, 8]]


@pytest.mark.parametrize("strategy", ["incremental", "reinsert"])
def test_a_grid_beyond_its_cell_limit_is_refused_and_nothing_changes(strategy):
    # the cell limit lowered to 2**12 for the test: a grid holds at most 4096 / 8 = 512 bodies.
    # Every refused call (activation, add, update, with a grid created on the way) raises
    # before anything changes: same answers, same grids, and the structure keeps working.
    from parsim.broadphase import BroadPhaseError

    t = Tracker(16, activation_threshold=32, initial_cells=4, min_grid_density=8,
                update_strategy=strategy)
    t.bp._max_cell_bits = 12
    lo, hi = cubes(t.rng, 600, 1.0, 60.0)          # small bodies: one grid
    blo, bhi = cubes(t.rng, 300, 8.0, 60.0)        # large ones: a coarser grid
    glo, ghi = cubes(t.rng, 1, 200.0, 10.0)        # a giant: a grid of its own
    too_many = r"grid \d+ \(cell size .*\) would exceed 2\*\*12 cells; lower min_grid_density"
    t.add(np.arange(20), lo[:20], hi[:20])         # below the activation threshold
    with pytest.raises(BroadPhaseError, match=too_many):
        t.bp.add(np.arange(20, 600), lo[20:], hi[20:])
    assert not t.bp.active and grid_info(t.bp)["cell_size"].size == 0
    t.check()
    t.add(np.arange(20, 500), lo[20:500], hi[20:500])
    t.add(np.arange(1000, 1300), blo, bhi)
    before = grid_info(t.bp)
    assert before["n_bodies"].tolist() == [500, 300]
    ids = np.concatenate([[2000], np.arange(500, 600)])
    with pytest.raises(BroadPhaseError, match=too_many):  # the giant's new grid is rolled back
        t.bp.add(ids, np.concatenate([glo, lo[500:]]), np.concatenate([ghi, hi[500:]]))
    c = 0.5 * (blo + bhi)
    with pytest.raises(BroadPhaseError, match=too_many):  # 100 large bodies shrink: 600 small
        t.bp.update(np.arange(1000, 1100), c[:100] - 0.5, c[:100] + 0.5)
    for k, v in grid_info(t.bp).items():
        np.testing.assert_array_equal(v, before[k])
    t.check(n_queries=4)
    t.update(np.arange(1000, 1010), c[:10] - 0.5, c[:10] + 0.5)  # 510 fit
    t.add([2000], glo, ghi)
    assert grid_info(t.bp)["n_bodies"].tolist() == [510, 290, 1]
    t.remove(np.arange(0, 500, 2), n_queries=3)


# --------------------------------------------------------------------------------------------
# correctness in every setting
# --------------------------------------------------------------------------------------------

def polydisperse(rng, n):
    size = np.exp(rng.uniform(np.log(0.05), np.log(50.0), n))
    c = rng.uniform(-150, 150, (n, 3))
    aspect = rng.uniform(0.3, 1.0, (n, 3))
    aspect[np.arange(n), rng.integers(0, 3, n)] = 1.0
    half = size[:, None] * aspect / 2
    return c - half, c + half


@pytest.mark.parametrize("f", [2.0, 3.0, 1.5])
@pytest.mark.parametrize("strategy", ["incremental", "reinsert"])
def test_hierarchy_factors_and_strategies_against_oracle(f, strategy):
    t = Tracker(16, activation_threshold=0, hierarchy_factor=f, update_strategy=strategy)
    n = 2000
    lo, hi = polydisperse(t.rng, n)
    ids = t.rng.permutation(10**7)[:n].astype(np.int64)
    t.add(ids, lo, hi, n_queries=10)
    for step in range(3):
        sel = t.rng.choice(n, n // 5, replace=False)
        c = (lo[sel] + hi[sel]) / 2 + t.rng.normal(0, 2, (sel.size, 3))
        half = (hi[sel] - lo[sel]) / 2 * t.rng.uniform(0.6, 1.7, (sel.size, 1))  # rotate
        lo[sel], hi[sel] = c - half, c + half
        t.update(ids[sel], lo[sel], hi[sel], n_queries=5, label=f"step {step}: ")
    t.add_infinite([10**8, 10**8 + 1], n_queries=5)
    gone = t.rng.choice(n, n // 3, replace=False)
    t.remove(ids[gone], n_queries=10)


def test_reinsert_equals_incremental():
    rng = np.random.default_rng(17)
    a = Tracker(0, activation_threshold=0, update_strategy="incremental")
    b = Tracker(0, activation_threshold=0, update_strategy="reinsert")
    n = 1500
    lo, hi = polydisperse(rng, n)
    ids = np.arange(n, dtype=np.int64) * 7
    for t in (a, b):
        t.add(ids, lo, hi, n_queries=0)
    for step in range(4):
        sel = rng.choice(n, rng.integers(1, n), replace=False)
        ext = (hi[sel] - lo[sel]) * rng.uniform(0.5, 2.0, (sel.size, 1))
        lo[sel] += rng.normal(0, 3, (sel.size, 3))
        hi[sel] = lo[sel] + ext
        for t in (a, b):
            t.update(ids[sel], lo[sel], hi[sel], n_queries=0)
        pa = orc.canonical_pairs(a.bp.pairs())
        pb = orc.canonical_pairs(b.bp.pairs())
        assert np.array_equal(pa, pb), f"step {step}: strategies disagree"
        q = orc.random_queries(a.model, rng, 5)
        for (qlo, qhi), (p, r), (o, d, tm) in q:
            assert np.array_equal(a.bp.query_box(qlo, qhi), b.bp.query_box(qlo, qhi))
            assert np.array_equal(a.bp.query_radius(p, r), b.bp.query_radius(p, r))
            ra, rb = a.bp.raycast(o, d, tm), b.bp.raycast(o, d, tm)
            assert np.array_equal(ra[0], rb[0]) and np.allclose(ra[1], rb[1], rtol=1e-12, atol=0)


def test_infinite_bodies_with_active_grids():
    t = Tracker(18, activation_threshold=0)
    lo, hi = polydisperse(t.rng, 500)
    t.add(np.arange(500), lo, hi)
    t.add_infinite([7000, 7001, 7002], n_queries=5)
    assert int(grid_info(t.bp)["n_bodies"].sum()) == 500  # planes are in no grid
    t.remove([7001], n_queries=5)
    t.update(np.arange(0, 500, 2), lo[::2] + 1.0, hi[::2] + 1.0, n_queries=5)
    t.remove(np.arange(500), n_queries=5)
    assert len(t.bp) == 2 and t.bp.pairs().shape == (0, 2)


def test_bodies_spread_over_wrapped_hash_cells():
    # 4^3 cells of size sqrt(2); bodies 4 cells apart along every axis all hash to the same
    # bucket but never overlap: no pair may be reported across the wrap-around, and the real
    # overlaps (one partner each) must all be found
    t = Tracker(19, activation_threshold=0, initial_cells=4, min_grid_density=1)
    idx = np.array([(i, j, k) for i in range(-2, 2) for j in range(-2, 2) for k in range(-1, 1)], float)
    lo = idx * 4 * math.sqrt(2.0) + 0.1
    hi = lo + 1.0
    n = len(lo)
    t.add(np.arange(n), lo, hi, n_queries=10)
    assert t.bp.pairs().shape == (0, 2)
    t.add(np.arange(n, 2 * n), lo + 0.5, hi + 0.5, n_queries=10)
    assert t.bp.pairs().shape == (n, 2)
    assert grid_info(t.bp)["dims"].tolist() == [[4, 4, 4]]  # 64 bodies fit 64 cells at density 1


@pytest.mark.parametrize("f", [2.0, 1.5])
def test_extreme_polydispersity_many_grids(f):
    # sizes from 1e-3 to 1e3 (ratio 1e6): 20 grids at f = 2, 34 at f = 1.5
    t = Tracker(22, activation_threshold=0, hierarchy_factor=f)
    n = 1500
    size = np.exp(t.rng.uniform(np.log(1e-3), np.log(1e3), n))
    c = t.rng.uniform(-200, 200, (n, 3))
    lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
    t.add(np.arange(n), lo, hi, n_queries=10)
    g = grid_info(t.bp)["cell_size"].size
    assert g >= math.floor(math.log(1e6) / math.log(f)) - 1
    sel = t.rng.choice(n, n // 2, replace=False)
    t.update(sel, lo[sel] * 1.01, hi[sel] * 1.01 + size[sel, None], n_queries=10)


def test_constructor_rejects_bad_parameters():
    from parsim.broadphase import BroadPhaseError, HierarchicalHashGrid

    bad = [("hierarchy_factor", 1.0), ("hierarchy_factor", 0.5), ("hierarchy_factor", np.nan),
           ("initial_cells", 2), ("initial_cells", 12), ("initial_cells", 0),
           ("min_grid_density", 0), ("min_grid_density", -1), ("activation_threshold", -1),
           ("update_strategy", "sometimes")]
    for name, value in bad:
        with pytest.raises(BroadPhaseError, match=name):
            HierarchicalHashGrid(**{**HHG_DEFAULTS, name: value})


# --------------------------------------------------------------------------------------------
# the limit of exact hashing (section 3.2)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_coordinates_beyond_2_pow_50_cells_raise(axis, sign):
    from parsim.broadphase import BroadPhaseError

    t = Tracker(20, activation_threshold=0)
    lo, hi = cubes(t.rng, 40, 1.0, 5.0)
    t.add(np.arange(40), lo, hi)  # first body size 1: cells of sqrt(2)
    far = np.zeros((1, 3))
    far[0, axis] = sign * 2.0**52  # 2^52 / sqrt(2) > 2^50 cells from the origin
    before = orc.canonical_pairs(t.bp.pairs())
    with pytest.raises(BroadPhaseError) as e:
        t.bp.add([100], far, far + 1.0)
    assert re.search(r"\blo\b|\bhi\b|coordinate|\b[xyz]\b", str(e.value)), str(e.value)
    assert np.array_equal(orc.canonical_pairs(t.bp.pairs()), before)
    t.check()
    # an update that would move a body there is refused too, and changes nothing
    with pytest.raises(BroadPhaseError):
        t.bp.update([0, 1], np.concatenate([lo[:1], far]), np.concatenate([hi[:1], far + 1.0]) + 0.0)
    assert np.array_equal(orc.canonical_pairs(t.bp.pairs()), before)
    t.check(n_queries=3)


def test_coordinates_below_the_limit_work():
    # 2^49 is about 2^48.5 cells of sqrt(2): still exact; unit boxes there can touch
    t = Tracker(21, activation_threshold=0)
    t.add([0], [[0.0, 0.0, 0.0]], [[1.0, 1.0, 1.0]])
    base = 2.0**49
    lo = np.array([[base + 2.0 * i, -base, base / 2] for i in range(10)])
    t.add(np.arange(1, 11), lo, lo + 2.0, n_queries=3)  # a touching row: 9 pairs
    t.add(np.arange(11, 21), lo + np.array([1.0, 1.0, 1.0]), lo + 3.0, n_queries=3)
    assert t.bp.pairs().shape[0] == len(orc.pairs(*t.model.arrays()))


def test_far_body_never_silently_mis_hashed_across_activation():
    # While inactive there are no cells, so a far body may be accepted; but the add that builds
    # the grids must then refuse (and change nothing) rather than hash it wrongly.
    from parsim.broadphase import BroadPhaseError

    t = Tracker(23, activation_threshold=8)
    lo, hi = cubes(t.rng, 12, 1.0, 4.0)
    t.add(np.arange(5), lo[:5], hi[:5])
    far_lo = np.array([[2.0**55, 0.0, 0.0]])
    try:
        t.bp.add([50], far_lo, far_lo + 1.0)
        t.model.add([50], far_lo, far_lo + 1.0)
        accepted = True
    except BroadPhaseError:
        accepted = False
    t.check()
    before = (len(t.bp), orc.canonical_pairs(t.bp.pairs()).tolist())
    if accepted:
        with pytest.raises(BroadPhaseError):
            t.bp.add(np.arange(5, 12), lo[5:], hi[5:])
        assert (len(t.bp), orc.canonical_pairs(t.bp.pairs()).tolist()) == before
        assert not t.bp.active
        t.check()
        t.remove([50])
    t.add(np.arange(5, 12), lo[5:], hi[5:], n_queries=3)
    assert t.bp.active


def test_ids_beyond_float64_exactness_and_sparse_and_dense_coarse_grids():
    # ids just above 2**53 and near 2**63 (not exact in float64) must come back exact. Coarse
    # grids with few bodies are scanned against all finer bodies, with many bodies probed cell
    # by cell: both happen here (a 2nd size class of 8 bodies, a 3rd one of 400).
    rng = np.random.default_rng(31)
    n_small, n_mid, n_big = 3000, 400, 8
    c = rng.uniform(0, 40, (n_small + n_mid + n_big, 3))
    size = np.concatenate([np.full(n_small, 1.0), np.full(n_mid, 3.0), np.full(n_big, 12.0)])
    lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
    for base in (2**53 + 1, 2**63 - 10**6, 0):
        ids = base + rng.permutation(lo.shape[0]).astype(np.int64)
        bp = hhg()
        bp.add(ids, lo, hi)
        assert grid_info(bp)["n_bodies"].tolist() == [n_small, n_mid, n_big]
        orc.assert_pairs_equal(bp.pairs(), orc.pairs(ids, lo, hi), label=f"ids from {base}")
        shift = rng.normal(0, 0.3, lo.shape)
        bp.update(ids, lo + shift, hi + shift)
        orc.assert_pairs_equal(bp.pairs(), orc.pairs(ids, lo + shift, hi + shift),
                               label=f"ids from {base}, moved")


def _walk_containers(bp):
    """Every body's (grid, cell) from the containers themselves (cell table -> container ->
    chain of blocks -> entries), checking the links on the way."""
    from parsim.broadphase import hashgrid_kernels as K

    G, C, P, cells = bp._G, bp._C, bp._P, bp._cells
    seen = {}
    for k in range(int(C.n[0])):
        cell, g, size = (int(C.row[k, K.C_CELL]), int(C.row[k, K.C_GRID]),
                         int(C.row[k, K.C_SIZE]))
        assert size > 0, f"container {k} is empty but listed"
        assert cells[G.base[g] + cell] == k + 1, f"cell of container {k} does not point back to it"
        b = int(C.row[k, K.C_HEAD])
        got = 0
        while got < size:
            for off in range(min(K.BLOCK, size - got)):
                s = int(P.entries[b * K.BLOCK + off])
                assert s not in seen, f"slot {s} in two containers"
                assert bp._b_entry[s] == b * K.BLOCK + off, f"slot {s} does not know its entry"
                seen[s] = (g, cell)
                got += 1
            if got < size:
                b = int(P.next[b])
        assert b == C.row[k, K.C_TAIL], f"container {k}: tail block mismatch"
    occupied = np.flatnonzero(cells > 0).size
    assert occupied == int(C.n[0]), f"{occupied} cells point to containers, {int(C.n[0])} listed"
    return seen


@pytest.mark.parametrize("edge,span", [(1.0, 60.0), (1.0, 6.0)])
def test_containers_consistent_after_cell_moves(edge, span):
    """Moves between cells (a sparse gas: most movers are the sole body of their cell and go to
    an empty one, which takes the container along; a dense one: shared cells) leave every
    container listing exactly the bodies of its cell, every cell pointing to its container,
    and the queries equal to the oracle's."""
    rng = np.random.default_rng(5)
    t = Tracker(21, activation_threshold=0)
    n = 400
    ids = np.arange(n, dtype=np.int64)
    lo, hi = cubes(rng, n, edge, span)
    t.add(ids, lo, hi)
    for step in range(12):
        move = rng.uniform(-0.6, 0.6, (n, 3)) * edge
        lo, hi = lo + move, hi + move
        # every body in slot order (the AABBs copied in one pass), or some bodies in any order
        sub = ids if step % 4 == 0 else rng.permutation(n)[: n - 50 * (step % 3)]
        t.update(ids[sub], lo[sub], hi[sub])
        if step % 3 == 2:  # the containers catch up after several updates
            continue
        t.bp._sync()
        assert t.bp._n_dirty == 0 and not t.bp._listed.any()
        where = _walk_containers(t.bp)
        assert sorted(where) == list(range(t.bp.bodies.n))
        for s, (g, cell) in where.items():
            assert t.bp._b_grid[s] == g and t.bp._b_cell[s] == cell, f"slot {s} misplaced"


def test_cell_moves_that_meet_in_one_batch():
    """Movers of one update that interact: A leaves cell X for an empty cell and B moves into
    X behind it; C and D, each alone, move into the same empty cell; E and F swap their cells;
    G joins a shared cell and H leaves one. The containers stay consistent and the pairs and
    queries equal the oracle's."""
    t = Tracker(22, activation_threshold=0)
    c = math.sqrt(2.0)                      # the first grid's cell for bodies of size 1

    def box(ix, iy, iz, dx=0.0):
        p = (np.array([ix, iy, iz], dtype=float) + 0.5) * c + [dx, 0.0, 0.0]
        return p - 0.5, p + 0.5

    start = {0: (0, 0, 0), 1: (2, 0, 0), 2: (5, 5, 5), 3: (7, 5, 5), 4: (9, 9, 0), 5: (9, 9, 1),
             6: (3, 8, 8), 7: (12, 3, 3), 8: (12, 3, 3, 0.1), 9: (3, 9, 8)}
    end = {0: (1, 0, 0), 1: (0, 0, 0), 2: (6, 5, 5), 3: (6, 5, 5, 0.1), 4: (9, 9, 1),
           5: (9, 9, 0), 6: (3, 9, 8, 0.1), 7: (12, 4, 3), 8: (12, 3, 3, 0.1), 9: (3, 9, 8)}
    ids = np.arange(10, dtype=np.int64)
    lo, hi = map(np.array, zip(*(box(*start[i]) for i in ids)))
    t.add(ids, lo, hi)
    _walk_containers(t.bp)
    lo, hi = map(np.array, zip(*(box(*end[i]) for i in ids)))
    t.update(ids, lo, hi)
    t.bp._sync()
    where = _walk_containers(t.bp)
    cells = {i: where[int(s)] for i, s in zip(ids, t.bp.bodies.slots_of(ids))}
    assert cells[0] != cells[1] and cells[2] == cells[3] and cells[6] == cells[9]
    assert cells[7] != cells[8]


def test_containers_catch_up_after_unqueried_updates():
    """The update only notes the bodies' new cells; the containers follow at the next query or
    removal (``_sync``). Many updates with no query in between -- cell moves, bodies moving
    back to where their container is, grid changers, grids growing under new bodies, removals
    of listed bodies -- keep pairs() equal to the oracle's after every call, and the first
    query after them equal too, with consistent containers."""
    rng = np.random.default_rng(23)
    bp = hhg(activation_threshold=0, initial_cells=4, min_grid_density=1)
    model = orc.Model()
    n = 60
    ids = np.arange(n, dtype=np.int64)
    lo, hi = cubes(rng, n, 1.0, 8.0)
    bp.add(ids, lo, hi)
    model.add(ids, lo, hi)
    start_lo = lo.copy()
    boxes = {int(i): (lo[k], hi[k]) for k, i in enumerate(ids)}
    next_id = n
    seen = {"listed": 0, "removed while listed": 0, "grown while listed": 0}
    for step in range(31):   # (the last one removes nothing: bodies stay listed)
        live = np.array(sorted(boxes), dtype=np.int64)
        lo = np.array([boxes[int(i)][0] for i in live])
        hi = np.array([boxes[int(i)][1] for i in live])
        if step % 7 == 6:   # back to the start: bodies return to the cells of their containers
            back = live < n
            shift = start_lo[live[back]] - lo[back]
            lo[back] += shift
            hi[back] += shift
        else:
            move = rng.uniform(-1.2, 1.2, (live.size, 3))
            lo, hi = lo + move, hi + move
        if step % 5 == 2:   # some bodies grow or shrink into other grids
            k = rng.choice(live.size, 5, replace=False)
            hi[k] = lo[k] + rng.choice([0.3, 1.0, 4.0], 5)[:, None]
        order = rng.permutation(live.size)[: live.size - 7 * (step % 2)]
        bp.update(live[order], lo[order], hi[order])
        model.update(live[order], lo[order], hi[order])
        for k in order:
            boxes[int(live[k])] = (lo[k], hi[k])
        seen["listed"] += bp._n_dirty > 0
        orc.assert_pairs_equal(bp.pairs(), model.pairs(), model, f"step {step}: ")
        if step % 6 == 3:   # new bodies: the grids grow while bodies are listed
            grown = bp._n_dirty > 0
            bits = bp._G.bits[: bp._G.n[0]].sum()
            new = np.arange(next_id, next_id + 80, dtype=np.int64)
            next_id += 80
            nlo, nhi = cubes(rng, 80, 1.0, 8.0)
            bp.add(new, nlo, nhi)
            model.add(new, nlo, nhi)
            boxes.update({int(i): (nlo[k], nhi[k]) for k, i in enumerate(new)})
            seen["grown while listed"] += grown and bp._G.bits[: bp._G.n[0]].sum() > bits
        if step % 4 == 1:   # removals: listed bodies among them
            listed = bp._n_dirty > 0
            gone = rng.choice(np.array(sorted(boxes), dtype=np.int64), 15, replace=False)
            bp.remove(gone)
            model.remove(gone)
            for i in gone:
                del boxes[int(i)]
            seen["removed while listed"] += listed
            assert bp._n_dirty == 0
        orc.assert_pairs_equal(bp.pairs(), model.pairs(), model, f"step {step}, end: ")
    assert all(v > 0 for v in seen.values()), seen
    assert bp._n_dirty > 0
    orc.assert_matches(bp, model, rng, n_queries=6)   # the queries bring the containers up
    assert bp._n_dirty == 0 and not bp._listed.any()
    where = _walk_containers(bp)
    assert sorted(where) == list(range(bp.bodies.n))
    for s, (g, cell) in where.items():
        assert bp._b_grid[s] == g and bp._b_cell[s] == cell and bp._b_home[s] == cell


@pytest.mark.parametrize("coarse", [0, 5])
@pytest.mark.parametrize("scale", [10.0, 2.0**20, 2.0**49])
def test_update_scan_gives_the_cells_of_an_insert(scale, coarse):
    """The update's scan takes the finest grid's bodies in a branch-free loop (the cell
    coordinates' low bits from the bits of ``floor(v) + 1.5 * 2**52``, the centre bounds as
    integer keys) and leaves the others (``coarse`` bodies of a coarser grid) to the general
    loop. The cells equal those an insert computes (``_cell_of``), for negative and positive
    centres up to 2**49 cells from the origin; a body that must change grid is marked -1; every
    grid's centre bounds come to hold the centres of its bodies."""
    from parsim.broadphase import hashgrid_kernels as K

    rng = np.random.default_rng(29)
    n = 3000
    bp = hhg(activation_threshold=0)
    lo, hi = cubes(rng, n, 1.0, 50.0, offset=-25.0)
    hi[:coarse] = lo[:coarse] + 6.0
    bp.add(np.arange(n), lo, hi)
    G = bp._G
    assert int(G.n[0]) == (2 if coarse else 1)
    slots = bp.bodies.slots_of(np.arange(n))
    grid = bp._b_grid[slots].astype(np.int64)
    c = rng.uniform(-1.0, 1.0, (n, 3)) * scale * G.cell[G.order[0]]
    c[coarse:coarse + 8] = (np.array([[0.0, -0.0, 1e-300]])
                            + np.arange(-4, 4)[:, None] * G.cell[G.order[0]])  # cell edges
    half = 0.5 * (hi - lo)[slots]
    half[coarse + 5] = 3.0                          # too big for the finest grid: a changer
    new_cell = np.empty(n, dtype=np.int64)
    for order in (slots, slots[::-1].copy()):        # in stored order, and not
        status, _, changers = K.update_scan(order, bool(K.is_identity(order)),
                                            (c - half)[order], (c + half)[order],
                                            bp._b_grid, G, bp.hierarchy_factor, new_cell)
        assert status == K.OK and changers == 1
        for k, i in enumerate(order):
            if i == coarse + 5:
                assert new_cell[k] == -1
                continue
            g = grid[i]
            cx, cy, cz = 0.5 * ((c[i] - half[i]) + (c[i] + half[i]))
            want = K._cell_of(cx, cy, cz, G.inv[g], G.bits[g, 0], G.bits[g, 1], G.bits[g, 2])
            assert new_cell[k] == want, (i, c[i].tolist(), int(new_cell[k]), int(want))
    centres = 0.5 * ((c - half) + (c + half))
    for g in np.unique(grid):
        mine = centres[grid == g]
        assert (G.clo[g] <= mine.min(axis=0)).all() and (G.chi[g] >= mine.max(axis=0)).all()


@pytest.mark.parametrize("shape, dtype", [((5, 8), np.int32), ((1, 8), np.int32), ((2, 1), np.int8),
                                          ((7,), np.float64), ((3, 3), np.int64)])
def test_aligned_empty_starts_on_a_cache_line(shape, dtype):
    from parsim.broadphase import hashgrid_kernels as K

    arrays = [K.aligned_empty(shape, dtype) for _ in range(16)]
    for a in arrays:
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        assert a.ctypes.data % 64 == 0
    for k, a in enumerate(arrays):  # distinct memory: no two share a byte
        a[...] = k
    assert all((a == k).all() for k, a in enumerate(arrays))


def test_container_rows_stay_cache_line_aligned_as_the_grid_grows():
    """A 32-byte container row that straddles two cache lines costs an edit a second miss;
    the rows are aligned when created and when the store grows."""
    bp = hhg()
    rng = np.random.default_rng(7)
    n = 0
    for batch in (40, 200, 3000):
        lo, hi = cubes(rng, batch, 1.0, 60.0)
        bp.add(np.arange(n, n + batch), lo, hi)
        n += batch
        assert bp._C.row.ctypes.data % 64 == 0 and bp._C.row.shape[1] * 4 == 32


@pytest.mark.parametrize("first", [10, 100])
def test_emptied_structure_regrown_in_one_add(first):
    """A structure emptied by removals (active grids, no body, no container) that then gets
    more bodies than its store holds takes new, empty per-body arrays, containers and block
    pool (nothing to copy); its grids and their cells stay. Pairs, queries and invariants
    match the oracle through adds, updates and removals after it, and the same holds for a
    fresh structure's first add of a batch above the activation threshold."""
    t = Tracker(rng_seed=first)
    rng = np.random.default_rng(first)
    lo, hi = cubes(rng, first, 1.0, 12.0)
    t.add(np.arange(first), lo, hi)
    t.remove(np.arange(first)[::-1])
    assert len(t.bp) == 0 and int(t.bp._C.n[0]) == 0
    cap = t.bp.bodies.capacity
    n = 4 * cap + 3
    lo, hi = cubes(rng, n, 1.0, 25.0)
    t.add(np.arange(1000, 1000 + n), lo, hi)      # beyond the store: the arrays are new
    assert t.bp.bodies.capacity > cap and t.bp.active
    ids = np.arange(1000, 1000 + n)
    for _ in range(3):
        mv = rng.choice(ids, n // 3, replace=False)
        d = rng.normal(scale=0.7, size=(mv.size, 3))
        mlo = np.array([t.model.boxes[i][0] for i in mv.tolist()])
        mhi = np.array([t.model.boxes[i][1] for i in mv.tolist()])
        t.update(mv, mlo + d, mhi + d)
    t.remove(rng.choice(ids, n // 2, replace=False))
    lo, hi = cubes(rng, 50, 3.0, 25.0)
    t.add(np.arange(10**6, 10**6 + 50), lo, hi)
