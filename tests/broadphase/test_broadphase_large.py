"""Deterministic larger scenes (2,000-5,000 boxes, seeded numpy) against the oracle.

For every distribution and configuration: build, compare ``pairs()`` and queries with the oracle;
move 20 % of the bodies (translations, AABB growth/shrink from rotation, a few jumps across the
scene; updated in shuffled order), compare again; remove a third, compare again. The oracle's
answers are computed once per scene and shared by all configurations.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

import broadphase_oracle as orc
from broadphase_configs import CONFIG_PARAMS, make


def _polydisperse(rng, n):
    size = np.exp(rng.uniform(np.log(0.05), np.log(50.0), n))  # ratio 1000
    c = rng.uniform(0, 180, (n, 3))
    aspect = rng.uniform(0.5, 1.0, (n, 3))
    half = size[:, None] * aspect / 2
    return c - half, c + half


def _clustered(rng, n):
    m = int(0.8 * n)
    lo = np.concatenate([rng.uniform(0, 10, (m, 3)), rng.uniform(-200, 200, (n - m, 3))])
    return lo, lo + rng.uniform(0.3, 1.2, (n, 3))


def _elongated(rng, n):
    ext = np.ones((n, 3))
    ext[np.arange(n), rng.integers(0, 3, n)] = 10.0
    ext *= rng.uniform(0.5, 1.0, (n, 1))
    lo = rng.uniform(0, 40, (n, 3))
    return lo, lo + ext


def _far(rng, n):
    anchor = np.array([[1.0e6, 1.0e6, 1.0e6], [-1.0e6, 2.0e6, -1.0e6]])[rng.integers(0, 2, n)]
    lo = anchor + rng.uniform(0, 18, (n, 3))
    return lo, lo + rng.uniform(0.5, 1.5, (n, 3))


def _negative(rng, n):
    lo = rng.uniform(-90, -60, (n, 3))
    return lo, lo + rng.uniform(0.5, 3.0, (n, 3))


def _touching(rng, n):
    # a lattice of unit cubes sharing faces, edges, corners; 10 % of the cells left empty
    k = int(np.ceil((n / 0.9) ** (1 / 3)))
    cells = np.array(list(itertools.product(range(k), repeat=3)), dtype=np.float64) - k / 2
    cells = cells[rng.permutation(len(cells))[:n]]
    return cells, cells + 1.0


def _points(rng, n):
    # integer lattice points (with coincident copies) and integer boxes whose faces carry them
    m = n // 2
    p = rng.integers(-12, 12, (m, 3)).astype(np.float64)
    blo = rng.integers(-12, 12, (n - m, 3)).astype(np.float64)
    bhi = blo + rng.integers(0, 3, (n - m, 3))
    return np.concatenate([p, blo]), np.concatenate([p, bhi])


def _duplicates(rng, n):
    lo = rng.uniform(0, 30, (n // 2, 3))
    hi = lo + rng.uniform(0.5, 2.0, (n // 2, 3))
    return np.concatenate([lo, lo]), np.concatenate([hi, hi])


def _mixed(rng, n):
    parts = [g(rng, n // 8) for g in (_polydisperse, _clustered, _elongated, _far, _negative,
                                      _touching, _points, _duplicates)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


SCENES = {
    "polydisperse": (_polydisperse, 3000),
    "clustered": (_clustered, 3000),
    "elongated": (_elongated, 3000),
    "far": (_far, 3000),
    "negative": (_negative, 2000),
    "touching": (_touching, 3000),
    "points": (_points, 2000),
    "duplicates": (_duplicates, 2000),
    "mixed": (_mixed, 5000),
}


def _move(rng, lo, hi, sel, scene):
    """New boxes for the selected bodies: small moves, rotations, a few long jumps."""
    lo, hi = lo[sel].copy(), hi[sel].copy()
    kind = rng.integers(0, 10, sel.size)
    if scene in ("touching", "points"):
        # integer moves keep the exact contacts
        ext = hi - lo
        lo += rng.integers(-1, 2, (sel.size, 3))
        hi = lo + ext
        grow = kind < 3
        hi[grow] += 1.0
        return lo, hi
    c = (lo + hi) / 2
    half = (hi - lo) / 2
    step = rng.normal(0, 0.5, (sel.size, 3)) * (1 + half.max(axis=1, keepdims=True))
    c += step
    rot = kind < 4
    half[rot] *= rng.uniform(0.58, 1.73, (int(rot.sum()), 1))  # a cube's AABB: 1 .. sqrt(3)
    jump = kind == 9
    c[jump] += rng.uniform(-50, 50, (int(jump.sum()), 3))
    return c - half, c + half


@functools.lru_cache(maxsize=None)
def scene_stages(scene: str):
    """[(label, op, args, model snapshot, expected pairs, queries with expected answers)]."""
    gen, n = SCENES[scene]
    rng = np.random.default_rng(sum(map(ord, scene)))
    lo, hi = gen(rng, n)
    n = lo.shape[0]
    ids = rng.choice(2**40, n, replace=False).astype(np.int64)
    model = orc.Model()
    stages = []

    def record(label, op, args):
        getattr(model, op)(*args)
        qs = []
        for q in orc.random_queries(model, rng, 8):
            (qlo, qhi), (p, r), (o, d, t_max) = q
            qs.append((q, model.query_box(qlo, qhi), model.query_radius(p, r, tol=1e-9),
                       model.raycast(o, d, t_max, tol=1e-9)))
        stages.append((label, op, args, model.copy(), model.pairs(), qs))

    record("build", "add", (ids, lo, hi))
    sel = rng.choice(n, n // 5, replace=False)  # shuffled order
    nlo, nhi = _move(rng, lo, hi, sel, scene)
    record("move 20%", "update", (ids[sel], nlo, nhi))
    gone = rng.choice(n, n // 3, replace=False)
    record("remove 1/3", "remove", (ids[gone],))
    return stages


@pytest.mark.parametrize("cfg", CONFIG_PARAMS)
@pytest.mark.parametrize("scene", list(SCENES))
def test_large_scene(cfg, scene):
    bp = make(cfg)
    for label, op, args, model, expected, queries in scene_stages(scene):
        getattr(bp, op)(*args)
        tag = f"{scene} / {label}: "
        assert len(bp) == len(model), f"{tag}len {len(bp)}, expected {len(model)}"
        orc.assert_pairs_equal(bp.pairs(), expected, model, tag)
        for ((qlo, qhi), (p, r), (o, d, t_max)), e_box, (e_rad, a_rad), (e_ray, a_ray) in queries:
            orc.assert_ids_equal(bp.query_box(qlo, qhi), e_box, model=model, label=f"{tag}query_box")
            orc.assert_ids_equal(bp.query_radius(p, r), e_rad, a_rad, model=model, label=f"{tag}query_radius")
            orc.assert_ray_equal(bp.raycast(o, d, t_max), e_ray, a_ray, model=model, label=f"{tag}raycast")


@pytest.mark.parametrize("scene", list(SCENES))
def test_scene_is_not_trivial(scene):
    # guards the generators: every scene has many pairs, but not all pairs
    for label, _, _, model, expected, _ in scene_stages(scene):
        n = len(model.boxes)
        assert n // 4 < expected.shape[0] < n * (n - 1) // 20, (label, n, expected.shape[0])


@functools.lru_cache(maxsize=None)
def time_steps():
    """A granular-flow-like run: 2,500 bodies, every body updated at every step (the engine's
    call: all ids, stored order), small moves with rotations, a few bodies leaving and entering."""
    rng = np.random.default_rng(77)
    n = 2500
    ids = rng.choice(2**40, n, replace=False).astype(np.int64)
    c = rng.uniform(0, 25, (n, 3))
    half = rng.uniform(0.2, 0.6, (n, 1)) * np.ones(3)
    vel = rng.normal(0, 0.4, (n, 3))
    model = orc.Model()
    steps = [("add", (ids, c - half, c + half))]
    model.add(*steps[0][1])
    expected = [(model.copy(), model.pairs())]
    for _ in range(8):
        c = c + vel
        vel = 0.9 * vel + rng.normal(0, 0.2, (n, 3))
        half = half * rng.uniform(0.9, 1.1, (n, 3))  # AABBs of rotating bodies
        half = np.clip(half, 0.1, 1.2)
        steps.append(("update", (ids, c - half, c + half)))
        model.update(*steps[-1][1])
        expected.append((model.copy(), model.pairs()))
    return steps, expected


@pytest.mark.parametrize("cfg", CONFIG_PARAMS)
def test_time_stepping(cfg):
    bp = make(cfg)
    steps, expected = time_steps()
    for k, ((op, args), (model, pairs)) in enumerate(zip(steps, expected)):
        getattr(bp, op)(*args)
        orc.assert_pairs_equal(bp.pairs(), pairs, model, f"step {k}: ")
