"""Physics of material pairs: the mixing rules of :mod:`parsim.materials`, ``set_interaction``,
Coulomb friction, rolling resistance and the rebound of flat boxes and lying capsules, each against
an analytic value.

Tolerances. A linear spring-dashpot collision integrated with dt = t_c / 1000 rebounds with the
analytic restitution to ~4e-4 (0.07 % at t_c / 1000 in docs/engine.md), hence 1e-3 there; with
dt = t_c / 100 (1 %) where only the duration is measured. A sphere that starts at its static
overlap (delta = g t_c^2 / (pi^2 + ln^2 e), so Fn = m g from the first step) slides and rolls
with the rigid-body accelerations to rounding (measured 1e-11); 1e-3 leaves room for a spring
transient while the wrong mixing rules are 10-30 % away.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import parsim

G = 9.81


def _head_on(e_a, e_b, tc_a, tc_b, dt, pair=("A", "B"), interaction=None, v=0.5):
    """Two spheres (radii 0.05 and 0.03, so unequal masses) of materials ``pair`` meet head-on at
    closing speed 2 v. Returns (relative speed after / before, steps with a touching contact)."""
    sim = parsim.Simulation(dt=dt)
    mats = {"A": sim.add_material("A", density=1000.0, restitution=e_a, collision_time=tc_a,
                                  friction=0.0),
            "B": sim.add_material("B", density=2000.0, restitution=e_b, collision_time=tc_b,
                                  friction=0.0)}
    if interaction is not None:
        sim.set_interaction("A", "B", **interaction)
    sim.add_sphere((0, 0, 0), 0.05, mats[pair[0]], velocity=(v, 0, 0))
    sim.add_sphere((0.08 + 2e-6, 0, 0), 0.03, mats[pair[1]], velocity=(-v, 0, 0))
    steps = touching = 0
    while True:
        sim.step()
        steps += 1
        touching += sim.n_contacts > 0
        if touching and sim.n_contacts == 0:
            break
        assert steps < 20 * max(tc_a, tc_b) / dt, "the collision did not end"
    vx = sim.state()["velocity"][:, 0]
    return (vx[1] - vx[0]) / (2 * v), touching


def test_two_materials_rebound_with_geometric_mean_restitution():
    """eA = 0.9, eB = 0.4: sqrt(eA eB) = 0.6 (the arithmetic mean would be 0.65), for a sphere
    pair and for a sphere of A on a plane of B."""
    ratio, _ = _head_on(0.9, 0.4, 1e-3, 1e-3, dt=1e-6)
    assert ratio == pytest.approx(0.6, rel=1e-3)

    sim = parsim.Simulation(dt=1e-6)
    a = sim.add_material("A", density=1000.0, restitution=0.9, collision_time=1e-3, friction=0.0)
    b = sim.add_material("B", density=1000.0, restitution=0.4, collision_time=1e-3, friction=0.0)
    sim.add_plane((0, 0, 0), (0, 0, 1), b)
    sim.add_sphere((0, 0, 0.05 + 1e-6), 0.05, a, velocity=(0, 0, -1.0))
    sim.run(1100)
    assert sim.nl.n_touching() == 0
    assert sim.state()["velocity"][1, 2] == pytest.approx(0.6, rel=1e-3)


def test_two_materials_collide_for_the_arithmetic_mean_collision_time():
    """t_c = 1 ms and 3 ms: the pair's contact lasts 2 ms (harmonic mean 1.5 ms, geometric 1.73
    ms); counted in steps of dt = 10 us, so +-1.5 steps. The restitution is still e = 0.8."""
    dt = 1e-5
    ratio, touching = _head_on(0.8, 0.8, 1e-3, 3e-3, dt=dt)
    assert abs(touching * dt - 2e-3) <= 1.5 * dt
    assert ratio == pytest.approx(0.8, rel=1e-2)             # dt = t_c / 200


def test_set_interaction_overrides_the_pair_only():
    """set_interaction(A, B, e=0.3, t_c=2 ms) replaces the mixed values (e = 0.6, t_c = 1 ms) for
    A-B contacts; A-A and B-B keep their own e = 0.9, 0.4 and t_c = 1 ms."""
    dt = 2e-6
    override = dict(restitution=0.3, collision_time=2e-3, friction=0.0)
    for pair, e, tc in ((("A", "B"), 0.3, 2e-3), (("B", "A"), 0.3, 2e-3),
                        (("A", "A"), 0.9, 1e-3), (("B", "B"), 0.4, 1e-3)):
        ratio, touching = _head_on(0.9, 0.4, 1e-3, 1e-3, dt=dt, pair=pair, interaction=override)
        assert ratio == pytest.approx(e, rel=2e-3), pair      # dt >= t_c / 500
        assert abs(touching * dt - tc) <= 1.5 * dt, pair


def _sphere_on_plane(mu_sphere, mu_plane, velocity, spin, times, mu_r_sphere=0.0,
                     mu_r_plane=0.0, r=0.05, dt=1e-5, tc=1e-3, e=0.5):
    """A solid sphere of material A on a plane of material B under gravity, starting at its
    static overlap; returns (t, vx, omega_y r, x) at each of ``times``."""
    sim = parsim.Simulation(dt=dt, gravity=(0, 0, -G))
    a = sim.add_material("A", density=2500.0, restitution=e, collision_time=tc,
                         friction=mu_sphere, rolling_friction=mu_r_sphere)
    b = sim.add_material("B", density=7000.0, restitution=e, collision_time=tc,
                         friction=mu_plane, rolling_friction=mu_r_plane)
    sim.add_plane((0, 0, 0), (0, 0, 1), b)
    delta = G * tc * tc / (math.pi**2 + math.log(e) ** 2)
    sim.add_sphere((0, 0, r - delta), r, a, velocity=(velocity, 0, 0),
                   angular_velocity=(0, spin, 0))
    out, t = [], 0
    for target in times:
        n = round(target / dt) - t
        sim.run(n)
        t += n
        s = sim.state()
        assert abs(s["position"][1, 2] - (r - delta)) < 1e-3 * delta     # stays on the plane
        out.append((t * dt, s["velocity"][1, 0], s["angular_velocity"][1, 1] * r,
                    s["position"][1, 0]))
    return out


def test_sliding_sphere_decelerates_at_geometric_mean_friction_then_rolls_at_five_sevenths():
    """Sphere mu = 0.2 on plane mu = 0.8: mu = sqrt(0.16) = 0.4 (arithmetic: 0.5). Launched at
    v0 = 2 m/s without spin it slides with dv/dt = -mu g while omega r grows at 5/2 mu g, until
    v = omega r = 5/7 v0 at t* = 2 v0 / (7 mu g) = 0.146 s; then it rolls on at 5/7 v0."""
    mu, v0 = 0.4, 2.0
    (t1, v1, wr1, _), (t2, v2, wr2, _), (t3, v3, wr3, _) = _sphere_on_plane(
        0.2, 0.8, v0, 0.0, (0.02, 0.1, 0.4))
    assert t2 < 2 * v0 / (7 * mu * G) < t3
    assert (v1 - v2) / (t2 - t1) == pytest.approx(mu * G, rel=1e-3)
    assert v2 == pytest.approx(v0 - mu * G * t2, rel=1e-3)
    assert wr2 == pytest.approx(2.5 * mu * G * t2, rel=1e-3)
    assert v3 == pytest.approx(5.0 / 7.0 * v0, rel=1e-3)
    assert wr3 == pytest.approx(v3, rel=1e-3)                   # rolling without slip


def test_rolling_friction_decelerates_at_five_sevenths_mu_r_g_and_stops():
    """parsim.contacts._rolling_torque: torque -mu_r |Fn| R_eff against the rolling velocity, with
    R_eff = r against a plane. For a solid sphere rolling without slip (friction force F at the
    contact, I = 2/5 m r^2): m a = F, I a / r = -F r - mu_r m g r, so a = -5/7 mu_r g, whatever
    the speed. mu_r = sqrt(0.05 * 0.2) = 0.1 (arithmetic: 0.125): a = 0.7007 m/s^2. The sphere
    stops after v0^2 / (2 a) and stays stopped (the torque never drives it backwards beyond one
    step's a dt)."""
    v0, r, dt = 1.0, 0.05, 1e-5
    a = 5.0 / 7.0 * 0.1 * G
    res = _sphere_on_plane(0.8, 0.8, v0, v0 / r, (0.05, 0.55, 1.0, 1.6, 2.0), mu_r_sphere=0.05,
                           mu_r_plane=0.2, r=r, dt=dt)
    (t1, v1, wr1, _), (t2, v2, _, _), (t3, v3, _, _) = res[:3]
    assert (v1 - v2) / (t2 - t1) == pytest.approx(a, rel=1e-3)
    assert (v2 - v3) / (t3 - t2) == pytest.approx(a, rel=1e-3)     # constant torque
    assert v1 == pytest.approx(v0 - a * t1, rel=1e-3)
    assert wr1 == pytest.approx(v1, rel=1e-3)
    for t, v, wr, x in res[3:]:                                  # past t_stop = v0 / a = 1.43 s
        assert abs(v) <= 2 * a * dt and abs(wr) <= 2 * a * dt
        assert x == pytest.approx(v0 * v0 / (2 * a), rel=1e-3)


def _flat_drop(shape, e, tc=1e-3, dt=1e-6, v=1.0):
    """A box (face down) or a capsule (lying along x) of restitution e falls at v onto a plane
    of the same material, without gravity. Returns (vz after / v, steps in contact, contact
    points while touching, final angular velocity)."""
    sim = parsim.Simulation(dt=dt)
    m = sim.add_material("m", density=1000.0, restitution=e, collision_time=tc, friction=0.5)
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    if shape == "box":
        sim.add_box((0, 0, 0.05 + 1e-6), (0.1, 0.08, 0.05), material=m, velocity=(0, 0, -v))
    else:
        sim.add_capsule((0, 0, 0.05 + 1e-6), 0.05, 0.2, material=m, velocity=(0, 0, -v))
    steps = touching = 0
    points = set()
    while True:
        sim.step()
        steps += 1
        if sim.n_contacts:
            touching += 1
            points.add(sim.n_contacts)
        elif touching:
            break
        assert steps < 10 * tc / dt, "the collision did not end"
    s = sim.state()
    return s["velocity"][1, 2] / v, touching, points, s["angular_velocity"][1]


@pytest.mark.parametrize("e", [0.8, 0.5])
@pytest.mark.parametrize("shape, n", [("box", 4), ("capsule", 2)])
def test_flat_box_and_lying_capsule_rebound_with_the_pair_restitution(shape, n, e):
    """A box face on a plane touches at its four penetrating vertices, a lying capsule at its
    two end caps; the pair's spring-dashpot is shared by the points in proportion to their
    depths, so the body rebounds with the pair's e after t_c, as a sphere does, and does not
    spin. (With the whole spring-dashpot at every point, as before, it collided as on n
    contacts in parallel: 0.638 (box) and 0.729 (capsule) for e = 0.8, after 0.504 and
    0.709 ms.) dt = t_c / 1000: 1e-3 as above."""
    ratio, touching, points, w = _flat_drop(shape, e)
    assert points == {n}
    assert ratio == pytest.approx(e, rel=1e-3)
    assert abs(touching * 1e-6 - 1e-3) <= 1.5e-6
    assert np.abs(w).max() < 1e-9



def test_set_interaction_keeps_what_it_is_not_given():
    """``set_interaction`` with only a new restitution keeps the pair's mixed friction, rolling
    friction and ratios (they were reset to the defaults: mu 0.5, rolling friction off); with
    only a friction it keeps the mixed normal law. Materials that do not mix need the normal
    law; an unknown parameter is named."""
    from parsim.materials import P_GN, P_KN, P_KT_RATIO, P_MU, P_MU_ROLL

    sim = parsim.Simulation(dt=1e-5)
    ball = sim.add_material("ball", density=2500.0, restitution=0.8, collision_time=1e-3,
                            friction=0.1, rolling_friction=0.04, tangential_stiffness_ratio=0.5)
    floor = sim.add_material("floor", density=2500.0, restitution=0.5, collision_time=3e-3,
                             friction=0.4, rolling_friction=0.01, tangential_stiffness_ratio=0.3)
    mixed = sim.table[0, 1].copy()
    assert mixed[P_MU] == pytest.approx(0.2) and mixed[P_MU_ROLL] == pytest.approx(0.02)
    sim.set_interaction(ball, floor, restitution=0.3, collision_time=1e-3)
    row = sim.table[0, 1]
    assert (row[P_MU], row[P_MU_ROLL], row[P_KT_RATIO]) == (mixed[P_MU], mixed[P_MU_ROLL],
                                                            mixed[P_KT_RATIO])
    assert row[P_GN] == pytest.approx(-2 * np.log(0.3) / 1e-3)
    sim.set_interaction("floor", "ball", friction=0.7)
    row = sim.table[1, 0]
    assert row[P_MU] == 0.7 and row[P_KN] == mixed[P_KN] and row[P_GN] == mixed[P_GN]
    assert row[P_MU_ROLL] == mixed[P_MU_ROLL]
    steel = sim.add_material("steel", density=7800.0, stiffness=1e5, damping=10.0)
    with pytest.raises(ValueError, match="'ball\\+steel': give stiffness and damping, or "
                                         "restitution and collision_time"):
        sim.set_interaction(ball, steel, friction=0.3)
    sim.set_interaction(ball, steel, stiffness=2e5, damping=5.0)
    sim.set_interaction(floor, steel, stiffness=2e5, damping=5.0)
    assert sim.table[0, 2][P_MU] == 0.5            # no mixed value: the default
    with pytest.raises(ValueError, match="'ball\\+floor': unknown parameter 'frcition'"):
        sim.set_interaction(ball, floor, frcition=0.3)
    with pytest.raises(ValueError, match="'glass': unknown parameter 'restitutoin'"):
        sim.add_material("glass", density=2500.0, restitutoin=0.5, collision_time=1e-3)
