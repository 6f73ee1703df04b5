"""Narrow phase against closed forms, brute-force sampling and symmetry/invariance properties."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from parsim.narrowphase import MAX_CONTACTS, collide
from parsim.rotation import quat_matrix
from parsim.shapes import BOX, CAPSULE, PLANE, SPHERE

I4 = np.array([1.0, 0, 0, 0])


def run(sa, pa, xa, qa, sb, pb, xb, qb):
    n = np.zeros((MAX_CONTACTS, 3))
    p = np.zeros((MAX_CONTACTS, 3))
    d = np.zeros(MAX_CONTACTS)
    k = collide(sa, np.asarray(pa, float), np.asarray(xa, float), np.asarray(qa, float),
                sb, np.asarray(pb, float), np.asarray(xb, float), np.asarray(qb, float), n, p, d)
    return n[:k].copy(), p[:k].copy(), d[:k].copy()


def rand_quat(rng):
    q = rng.standard_normal(4)
    return q / np.linalg.norm(q)


def R(q):
    return np.array(quat_matrix(*q)).reshape(3, 3)


def test_sphere_sphere_and_plane_closed_form():
    n, p, d = run(SPHERE, (0.5, 0, 0), (0, 0, 0.9), I4, SPHERE, (0.5, 0, 0), (0, 0, 0), I4)
    assert d == pytest.approx([0.1]) and np.allclose(n, [[0, 0, 1]]) and np.allclose(p, [[0, 0, 0.45]])
    n, p, d = run(SPHERE, (0.5, 0, 0), (1, 2, 0.4), I4, PLANE, (0, 0, 1), (5, 5, 0), I4)
    assert d == pytest.approx([0.1]) and np.allclose(n, [[0, 0, 1]]) and np.allclose(p, [[1, 2, -0.05]])
    assert len(run(SPHERE, (0.5, 0, 0), (0, 0, 1.0), I4, SPHERE, (0.5, 0, 0), (0, 0, 0), I4)[2]) == 0
    n, _, d = run(SPHERE, (0.5, 0, 0), (0, 0, 0), I4, SPHERE, (0.5, 0, 0), (0, 0, 0), I4)
    assert d == pytest.approx([1.0]) and np.isfinite(n).all() and np.linalg.norm(n) == pytest.approx(1)


def test_box_on_plane_four_points_and_tilted_two():
    n, p, d = run(BOX, (0.5, 0.3, 0.2), (0, 0, 0.19), I4, PLANE, (0, 0, 1), (0, 0, 0), I4)
    assert len(d) == 4 and np.allclose(d, 0.01) and np.allclose(n, [0, 0, 1])
    assert np.allclose(p[:, 2], -0.005)
    assert sorted(map(tuple, np.round(p[:, :2], 9))) == sorted(
        itertools.product((-0.5, 0.5), (-0.3, 0.3)))
    q = np.array([math.cos(math.pi / 8), math.sin(math.pi / 8), 0, 0])   # 45 deg about x
    z = 0.3 * math.cos(math.pi / 4) + 0.2 * math.sin(math.pi / 4) - 0.01
    n, p, d = run(BOX, (0.5, 0.3, 0.2), (0, 0, z), q, PLANE, (0, 0, 1), (0, 0, 0), I4)
    assert len(d) == 2 and np.allclose(d, 0.01)


def test_capsule_plane_two_points_when_lying_and_sphere_capsule():
    n, p, d = run(CAPSULE, (0.1, 0.5, 0), (0, 0, 0.09), I4, PLANE, (0, 0, 1), (0, 0, 0), I4)
    assert len(d) == 2 and np.allclose(d, 0.01)
    assert sorted(p[:, 0].round(9)) == [-0.5, 0.5]
    n, p, d = run(SPHERE, (0.2, 0, 0), (0.3, 0.25, 0), I4, CAPSULE, (0.1, 0.5, 0), (0, 0, 0), I4)
    assert d == pytest.approx([0.05]) and np.allclose(n, [[0, 1, 0]])


def test_parallel_capsules_two_points():
    n, p, d = run(CAPSULE, (0.1, 0.5, 0), (0.2, 0, 0.19), I4, CAPSULE, (0.1, 0.5, 0), (0, 0, 0), I4)
    assert len(d) == 2 and np.allclose(d, 0.01) and np.allclose(n, [0, 0, 1])
    assert sorted(p[:, 0].round(9)) == [-0.3, 0.5]


def _segment_points(x, q, hl, m=400):
    t = np.linspace(-hl, hl, m)
    return x + np.outer(t, R(q)[:, 0])


def _box_sd(points, x, q, h):
    loc = (points - x) @ R(q)
    qv = np.abs(loc) - h
    out = np.linalg.norm(np.maximum(qv, 0), axis=1)
    return out + np.minimum(qv.max(axis=1), 0)


@pytest.mark.parametrize("seed", range(40))
def test_random_pairs_swap_symmetry_rigid_invariance_and_brute_force_depth(seed):
    rng = np.random.default_rng(seed)
    shapes = [SPHERE, BOX, CAPSULE]
    sa, sb = shapes[seed % 3], shapes[(seed // 3) % 3]

    def params(s):
        if s == SPHERE:
            return np.array([rng.uniform(0.2, 0.5), 0, 0])
        if s == BOX:
            return rng.uniform(0.2, 0.6, 3)
        return np.array([rng.uniform(0.1, 0.3), rng.uniform(0.2, 0.6), 0])

    pa, pb = params(sa), params(sb)
    qa, qb = rand_quat(rng), rand_quat(rng)
    xb = rng.uniform(-1, 1, 3)
    xa = xb + rng.standard_normal(3) * 0.35
    n1, p1, d1 = run(sa, pa, xa, qa, sb, pb, xb, qb)
    n2, p2, d2 = run(sb, pb, xb, qb, sa, pa, xa, qa)
    assert len(d1) == len(d2)
    order1, order2 = np.lexsort(p1.T), np.lexsort(p2.T)
    assert np.allclose(d1[order1], d2[order2]) and np.allclose(p1[order1], p2[order2])
    assert np.allclose(n1[order1], -n2[order2])
    # a common rigid motion moves points and turns normals, depths unchanged
    qm = rand_quat(rng)
    Rm = R(qm)
    t = rng.uniform(-3, 3, 3)
    from parsim.rotation import quat_mul
    qa2 = np.array(quat_mul(*qm, *qa))
    qb2 = np.array(quat_mul(*qm, *qb))
    n3, p3, d3 = run(sa, pa, Rm @ xa + t, qa2, sb, pb, Rm @ xb + t, qb2)
    assert len(d3) == len(d1)
    assert np.allclose(np.sort(d1), np.sort(d3), atol=1e-9)
    back = (Rm.T @ (p3 - t).T).T                             # points moved back
    for k in range(len(d1)):
        j = np.argmin(np.linalg.norm(back - p1[k], axis=1))
        assert np.allclose(back[j], p1[k], atol=1e-9)
        assert np.allclose(Rm.T @ n3[j], n1[k], atol=1e-9)
    for k in range(len(d1)):
        assert np.linalg.norm(n1[k]) == pytest.approx(1.0)
        assert d1[k] > 0
    # brute-force depth for smooth pairs: depth = r_a + r_b - distance of the cores
    if BOX not in (sa, sb) or (sa == SPHERE or sb == SPHERE):
        def core(s, p, x, q):
            if s == SPHERE:
                return x[None, :], p[0]
            if s == CAPSULE:
                return _segment_points(x, q, p[1]), p[0]
            return None, None

        ca, ra = core(sa, pa, xa, qa)
        cb, rb = core(sb, pb, xb, qb)
        if ca is not None and cb is not None:
            dist = np.linalg.norm(ca[:, None] - cb[None], axis=2).min()
            expect = ra + rb - dist
            if expect > 1e-3:
                assert d1.max() == pytest.approx(expect, abs=2e-3)
            elif expect < -1e-3:
                assert len(d1) == 0
        else:
            # sphere against box: depth = r - signed distance of the centre
            (s_sph, p_sph, x_sph) = (sa, pa, xa) if sa == SPHERE else (sb, pb, xb)
            (p_box, x_box, q_box) = (pb, xb, qb) if sa == SPHERE else (pa, xa, qa)
            expect = p_sph[0] - _box_sd(x_sph[None], x_box, q_box, p_box)[0]
            if expect > 1e-9:
                assert d1 == pytest.approx([expect], abs=1e-9)
            else:
                assert len(d1) == 0


def _sat_depth(xa, qa, ha, xb, qb, hb):
    A, B = R(qa).T, R(qb).T
    axes = list(A) + list(B)
    for i in range(3):
        for j in range(3):
            c = np.cross(A[i], B[j])
            if np.linalg.norm(c) > 1e-6:
                axes.append(c / np.linalg.norm(c))
    d = xa - xb
    best = np.inf
    for L in axes:
        ov = (ha * np.abs(A @ L)).sum() + (hb * np.abs(B @ L)).sum() - abs(d @ L)
        best = min(best, ov)
    return best


@pytest.mark.parametrize("seed", range(60))
def test_box_box_depth_agrees_with_independent_sat_and_points_lie_in_both(seed):
    rng = np.random.default_rng(1000 + seed)
    ha, hb = rng.uniform(0.2, 0.6, 3), rng.uniform(0.2, 0.6, 3)
    qa, qb = rand_quat(rng), rand_quat(rng)
    xb = np.zeros(3)
    xa = rng.standard_normal(3) * 0.5
    n, p, d = run(BOX, ha, xa, qa, BOX, hb, xb, qb)
    sat = _sat_depth(xa, qa, ha, xb, qb, hb)
    if sat <= 0:
        assert len(d) == 0
        return
    assert 1 <= len(d) <= 4
    # the reported normal's overlap is the SAT minimum (edge axes lose ties within 5 %)
    assert d.max() <= sat * 1.06 + 1e-9
    for k in range(len(d)):
        tol = d[k] + 1e-9
        assert _box_sd(p[k][None], xa, qa, ha)[0] <= tol
        assert _box_sd(p[k][None], xb, qb, hb)[0] <= tol


def test_stacked_boxes_face_manifold_and_rotated_top():
    n, p, d = run(BOX, (0.5, 0.5, 0.5), (0, 0, 0.99), I4, BOX, (1, 1, 0.5), (0, 0, 0), I4)
    assert len(d) == 4 and np.allclose(d, 0.01) and np.allclose(n, [0, 0, 1])
    assert np.allclose(np.abs(p[:, :2]), 0.5) and np.allclose(p[:, 2], 0.495)
    q = np.array([math.cos(math.pi / 8), 0, 0, math.sin(math.pi / 8)])   # 45 deg about z
    n, p, d = run(BOX, (0.5, 0.5, 0.5), (0, 0, 0.99), q, BOX, (1, 1, 0.5), (0, 0, 0), I4)
    assert len(d) == 4 and np.allclose(d, 0.01)
    assert np.allclose(np.linalg.norm(p[:, :2], axis=1), 0.5 * math.sqrt(2))
    # swapped roles: the big box on top of the small one (reference face on A)
    n, p, d = run(BOX, (1, 1, 0.5), (0, 0, 0), I4, BOX, (0.5, 0.5, 0.5), (0, 0, 0.99), I4)
    assert len(d) == 4 and np.allclose(d, 0.01) and np.allclose(n, [0, 0, -1])
    assert np.allclose(p[:, 2], 0.495)


def test_box_box_edge_edge_crossing():
    qa = np.array([math.cos(math.pi / 8), math.sin(math.pi / 8), 0, 0])   # edge along x on top
    qb = np.array([math.cos(math.pi / 8), 0, math.sin(math.pi / 8), 0])   # edge along y
    s2 = math.sqrt(2) * 0.5
    n, p, d = run(BOX, (0.5, 0.5, 0.5), (0, 0, 2 * s2 - 0.01), qa, BOX, (0.5, 0.5, 0.5),
                  (0, 0, 0), qb)
    assert len(d) == 1 and d[0] == pytest.approx(0.01) and np.allclose(n, [[0, 0, 1]])
    assert np.allclose(p[0], [0, 0, s2 - 0.005])


def test_capsule_on_box_face_two_points_and_crossing_edge_one():
    n, p, d = run(CAPSULE, (0.1, 0.3, 0), (0, 0, 0.59), I4, BOX, (1, 1, 0.5), (0, 0, 0), I4)
    assert len(d) == 2 and np.allclose(d, 0.01) and np.allclose(n, [0, 0, 1])
    q = np.array([math.cos(math.pi / 4), 0, 0, math.sin(math.pi / 4)])   # axis along y
    n, p, d = run(CAPSULE, (0.1, 3.0, 0), (1.05, 0, 0.55), q, BOX, (1, 1, 0.5), (0, 0, 0), I4)
    assert len(d) == 1
    expect = 0.1 - math.hypot(0.05, 0.05)
    assert d[0] == pytest.approx(expect, abs=1e-6)
