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
    # the reported normal's overlap is the SAT minimum (edge axes lose ties within 5 %), and
    # never less: the deepest point of a face manifold or the edge-edge point has it
    assert d.max() <= sat * 1.06 + 1e-9
    assert d.max() >= sat * (1 - 1e-9)
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
    # leaning across the top edge x = 1, z = 0.5 like a ladder (axis (1, 0, -1)/sqrt 2, 0.07
    # from the edge): one contact at the edge
    q = np.array([math.cos(math.pi / 8), 0, math.sin(math.pi / 8), 0])   # 45 deg about y
    e = np.array([1.0, 0, 0.5])
    m = np.array([1.0, 0, 1.0]) / math.sqrt(2)
    n, p, d = run(CAPSULE, (0.1, 0.5, 0), e + 0.07 * m, q, BOX, (1, 1, 0.5), (0, 0, 0), I4)
    assert len(d) == 1 and d[0] == pytest.approx(0.03, abs=1e-12)
    assert np.allclose(n[0], m) and np.allclose(p[0], e - 0.015 * m)


# --------------------------------------------------------------------------------------------
# argument order, capsules lying along box faces/edges, exact capsule-box closest points
# --------------------------------------------------------------------------------------------

from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from parsim.rotation import quat_mul  # noqa: E402

