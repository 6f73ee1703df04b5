"""The shared contract of every broad phase, on small hand-built and analytic cases.

Each test runs against every configuration of :data:`broadphase_configs.CONFIGS` (all five
structures, the hash grid in several settings). Expected answers are either analytic (lattices of
touching cubes, nested duplicates, planes) or the pure-numpy oracle's.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import broadphase_oracle as orc
from broadphase_configs import CONFIG_PARAMS, STRUCTURES, make

CFG = pytest.mark.parametrize("cfg", CONFIG_PARAMS)


def lattice(k: int, origin=(0.0, 0.0, 0.0), pitch: float = 1.0, edge: float = 1.0):
    """k^3 cubes of the given edge on a lattice (touching when edge == pitch)."""
    idx = np.array(list(itertools.product(range(k), repeat=3)), dtype=np.float64)
    lo = np.asarray(origin, dtype=np.float64) + idx * pitch
    return lo, lo + edge


def lattice_pairs(k: int) -> int:
    """Pairs of cells of a k^3 lattice that share a face, an edge or a corner."""
    return ((3 * k - 2) ** 3 - k**3) // 2


def fill(bp, model, ids, lo, hi):
    bp.add(ids, lo, hi)
    model.add(ids, lo, hi)


# --------------------------------------------------------------------------------------------
# empty structure, result types
# --------------------------------------------------------------------------------------------

@CFG
def test_empty_structure(cfg):
    bp = make(cfg)
    assert len(bp) == 0
    p = bp.pairs()
    assert p.dtype == np.int64 and p.shape == (0, 2)
    q = bp.query_box(np.full(3, -1e9), np.full(3, 1e9))
    assert q.dtype == np.int64 and q.shape == (0,)
    q = bp.query_radius(np.zeros(3), 1e9)
    assert q.dtype == np.int64 and q.shape == (0,)
    ids, t = bp.raycast(np.zeros(3), np.array([1.0, 0.0, 0.0]))
    assert ids.dtype == np.int64 and ids.shape == (0,)
    assert t.dtype == np.float64 and t.shape == (0,)
    assert isinstance(bp.nbytes, (int, np.integer)) and bp.nbytes >= 0


@CFG
def test_single_body_and_result_types(cfg):
    bp = make(cfg)
    bp.add([7], [[0.0, 0.0, 0.0]], [[1.0, 2.0, 3.0]])
    assert len(bp) == 1
    p = bp.pairs()
    assert p.dtype == np.int64 and p.shape == (0, 2)
    assert bp.query_box([0.5, 0.5, 0.5], [0.5, 0.5, 0.5]).tolist() == [7]
    assert bp.query_box([1.0, 2.0, 3.0], [5.0, 5.0, 5.0]).tolist() == [7]  # touches the corner
    assert bp.query_box([1.0 + 1e-12, 2.0, 3.0], [5.0, 5.0, 5.0]).tolist() == []
    assert bp.query_radius([4.0, 6.0, 3.0], 5.0).tolist() == [7]  # distance exactly 5 (3-4-5)
    assert bp.query_radius([4.0, 6.0, 3.0], 4.999999).tolist() == []
    ids, t = bp.raycast([-2.0, 1.0, 1.0], [1.0, 0.0, 0.0])
    assert ids.tolist() == [7] and t.tolist() == [2.0]


@CFG
def test_empty_batches_are_noops(cfg):
    rng = np.random.default_rng(1)
    bp, model = make(cfg), orc.Model()
    lo = rng.uniform(0, 10, (40, 3))
    fill(bp, model, np.arange(40), lo, lo + rng.uniform(0.5, 2, (40, 3)))
    bp.add_infinite([100])
    model.add_infinite([100])
    e_ids, e_box = np.empty(0, np.int64), np.empty((0, 3))
    bp.add(e_ids, e_box, e_box)
    bp.update(e_ids, e_box, e_box)
    bp.remove(e_ids)
    bp.add_infinite(e_ids)
    orc.assert_matches(bp, model, rng, 5)


# --------------------------------------------------------------------------------------------
# closed boxes: touching, points, duplicates -- analytic counts
# --------------------------------------------------------------------------------------------

@CFG
@pytest.mark.parametrize("origin", [(0.0, 0.0, 0.0), (-20.0, -7.0, -3.0), (1.0e6, -1.0e6, 5.0e5)],
                         ids=["origin", "negative", "far"])
def test_touching_lattice_counts_every_shared_face_edge_corner(cfg, origin):
    k = 7
    lo, hi = lattice(k, origin)
    ids = np.arange(k**3, dtype=np.int64) * 3 + 11
    bp = make(cfg)
    bp.add(ids, lo, hi)
    got = orc.check_pair_array(bp.pairs())
    assert got.shape[0] == lattice_pairs(k)
    orc.assert_pairs_equal(got, orc.pairs(ids, lo, hi))


@CFG
@pytest.mark.parametrize("origin", [(0.0, 0.0, 0.0), (-20.0, -7.0, -3.0), (1.0e6, -1.0e6, 5.0e5)],
                         ids=["origin", "negative", "far"])
def test_lattice_with_gaps_has_no_pairs(cfg, origin):
    # pitch 1 but edge one ulp-ish smaller: neighbours no longer touch
    k = 7
    lo, hi = lattice(k, origin, edge=1.0 - 1e-9)
    bp = make(cfg)
    bp.add(np.arange(k**3), lo, hi)
    assert bp.pairs().shape == (0, 2)


@CFG
def test_zero_size_boxes(cfg):
    # points on an integer lattice, each present twice, plus unit cubes whose faces carry points
    pts = np.array(list(itertools.product(range(5), repeat=3)), dtype=np.float64)
    n = pts.shape[0]
    ids = np.arange(2 * n, dtype=np.int64)
    lo = np.concatenate([pts, pts])
    bp, model = make(cfg), orc.Model()
    fill(bp, model, ids, lo, lo.copy())
    got = orc.check_pair_array(bp.pairs())
    assert got.shape[0] == n  # only the coincident copies
    orc.assert_pairs_equal(got, model.pairs(), model)
    # a cube [1,2]^3 touches the 8 lattice points at its corners (each twice)
    bp.add([1000], [[1.0, 1.0, 1.0]], [[2.0, 2.0, 2.0]])
    model.add([1000], [[1.0, 1.0, 1.0]], [[2.0, 2.0, 2.0]])
    got = orc.check_pair_array(bp.pairs())
    assert got.shape[0] == n + 16
    orc.assert_pairs_equal(got, model.pairs(), model)


@CFG
def test_duplicates_and_nesting_all_overlap(cfg):
    # 60 boxes: 20 identical, 20 nested around the same centre, 20 points at the centre
    n = 20
    lo = np.concatenate([np.full((n, 3), -1.0),
                         -np.geomspace(1e-3, 1e3, n)[:, None] * np.ones(3),
                         np.zeros((n, 3))])
    hi = -lo
    ids = np.random.default_rng(2).permutation(10**6)[: 3 * n].astype(np.int64)
    bp = make(cfg)
    bp.add(ids, lo, hi)
    got = orc.check_pair_array(bp.pairs())
    m = 3 * n
    assert got.shape[0] == m * (m - 1) // 2
    assert set(got.ravel().tolist()) == set(ids.tolist())


@CFG
def test_exactly_once_in_a_dense_heap(cfg):
    # 400 boxes in a small region: thousands of pairs, each must appear exactly once
    rng = np.random.default_rng(3)
    lo = rng.uniform(0, 4, (400, 3))
    hi = lo + rng.uniform(0.2, 1.5, (400, 3))
    ids = rng.permutation(5000)[:400]
    bp = make(cfg)
    bp.add(ids, lo, hi)
    orc.assert_pairs_equal(bp.pairs(), orc.pairs(ids, lo, hi))  # checks a < b and no repeats


# --------------------------------------------------------------------------------------------
# infinite bodies
# --------------------------------------------------------------------------------------------

@CFG
def test_infinite_bodies(cfg):
    bp, model = make(cfg), orc.Model()
    bp.add_infinite([5, 1])  # only infinite bodies: no pair
    model.add_infinite([5, 1])
    assert len(bp) == 2
    assert bp.pairs().shape == (0, 2)
    assert bp.query_box(np.zeros(3), np.ones(3)).tolist() == [1, 5]
    lo, hi = lattice(3, (10.0, 10.0, 10.0), pitch=3.0)  # 27 separate cubes
    ids = np.arange(27, dtype=np.int64) * 2  # ids 0..52: some below, some above the planes' ids
    fill(bp, model, ids, lo, hi)
    got = orc.check_pair_array(bp.pairs())
    assert got.shape[0] == 2 * 27
    orc.assert_pairs_equal(got, model.pairs(), model)
    # every query returns the planes, the ray with t_enter 0 (sorted first with ties by id)
    assert bp.query_box([-100.0] * 3, [-99.0] * 3).tolist() == [1, 5]
    assert bp.query_radius([-100.0] * 3, 0.0).tolist() == [1, 5]
    rid, rt = bp.raycast([10.5, 10.5, 0.0], [0.0, 0.0, 1.0])
    assert rid.tolist() == [1, 5, 0, 2, 4] and rt.tolist() == [0.0, 0.0, 10.0, 13.0, 16.0]
    rid, rt = bp.raycast([10.5, 10.5, 10.5], [0.0, 0.0, -1.0])  # origin inside body 0
    assert rid.tolist() == [0, 1, 5] and rt.tolist() == [0.0, 0.0, 0.0]
    # remove one plane, then a mix of a plane and finite bodies
    bp.remove([5])
    model.remove([5])
    orc.assert_matches(bp, model, np.random.default_rng(4), 5)
    bp.remove([1, 0, 26])
    model.remove([1, 0, 26])
    orc.assert_matches(bp, model, np.random.default_rng(5), 5)
    assert len(bp) == 25
    # the ids of removed planes are free again, for finite or infinite bodies
    bp.add([5], [[10.0, 10.0, 10.0]], [[11.0, 11.0, 11.0]])
    model.add([5], [[10.0, 10.0, 10.0]], [[11.0, 11.0, 11.0]])
    bp.add_infinite([1])
    model.add_infinite([1])
    orc.assert_matches(bp, model, np.random.default_rng(6), 5)


# --------------------------------------------------------------------------------------------
# ids
# --------------------------------------------------------------------------------------------

@CFG
def test_id_reuse_rounds(cfg):
    rng = np.random.default_rng(7)
    bp, model = make(cfg), orc.Model()
    lo = rng.uniform(0, 8, (60, 3))
    fill(bp, model, np.arange(60), lo, lo + 1.0)
    for rnd in range(4):
        gone = rng.choice(60, 20, replace=False)
        bp.remove(gone)
        model.remove(gone)
        orc.assert_matches(bp, model, label=f"round {rnd} after remove: ")
        lo = rng.uniform(0, 8, (20, 3))
        hi = lo + rng.uniform(0, 2, (20, 3))
        fill(bp, model, gone, lo, hi)
        orc.assert_matches(bp, model, rng, 3, label=f"round {rnd} after re-add: ")


@CFG
def test_emptied_and_refilled_rounds(cfg):
    # every body removed, then a new set added, several times (the hash grid's containers
    # then come from blocks freed in random order); on the way a third removed, then all but
    # one, and bodies added around that one
    rng = np.random.default_rng(17)
    bp, model = make(cfg), orc.Model()
    for rnd in range(4):
        n = int(rng.integers(50, 400))
        ids = rng.choice(10**6, n, replace=False).astype(np.int64)
        lo = rng.uniform(-6, 6, (n, 3))
        hi = lo + rng.uniform(0.1, 2.5, (n, 3))
        fill(bp, model, ids, lo, hi)
        orc.assert_matches(bp, model, rng, 3, label=f"round {rnd} filled: ")
        part = ids[: n // 3]
        bp.remove(part)
        model.remove(part)
        orc.assert_matches(bp, model, label=f"round {rnd} a third removed: ")
        rest = ids[n // 3: -1]
        bp.remove(rest[::-1])
        model.remove(rest[::-1])
        assert len(bp) == 1
        orc.assert_matches(bp, model, label=f"round {rnd} one body left: ")
        # bodies next to the one left, then all of them gone
        k = 40
        near = (10**6 + 100 * rnd + np.arange(k)).astype(np.int64)
        lo2 = lo[-1] + rng.uniform(-1.0, 1.0, (k, 3))
        fill(bp, model, near, lo2, lo2 + rng.uniform(0.1, 2.5, (k, 3)))
        orc.assert_matches(bp, model, rng, 3, label=f"round {rnd} refilled around it: ")
        last = np.concatenate([near, ids[-1:]])
        bp.remove(last)
        model.remove(last)
        assert len(bp) == 0
        orc.assert_matches(bp, model, label=f"round {rnd} emptied: ")


@CFG
def test_huge_and_sparse_ids(cfg):
    rng = np.random.default_rng(8)
    ids = np.array([0, 1, 2**31 - 1, 2**31, 2**32 + 1, 2**53 + 1, 2**62, 2**63 - 2, 2**63 - 1]
                   + list(range(10**12, 10**12 + 40)), dtype=np.int64)
    lo = rng.uniform(0, 5, (ids.size, 3))
    hi = lo + rng.uniform(0.5, 2.0, (ids.size, 3))
    bp, model = make(cfg), orc.Model()
    fill(bp, model, ids, lo, hi)
    orc.assert_matches(bp, model, rng, 5)
    sel = ids[::3]
    lo2 = rng.uniform(0, 5, (sel.size, 3))
    bp.update(sel[::-1], lo2[::-1], lo2[::-1] + 1.0)
    model.update(sel[::-1], lo2[::-1], lo2[::-1] + 1.0)
    orc.assert_matches(bp, model, rng, 5)
    bp.remove(ids[1::2])
    model.remove(ids[1::2])
    orc.assert_matches(bp, model, rng, 5)


# --------------------------------------------------------------------------------------------
# updates
# --------------------------------------------------------------------------------------------

@CFG
def test_update_subsets_in_any_order(cfg):
    rng = np.random.default_rng(9)
    n = 300
    ids = rng.permutation(10**5)[:n].astype(np.int64)
    lo = rng.uniform(0, 20, (n, 3))
    hi = lo + rng.uniform(0.1, 3, (n, 3))
    bp, model = make(cfg), orc.Model()
    fill(bp, model, ids, lo, hi)
    for step in range(6):
        sel = rng.choice(n, rng.integers(1, n), replace=False)  # random subset, random order
        new_lo = lo[sel] + rng.normal(0, 1.5, (sel.size, 3))
        new_hi = new_lo + (hi[sel] - lo[sel]) * rng.uniform(0.5, 1.8, (sel.size, 1))
        lo[sel], hi[sel] = new_lo, new_hi
        bp.update(ids[sel], new_lo, new_hi)
        model.update(ids[sel], new_lo, new_hi)
        orc.assert_matches(bp, model, rng, 2, label=f"step {step}: ")
    # all bodies in the stored order (the common engine call), then unchanged boxes
    bp.update(ids, lo + 0.25, hi + 0.25)
    model.update(ids, lo + 0.25, hi + 0.25)
    orc.assert_matches(bp, model, rng, 2)
    bp.update(ids, lo + 0.25, hi + 0.25)
    orc.assert_matches(bp, model, rng, 2)


@CFG
def test_structure_copies_its_input(cfg):
    # the caller reuses its arrays between calls: the structure must not keep views of them
    rng = np.random.default_rng(10)
    ids = np.arange(50, dtype=np.int64)
    lo = rng.uniform(0, 6, (50, 3))
    hi = lo + 1.0
    bp, model = make(cfg), orc.Model()
    fill(bp, model, ids, lo, hi)
    lo += 100.0
    hi += 200.0
    ids += 1000
    orc.assert_matches(bp, model, rng, 3)
    lo2 = rng.uniform(0, 6, (50, 3))
    hi2 = lo2 + 1.5
    upd = np.arange(50, dtype=np.int64)
    bp.update(upd, lo2, hi2)
    model.update(upd, lo2, hi2)
    lo2[:] = 0.0
    hi2[:] = 0.0
    upd[:] = 0
    orc.assert_matches(bp, model, rng, 3)


@CFG
def test_strided_and_fortran_inputs(cfg):
    rng = np.random.default_rng(11)
    big = rng.uniform(0, 6, (100, 6))
    lo = big[::2, 0:3]  # non-contiguous views
    hi = big[::2, 0:3] + big[::2, 3:6] / 4
    ids = np.arange(100, dtype=np.int64)[::2]
    bp, model = make(cfg), orc.Model()
    fill(bp, model, ids, lo, np.asfortranarray(hi))
    orc.assert_matches(bp, model, rng, 3)


@CFG
def test_queries_do_not_change_state(cfg):
    rng = np.random.default_rng(12)
    lo = rng.uniform(0, 10, (80, 3))
    bp, model = make(cfg), orc.Model()
    fill(bp, model, np.arange(80), lo, lo + 1.2)
    first = orc.canonical_pairs(bp.pairs())
    for _ in range(5):
        bp.query_box(np.zeros(3), np.full(3, 5.0))
        bp.query_radius(np.full(3, 5.0), 3.0)
        bp.raycast(np.zeros(3), np.ones(3), 20.0)
    assert np.array_equal(orc.canonical_pairs(bp.pairs()), first)
    orc.assert_matches(bp, model, rng, 3)


@CFG
def test_nbytes_covers_the_bodies(cfg):
    rng = np.random.default_rng(13)
    n = 5000
    lo = rng.uniform(0, 100, (n, 3))
    bp = make(cfg)
    bp.add(np.arange(n), lo, lo + 1.0)
    nb = bp.nbytes
    # at least id (8 bytes) and two corners (48 bytes) per body are held somewhere
    assert isinstance(nb, (int, np.integer)) and nb >= 56 * n


@pytest.mark.parametrize("name", STRUCTURES)
def test_default_constructor(name):
    # every structure can be built without arguments (the engine's default), and is correct
    import parsim.broadphase as pb

    rng = np.random.default_rng(14)
    bp, model = getattr(pb, name)(), orc.Model()
    lo = rng.uniform(0, 10, (200, 3))
    fill(bp, model, rng.permutation(1000)[:200], lo, lo + rng.uniform(0, 2, (200, 3)))
    orc.assert_matches(bp, model, rng, 5)


# --------------------------------------------------------------------------------------------
# the pair buffer: sized from the previous count, retried when a step has far more pairs
# --------------------------------------------------------------------------------------------
@CFG
def test_pair_count_jumping_far_beyond_the_last_one(cfg):
    """Spread out (no pair), then all in a heap (tens of thousands of pairs), then spread out
    again: the first buffer of the heap step is far too small, the kernel must be run again with
    the exact size, and every step returns exactly the oracle's pairs."""
    rng = np.random.default_rng(11)
    n = 400
    ids = np.arange(n, dtype=np.int64) * 3 + 7
    spread = rng.uniform(0.0, 400.0, (n, 3))
    heap = rng.uniform(0.0, 1.0, (n, 3))
    bp, model = make(cfg), orc.Model()
    fill(bp, model, ids, spread, spread + 0.5)
    counts = []
    for c in (spread, heap, spread, heap):
        bp.update(ids, c, c + 0.5)
        model.update(ids, c, c + 0.5)
        got = bp.pairs()
        orc.check_pair_array(got)
        orc.assert_pairs_equal(got, model.pairs())
        counts.append(len(got))
    assert counts[0] < 100 < 10_000 < counts[1]
