"""Ray queries: entry parameters, ordering, closed boxes, ``t_max`` and misses.

Analytic cases use dyadic numbers (exact in float64), so ``t_enter`` is compared exactly; random
rays are compared with the oracle (``t_enter`` within 1e-12 relative, boxes grazed within float
rounding may be reported either way).
"""

from __future__ import annotations

import numpy as np
import pytest

import broadphase_oracle as orc
from broadphase_configs import CONFIG_PARAMS, make

CFG = pytest.mark.parametrize("cfg", CONFIG_PARAMS)
K = 10


def row(axis: int, ids):
    """K unit boxes along ``axis``: [3k, 3k+1] on it, [0, 1] on the others."""
    lo = np.zeros((K, 3))
    lo[:, axis] = 3.0 * np.arange(K)
    return np.asarray(ids, dtype=np.int64), lo, lo + 1.0


def build(cfg, *parts, infinite=()):
    bp, model = make(cfg), orc.Model()
    for ids, lo, hi in parts:
        bp.add(ids, lo, hi)
        model.add(ids, lo, hi)
    if len(infinite):
        bp.add_infinite(infinite)
        model.add_infinite(infinite)
    return bp, model


def ray(bp, o, d, t_max=np.inf):
    ids, t = bp.raycast(np.asarray(o, float), np.asarray(d, float), t_max)
    return ids.tolist(), t.tolist()


def shuffled_ids(seed):
    return np.random.default_rng(seed).permutation(1000)[:K]


@CFG
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_axis_rays(cfg, axis):
    ids, lo, hi = row(axis, shuffled_ids(axis))
    # an unrelated cloud elsewhere, so that the structures have more than one region to search
    rng = np.random.default_rng(30)
    clo = rng.uniform(50, 80, (200, 3))
    bp, _ = build(cfg, (ids, lo, hi), (np.arange(2000, 2200), clo, clo + 2.0))
    o = np.full(3, 0.5)
    o[axis] = -2.0
    d = np.zeros(3)
    for speed in (1.0, 4.0, 0.5):
        d[axis] = speed
        got_ids, got_t = ray(bp, o, d)
        assert got_ids == ids.tolist()
        assert got_t == [(3.0 * k + 2.0) / speed for k in range(K)]
    # backwards from beyond the last box
    o[axis] = 3.0 * K + 5.0
    d[axis] = -1.0
    got_ids, got_t = ray(bp, o, d)
    assert got_ids == ids[::-1].tolist()
    assert got_t == [o[axis] - (3.0 * k + 1.0) for k in reversed(range(K))]
    # pointing away: nothing
    d[axis] = 1.0
    assert ray(bp, o, d) == ([], [])


@CFG
def test_t_max_is_closed(cfg):
    ids, lo, hi = row(0, shuffled_ids(3))
    bp, _ = build(cfg, (ids, lo, hi))
    o, d = [-2.0, 0.5, 0.5], [1.0, 0.0, 0.0]
    assert ray(bp, o, d, 14.0) == (ids[:5].tolist(), [2.0, 5.0, 8.0, 11.0, 14.0])  # enters at t_max
    assert ray(bp, o, d, 13.999)[0] == ids[:4].tolist()
    assert ray(bp, o, d, 1.999) == ([], [])
    assert ray(bp, o, d, 0.0) == ([], [])
    # t_max = 0 from a face: the box is met at t = 0
    assert ray(bp, [0.0, 0.5, 0.5], d, 0.0) == ([int(ids[0])], [0.0])


@CFG
def test_origin_inside_and_on_faces(cfg):
    ids, lo, hi = row(0, shuffled_ids(4))
    bp, _ = build(cfg, (ids, lo, hi))
    got = ray(bp, [6.5, 0.5, 0.5], [1.0, 0.0, 0.0])  # inside box 2
    assert got == (ids[2:].tolist(), [0.0] + [3.0 * k - 6.5 for k in range(3, K)])
    got = ray(bp, [6.5, 0.5, 0.5], [-1.0, 0.0, 0.0])
    assert got == (ids[2::-1].tolist(), [0.0, 6.5 - 4.0, 6.5 - 1.0])
    got = ray(bp, [7.0, 0.5, 0.5], [1.0, 0.0, 0.0])  # on the exit face of box 2
    assert got == (ids[2:].tolist(), [0.0] + [3.0 * k - 7.0 for k in range(3, K)])
    got = ray(bp, [6.5, 0.5, 0.5], [0.0, 2.0, 0.0])  # leaves box 2 sideways, meets nothing else
    assert got == ([int(ids[2])], [0.0])