HYP = settings(max_examples=150, derandomize=True, database=None, deadline=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def qz(angle):
    return np.array([math.cos(angle / 2), 0, 0, math.sin(angle / 2)])


def same_contacts_swapped(a, b):
    """collide(a, b) and collide(b, a): identical points and depths, opposite normals."""
    n1, p1, d1 = run(*a, *b)
    n2, p2, d2 = run(*b, *a)
    assert len(d1) == len(d2)
    assert np.array_equal(p1, p2) and np.array_equal(d1, d2) and np.array_equal(n1, -n2)
    return n1, p1, d1


def test_swap_is_exact_for_equal_shapes_including_face_ties():
    # equal boxes, top one turned 30 deg: both faces tie as reference face; the manifold must
    # not depend on which argument comes first
    n, p, d = same_contacts_swapped((BOX, (0.5, 0.5, 0.5), (0.1, 0.05, 0.99), qz(math.pi / 6)),
                                    (BOX, (0.5, 0.5, 0.5), (0, 0, 0), I4))
    assert len(d) == 4 and np.allclose(d, 0.01) and np.allclose(n, [0, 0, 1])
    rng = np.random.default_rng(77)
    deep = 0
    for _ in range(300):       # random, often deep, box pairs: the spread selection too
        ha, hb = rng.uniform(0.2, 0.6, 3), rng.uniform(0.2, 0.6, 3)
        xa = rng.standard_normal(3) * 0.3
        _, _, d = same_contacts_swapped((BOX, ha, xa, rand_quat(rng)),
                                        (BOX, hb, np.zeros(3), rand_quat(rng)))
        deep += len(d) == 4
    assert deep > 50
    same_contacts_swapped((CAPSULE, (0.1, 0.5, 0), (0.2, 0, 0.19), I4),
                          (CAPSULE, (0.1, 0.5, 0), (0, 0, 0), I4))
    same_contacts_swapped((SPHERE, (0.3, 0, 0), (0.1, 0.2, 0.3), I4),
                          (SPHERE, (0.4, 0, 0), (0, 0, 0), I4))


@pytest.mark.parametrize("angle", [0.0, math.pi / 2, 0.3])
def test_capsule_longer_than_box_lying_on_face_has_two_points_at_face_border(angle):
    # a capsule (half length 3) lying across a box top face (half extents 1, 1, 0.5) in any
    # horizontal direction: supported where its axis leaves the face, not at one point
    n, p, d = run(CAPSULE, (0.1, 3.0, 0), (0, 0, 0.59), qz(angle), BOX, (1, 1, 0.5), (0, 0, 0),
                  I4)
    assert len(d) == 2 and np.allclose(d, 0.01) and np.allclose(n, [0, 0, 1])
    assert np.allclose(p[:, 2], 0.495)
    u = np.array([math.cos(angle), math.sin(angle), 0.0])
    s = 1.0 / max(abs(u[0]), abs(u[1]))          # where the axis crosses the face border
    assert sorted((p @ u).round(9)) == pytest.approx([-s, s])
    assert np.allclose(p[:, :2] - np.outer(p @ u, u[:2]), 0.0, atol=1e-12)


def test_capsule_longer_than_box_edge_lying_along_it_has_two_points_at_edge_ends():
    # axis along y, 0.05 beyond the top edge x = 1, z = 0.5 (edge half length 1)
    n, p, d = run(CAPSULE, (0.1, 3.0, 0), (1.05, 0, 0.55), qz(math.pi / 2), BOX, (1, 1, 0.5),
                  (0, 0, 0), I4)
    expect = 0.1 - math.hypot(0.05, 0.05)
    assert len(d) == 2 and np.allclose(d, expect)
    assert np.allclose(n, [1 / math.sqrt(2), 0, 1 / math.sqrt(2)])
    assert sorted(p[:, 1].round(9)) == [-1.0, 1.0]
    # turned 0.2 rad in the vertical plane of the edge, the capsule leans against the side
    # face x = 1 instead (0.05 from it along its whole length): two points on that face
    q = quat_mul(*qz(math.pi / 2), math.cos(0.1), 0, math.sin(0.1), 0)
    n, p, d = run(CAPSULE, (0.1, 3.0, 0), (1.05, 0, 0.55), np.array(q), BOX, (1, 1, 0.5),
                  (0, 0, 0), I4)
    assert len(d) == 2 and np.allclose(d, 0.05) and np.allclose(n, [1, 0, 0])
    # the part of the axis over that face: from the top edge (z = 0.5) to the side y = 1
    assert np.allclose(p[:, 0], 0.975)
    assert sorted(p[:, 1]) == pytest.approx([0.05 / math.tan(0.2), 1.0])
    # the same turned the other way around (horizontal, 0.2 rad from the edge) lies on the top
    # face, 0.05 above it where its axis is over the face: two points on the top face
    n, p, d = run(CAPSULE, (0.1, 3.0, 0), (1.05, 0, 0.55), qz(math.pi / 2 + 0.2), BOX,
                  (1, 1, 0.5), (0, 0, 0), I4)
    assert len(d) == 2 and np.allclose(d, 0.05) and np.allclose(n, [0, 0, 1])
    assert np.allclose(p[:, 2], 0.475) and (np.abs(p[:, :2]) <= 1 + 1e-12).all()


def _capsule_box_brute(r, hl, xa, qa, h, xb, qb):
    t = np.linspace(-hl, hl, 20001)
    return r - _box_sd(xa + np.outer(t, R(qa)[:, 0]), xb, qb, h).min()


unit = st.floats(-1.0, 1.0)
quats = st.tuples(unit, unit, unit, unit).filter(lambda q: np.linalg.norm(q) > 0.2).map(
    lambda q: np.array(q) / np.linalg.norm(q))


@HYP
@given(r=st.floats(0.05, 0.3), hl=st.floats(0.0, 1.5), h=st.tuples(*[st.floats(0.2, 0.6)] * 3),
       qa=quats, qb=quats, xa=st.tuples(*[st.floats(-1.2, 1.2)] * 3), qm=quats,
       shift=st.tuples(*[st.floats(-3, 3)] * 3))
def test_capsule_box_depth_matches_brute_force_and_is_rigid_invariant(r, hl, h, qa, qb, xa, qm,
                                                                      shift):
    h, xa, xb = np.array(h), np.array(xa), np.zeros(3)
    n, p, d = run(CAPSULE, (r, hl, 0), xa, qa, BOX, h, xb, qb)
    expect = _capsule_box_brute(r, hl, xa, qa, h, xb, qb)
    core_outside = expect < r - 1e-6
    if not core_outside:
        assert len(d) >= 1
        return
    if expect < -1e-6:
        assert len(d) == 0
        return
    if expect > 1e-6:
        assert len(d) >= 1 and d.max() == pytest.approx(expect, abs=1e-6)
    for k in range(len(d)):
        # the point is within half the depth of both surfaces
        assert _box_sd(p[k][None], xb, qb, h)[0] <= 0.5 * d[k] + 1e-9
        s = np.clip((p[k] - xa) @ R(qa)[:, 0], -hl, hl)
        assert np.linalg.norm(p[k] - xa - s * R(qa)[:, 0]) - r <= 0.5 * d[k] + 1e-9
    # the closest point of the core is exact: a common rigid motion moves the contacts exactly
    Rm, t = R(qm), np.array(shift)
    n2, p2, d2 = run(CAPSULE, (r, hl, 0), Rm @ xa + t, np.array(quat_mul(*qm, *qa)), BOX, h,
                     Rm @ xb + t, np.array(quat_mul(*qm, *qb)))
    assert len(d2) == len(d)
    if len(d):
        back = (p2 - t) @ Rm
        for k in range(len(d)):
            j = np.argmin(np.linalg.norm(back - p[k], axis=1))
            assert np.allclose(back[j], p[k], rtol=0, atol=1e-9)
            assert np.allclose(n2[j] @ Rm, n[k], rtol=0, atol=1e-9)
            assert d2[j] == pytest.approx(d[k], abs=1e-9)


@HYP
@given(sa=st.sampled_from([SPHERE, BOX, CAPSULE, PLANE]),
       sb=st.sampled_from([SPHERE, BOX, CAPSULE, PLANE]),
       size_a=st.tuples(*[st.floats(0.2, 0.6)] * 3), size_b=st.tuples(*[st.floats(0.2, 0.6)] * 3),
       qa=quats, qb=quats, qm=quats, gap=st.tuples(*[st.floats(-0.8, 0.8)] * 3),
       shift=st.tuples(*[st.floats(-3, 3)] * 3))
def test_every_pair_swap_exact_and_rigid_invariant(sa, sb, size_a, size_b, qa, qb, qm, gap,
                                                   shift):
    def params(s, size, q):
        if s == SPHERE:
            return np.array([size[0], 0, 0])
        if s == CAPSULE:
            return np.array([0.5 * size[0], size[1], 0])
        if s == PLANE:
            return R(q)[:, 2].copy()           # a random unit normal
        return np.array(size)

    pa, pb = params(sa, size_a, qa), params(sb, size_b, qb)
    xb = np.zeros(3)
    xa = np.array(gap)
    # two copies of one body: no order between them, nothing to swap
    assume(not (sa == sb and np.array_equal(pa, pb) and np.array_equal(xa, xb)
                and np.array_equal(qa, qb)))
    n, p, d = same_contacts_swapped((sa, pa, xa, qa), (sb, pb, xb, qb))
    # (near-)coincident centres: the fallback normal (+z) is not rotation invariant (documented)
    assume(np.linalg.norm(xa - xb) > 1e-6)
    if sa == PLANE and sb == PLANE:
        assert len(d) == 0
    for k in range(len(d)):
        assert d[k] > 0 and np.linalg.norm(n[k]) == pytest.approx(1.0, abs=1e-12)
    # documented discrete ties are left out: a box sunk with more than four vertices below a
    # plane (which four are kept), a capsule whose axis passes through a box (flat minimum)
    if {sa, sb} == {BOX, PLANE} and len(d) == 4:
        return
    if {sa, sb} == {BOX, CAPSULE}:
        cap, box = ((pa, xa, qa), (pb, xb, qb)) if sa == CAPSULE else ((pb, xb, qb), (pa, xa, qa))
        if _capsule_box_brute(cap[0][0], cap[0][1], cap[1], cap[2], box[0], box[1], box[2]) \
                >= cap[0][0] - 1e-6:
            return
    Rm, t = R(qm), np.array(shift)

    def moved(s, prm, x, q):
        if s == PLANE:
            return Rm @ prm, Rm @ x + t, q
        return prm, Rm @ x + t, np.array(quat_mul(*qm, *q))

    n2, p2, d2 = run(sa, *moved(sa, pa, xa, qa), sb, *moved(sb, pb, xb, qb))
    assert len(d2) == len(d)
    back = (p2 - t) @ Rm
    for k in range(len(d)):
        j = np.argmin(np.linalg.norm(back - p[k], axis=1))
        assert np.allclose(back[j], p[k], rtol=0, atol=1e-9)
        assert np.allclose(n2[j] @ Rm, n[k], rtol=0, atol=1e-9)
        assert d2[j] == pytest.approx(d[k], abs=1e-9)