@CFG
def test_grazing_rays(cfg):
    ids, lo, hi = row(0, shuffled_ids(5))
    bp, _ = build(cfg, (ids, lo, hi))
    d = [1.0, 0.0, 0.0]
    for y, z in ((1.0, 0.5), (0.0, 0.5), (0.5, 1.0), (1.0, 1.0), (0.0, 0.0)):  # faces and edges
        got_ids, got_t = ray(bp, [-2.0, y, z], d)
        assert got_ids == ids.tolist() and got_t == [3.0 * k + 2.0 for k in range(K)]
    for y, z in ((1.0 + 2.0**-40, 0.5), (0.5, -(2.0**-40)), (2.0, 2.0)):  # just outside
        assert ray(bp, [-2.0, y, z], d) == ([], [])


@CFG
def test_diagonal_rays_exact(cfg):
    box = (np.array([7], np.int64), np.array([[1.0, 1.0, 1.0]]), np.array([[2.0, 2.0, 2.0]]))
    bp, _ = build(cfg, box)
    assert ray(bp, [0, 0, 0], [2, 2, 2]) == ([7], [0.5])
    assert ray(bp, [0, 0, 1.5], [1, 1, 0]) == ([7], [1.0])  # enters through an edge
    assert ray(bp, [0, 2, 0], [1, -1, 1]) == ([7], [1.0])   # touches only the corner (1, 1, 1)
    assert ray(bp, [0, 2, -0.5], [1, -1, 1]) == ([], [])    # passes the corner at a distance
    assert ray(bp, [3, 3, 3], [-0.5, -0.5, -0.5]) == ([7], [2.0])
    assert ray(bp, [3, 3, 3], [-0.5, -0.5, -0.5], 1.5) == ([], [])


@CFG
def test_ties_are_sorted_by_id(cfg):
    # duplicates and boxes sharing the entry plane: equal t_enter, sorted by id
    lo = np.array([[2.0, 0.0, 0.0]] * 4 + [[2.0, -1.0, -1.0], [2.0, 0.25, 0.25], [5.0, 0.0, 0.0]])
    hi = np.array([[3.0, 1.0, 1.0]] * 4 + [[4.0, 2.0, 2.0], [2.5, 0.75, 0.75], [6.0, 1.0, 1.0]])
    ids = np.array([40, 3, 17, 8, 25, 1, 0], dtype=np.int64)
    bp, _ = build(cfg, (ids, lo, hi), infinite=[30, 2])
    got = ray(bp, [0.0, 0.5, 0.5], [1.0, 0.0, 0.0])
    assert got == ([2, 30, 1, 3, 8, 17, 25, 40, 0], [0.0, 0.0] + [2.0] * 6 + [5.0])


@CFG
def test_far_rays(cfg):
    # origin a million units away, t_enter ~ 1e6
    ids, lo, hi = row(0, shuffled_ids(6))
    bp, _ = build(cfg, (ids, lo, hi))
    got_ids, got_t = ray(bp, [-1.0e6, 0.5, 0.5], [1.0, 0.0, 0.0])
    assert got_ids == ids.tolist() and got_t == [1.0e6 + 3.0 * k for k in range(K)]
    got_ids, got_t = ray(bp, [-1.0e6, 0.5, 0.5], [1.0, 0.0, 0.0], 1.0e6 + 9.0)
    assert got_ids == ids[:4].tolist()


@CFG
@pytest.mark.parametrize("scene", ["cloud", "polydisperse", "far"])
def test_random_rays_against_oracle(cfg, scene):
    rng = np.random.default_rng({"cloud": 31, "polydisperse": 32, "far": 33}[scene])
    n = 2000
    if scene == "cloud":
        lo = rng.uniform(-30, 30, (n, 3))
        hi = lo + rng.uniform(0.2, 3.0, (n, 3))
    elif scene == "polydisperse":
        size = np.exp(rng.uniform(np.log(0.05), np.log(50.0), n))
        c = rng.uniform(-100, 100, (n, 3))
        lo, hi = c - size[:, None] / 2, c + size[:, None] / 2
    else:
        lo = 1.0e6 + rng.uniform(-20, 20, (n, 3))
        hi = lo + rng.uniform(0.5, 1.5, (n, 3))
    ids = rng.permutation(10**6)[:n].astype(np.int64)
    bp, model = build(cfg, (ids, lo, hi), infinite=[10**6 + 5])
    span_lo, span_hi = lo.min(axis=0), hi.max(axis=0)
    for i in range(60):
        o = rng.uniform(span_lo - 5, span_hi + 5)
        if i % 3 == 0:
            o = (lo[i] + hi[i]) / 2  # inside a box
        d = rng.normal(size=3)
        if i % 4 == 1:
            d[rng.integers(3)] = 0.0  # a zero component
        if i % 8 == 2:
            d[:] = 0.0
            d[rng.integers(3)] = rng.choice([-1.0, 1.0])  # along an axis
        t_max = np.inf if i % 2 else float(rng.uniform(0, 40))
        exp, amb = model.raycast(o, d, t_max, tol=1e-9)
        orc.assert_ray_equal(bp.raycast(o, d, t_max), exp, amb, model=model,
                             label=f"raycast({o.tolist()}, {d.tolist()}, {t_max})")
