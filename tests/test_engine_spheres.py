"""Analytic and conservation checks of the DEM engine with spheres and planes.

Tolerances: the linear spring-dashpot contact is integrated with dt = t_c / 100, whose
discretisation error in the rebound speed is < 1 % (0.7 % at e = 0.5; 0.07 % at t_c / 1000); rolling/sliding accelerations are compared
to the rigid-body values within 1 % (the tangential spring adds a small elastic transient).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import parsim
from parsim.integrator import _angular_momentum


def test_restitution_sphere_plane_and_sphere_sphere():
    for e in (0.5, 0.8, 0.95):
        sim = parsim.Simulation(dt=1e-5)
        m = sim.add_material("m", density=1000.0, restitution=e, collision_time=1e-3, friction=0.0)
        sim.add_plane((0, 0, 0), (0, 0, 1), m)
        sim.add_sphere((0, 0, 0.501), 0.5, m, velocity=(0, 0, -1))
        sim.run(300)
        assert sim.state()["velocity"][1, 2] == pytest.approx(e, rel=1e-2)

        sim = parsim.Simulation(dt=1e-5)
        m = sim.add_material("m", density=1000.0, restitution=e, collision_time=1e-3, friction=0.0)
        sim.add_sphere((0, 0, 0), 0.5, m, velocity=(1, 0, 0))
        sim.add_sphere((1.001, 0, 0), 0.5, m, velocity=(-1, 0, 0))
        sim.run(300)
        v = sim.state()["velocity"]
        assert v[0, 0] == pytest.approx(-e, rel=1e-2)
        assert v[1, 0] == -v[0, 0]                       # exact action = reaction


def test_stiffness_parameterisation_matches_lammps_damping():
    """kn, gamma_n (per unit m_eff) give e = exp(-gamma_n/2 * t_c), t_c = pi / sqrt(kn/m_eff - gamma_n^2/4)."""
    kn, gn = 1e5, 41.4314
    sim = parsim.Simulation(dt=2e-6)
    m = sim.add_material("m", density=1.0, stiffness=kn, damping=gn, friction=0.0)
    sim.add_sphere((0, 0, 0), 0.5, m, velocity=(0.5, 0, 0))
    sim.add_sphere((1.0005, 0, 0), 0.5, m, velocity=(-0.5, 0, 0))
    sim.run(5000)
    meff = (math.pi / 6) / 2
    tc = math.pi / math.sqrt(kn / meff - gn * gn / 4)
    e = math.exp(-gn / 2 * tc)
    assert e == pytest.approx(0.9, abs=2e-3)             # the peers' stated restitution
    assert sim.state()["velocity"][1, 0] == pytest.approx(0.5 * e, rel=3e-3)


def _angular_momentum_about_origin(s):
    """Orbital (about the origin) plus spin angular momentum of solid spheres, I = 2/5 m r^2."""
    m, r = s["mass"], s["params"][:, 0]
    return ((m[:, None] * np.cross(s["position"], s["velocity"])).sum(axis=0)
            + ((0.4 * m * r * r)[:, None] * s["angular_velocity"]).sum(axis=0))


def test_elastic_oblique_collision_conserves_energy_and_momentum():
    """Frictional (sliding) and frictionless oblique collisions at e = 1: momentum conserved,
    angular momentum conserved up to the lever arms' offset, energy lost only by sliding."""
    sim = parsim.Simulation(dt=1e-5)
    m = sim.add_material("m", density=1000.0, restitution=1.0, collision_time=1e-3, friction=0.3)
    # the spin makes the contact slide: a sticking spring would give |Ft| / Fn ~ (2/7) vt / vn
    # ~ 0.7 > mu (with a spin of 3 it sticks: mu = 5 gives the same bits)
    sim.add_sphere((0, 0, 0), 0.5, m, velocity=(1, 0.2, 0), angular_velocity=(0, 0, 10))
    sim.add_sphere((0.9, 0.2, 0.05), 0.4, m, velocity=(-1, 0, 0.1))
    s0 = sim.state()
    mass = s0["mass"]
    p0 = (mass[:, None] * s0["velocity"]).sum(axis=0)
    L0 = _angular_momentum_about_origin(s0)
    e0 = sim.kinetic_energy()
    sim.run(3000)
    s1 = sim.state()
    assert sim.nl.n_touching() == 0                       # the collision is over
    p1 = (mass[:, None] * s1["velocity"]).sum(axis=0)
    assert np.allclose(p1, p0, rtol=0, atol=1e-12 * np.abs(p0).max())
    # gamma_n = 0 at e = 1, so gamma_t = gamma_n / 2 = 0 too: energy goes by Coulomb sliding
    # only (18.6 % here; a collision that sticks, or a missing tangential force, loses ~1e-6)
    e1 = sim.kinetic_energy()
    assert e1 <= e0 * (1 + 1e-9)
    assert e0 - e1 > 0.05 * e0
    assert not np.allclose(s1["velocity"], s0["velocity"])
    assert (np.abs(s1["angular_velocity"] - s0["angular_velocity"]).max(axis=1) > 1.0).all()
    # the lever arms -ra n and +rb n leave the two contact points delta apart along n, so the
    # pair's torques about a fixed point miss -delta n x Ft: |dL| <= delta_max mu J_n, with
    # delta_max <= v tc / pi (e = 1, v the closing speed) and J_n <= 2 m_eff v: 0.137, 2.4e-4
    # of |L| (it is 0.105)
    v = np.linalg.norm(s0["velocity"][0] - s0["velocity"][1])
    meff = mass[0] * mass[1] / mass.sum()
    dL = np.linalg.norm(_angular_momentum_about_origin(s1) - L0)
    assert dL <= 0.3 * 2 * meff * v * v * 1e-3 / math.pi

    sim = parsim.Simulation(dt=1e-5)
    m = sim.add_material("m", density=1000.0, restitution=1.0, collision_time=1e-3,
                         friction=0.0)
    sim.add_sphere((0, 0, 0), 0.5, m, velocity=(1, 0.2, 0))
    sim.add_sphere((0.9, 0.2, 0.05), 0.4, m, velocity=(-1, 0, 0.1))
    s0, e0 = sim.state(), sim.kinetic_energy()
    L0 = _angular_momentum_about_origin(s0)
    sim.run(3000)
    assert sim.nl.n_touching() == 0
    assert not np.allclose(sim.state()["velocity"], s0["velocity"])
    assert sim.kinetic_energy() == pytest.approx(e0, rel=1e-5)   # Verlet, dt = t_c / 100
    # central forces only: angular momentum to rounding
    dL = _angular_momentum_about_origin(sim.state()) - L0
    assert np.linalg.norm(dL) <= 1e-12 * np.linalg.norm(L0)


def _incline(theta_deg, mu, steps=6000):
    th = math.radians(theta_deg)
    g = 9.81
    sim = parsim.Simulation(dt=2e-5, gravity=(g * math.sin(th), 0, -g * math.cos(th)))
    m = sim.add_material("m", density=2500.0, restitution=0.3, collision_time=2e-4, friction=mu)
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    sim.add_sphere((0, 0, 0.1), 0.1, m)
    sim.run(2000)                                        # settle onto the slope
    v0 = sim.state()["velocity"][1, 0]
    sim.run(steps)
    t = steps * sim.dt
    v1 = sim.state()["velocity"][1, 0]
    return (v1 - v0) / t, sim.state()


def test_sphere_rolls_down_incline_at_five_sevenths_g_sin_theta():
    a, s = _incline(20.0, 0.8)
    expected = 5.0 / 7.0 * 9.81 * math.sin(math.radians(20.0))
    assert a == pytest.approx(expected, rel=1e-2)
    # rolling without slip: v = omega x r
    v, w = s["velocity"][1, 0], s["angular_velocity"][1, 1]
    assert w * 0.1 == pytest.approx(v, rel=1e-2)


def test_sphere_slides_down_steep_incline_with_kinetic_friction():
    mu, th = 0.1, math.radians(35.0)
    a, _ = _incline(35.0, mu)
    assert a == pytest.approx(9.81 * (math.sin(th) - mu * math.cos(th)), rel=1e-2)


def test_torque_free_asymmetric_box_keeps_angular_momentum_and_flips():
    """Tennis-racket theorem: spin about the intermediate axis is unstable, but L and E hold."""
    sim = parsim.Simulation(dt=1e-4)
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    sim.add_box((0, 0, 0), (0.5, 0.3, 0.1), material=m, angular_velocity=(0.05, 5.0, 0.05))
    st = sim.st

    def world_L():
        return np.array(_angular_momentum(tuple(st.orientation[0]), st.inertia[0],
                                          st.angular_velocity[0]))

    L0, E0 = world_L(), sim.kinetic_energy()
    body_wy = []
    from parsim.rotation import quat_matrix
    for _ in range(400):
        sim.run(100)
        R = np.array(quat_matrix(*st.orientation[0])).reshape(3, 3)
        body_wy.append((R.T @ st.angular_velocity[0])[1])
    assert np.abs(world_L() - L0).max() < 1e-8 * np.abs(L0).max()
    assert sim.kinetic_energy() == pytest.approx(E0, rel=1e-7)
    # the spin about the body's intermediate axis turns over completely (+5 -> about -5 rad/s)
    assert body_wy[0] > 4.9 and min(body_wy) < -4.5


def test_neighbour_skin_does_not_change_the_result_bitwise():
    """Contacts are found from scratch (skin 0) or from a Verlet list (skin > 0): same bits."""
    finals = []
    for skin in (0.0, 0.05, 0.3):
        sim = parsim.Simulation(dt=5e-5, gravity=(0, 0, -9.81), domain=((0, 0, 0), (4, 4, 8)),
                                periodic=(True, True, False), skin=skin)
        m = sim.add_material("m", density=1000.0, restitution=0.5, collision_time=2e-3,
                             friction=0.5)
        sim.add_plane((0, 0, 0), (0, 0, 1), m)
        g = np.stack(np.meshgrid(np.arange(8), np.arange(8), np.arange(4), indexing="ij"),
                     -1).reshape(-1, 3)
        pos = (g + 0.5) * (0.5, 0.5, 0.5) + (0, 0, 0.2)
        r = np.random.default_rng(7).uniform(0.18, 0.25, len(pos))
        v = np.random.default_rng(8).uniform(-1, 1, (len(pos), 3))
        sim.add_spheres(pos, r, m, velocities=v)
        sim.run(600)
        finals.append(sim.state())
        assert sim.n_contacts > 0
    for s in finals[1:]:
        for k in ("position", "velocity", "angular_velocity", "orientation"):
            assert np.array_equal(s[k], finals[0][k]), k


@pytest.mark.filterwarnings("ignore::parsim.OverlapWarning")     # a random, overlapping cluster
def test_periodic_seam_equals_shifted_open_cluster():
    """A cluster straddling a periodic seam moves as the same cluster away from any boundary."""
    rng = np.random.default_rng(3)
    base = rng.uniform(-0.6, 0.6, (30, 3))
    base[:, 2] *= 0.5
    radii = rng.uniform(0.15, 0.2, 30)
    vel = rng.uniform(-0.5, 0.5, (30, 3))
    res = []
    for periodic, centre in ((True, (0.0, 0.0, 0.0)), (False, (5.0, 5.0, 0.0))):
        sim = parsim.Simulation(dt=5e-5, domain=((-5, -5, -50), (5, 5, 50)) if periodic else None,
                                periodic=(periodic, periodic, False))
        m = sim.add_material("m", density=1000.0, restitution=0.6, collision_time=2e-3,
                             friction=0.4)
        sim.add_spheres(base + centre, radii, m, velocities=vel)
        sim.run(2000)
        s = sim.state()
        unwrapped = s["position"] + s["wraps"] * 10.0
        res.append((unwrapped - centre, s["velocity"], s["angular_velocity"]))
    assert np.allclose(res[0][0], res[1][0], atol=1e-9)
    assert np.allclose(res[0][1], res[1][1], atol=1e-7)
    assert np.allclose(res[0][2], res[1][2], atol=1e-6)
    assert np.abs(res[0][1]).max() > 0.05                  # something happened


def test_settled_pile_reaches_random_packing_and_rest():
    """600 spheres poured as a loose lattice settle (rolling friction stops the last rollers)."""
    sim = parsim.Simulation(dt=1e-4, gravity=(0, 0, -9.81), domain=((0, 0, 0), (4, 4, 20)),
                            periodic=(True, True, False))
    m = sim.add_material("m", density=2500.0, restitution=0.2, collision_time=2e-3, friction=0.5,
                         rolling_friction=0.1)
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    g = np.stack(np.meshgrid(np.arange(10), np.arange(10), np.arange(6), indexing="ij"),
                 -1).reshape(-1, 3)
    pos = (g + 0.5) * 0.4 + (0, 0, 0.05)
    rng = np.random.default_rng(11)
    r = rng.uniform(0.15, 0.19, len(pos))
    sim.add_spheres(pos + rng.uniform(-0.005, 0.005, pos.shape), r, m,
                    velocities=rng.uniform(-0.2, 0.2, pos.shape))
    peak = 0.0
    for _ in range(25):                                   # at most 5 s of physical time
        sim.run(2000)
        peak = max(peak, sim.kinetic_energy())
        vmax = float(np.abs(sim.state()["velocity"][1:]).max())
        if vmax < 0.05:
            break
    assert vmax < 0.05                                    # stopped moving
    assert sim.kinetic_energy() < 1e-4 * peak
    s = sim.state()
    z = s["position"][1:, 2]
    rad = s["params"][1:, 0]
    # packing fraction of the bulk layer (away from the floor and the free surface)
    top = np.percentile(z + rad, 95)
    lo_z, hi_z = 0.4, top - 0.4
    # volume of sphere parts inside the slab [lo_z, hi_z]
    def cap(rr, h):
        h = np.clip(h, 0, 2 * rr)
        return np.pi * h * h * (3 * rr - h) / 3
    inside = cap(rad, hi_z - (z - rad)) - cap(rad, lo_z - (z - rad))
    phi = inside.sum() / (16.0 * (hi_z - lo_z))
    assert 0.55 < phi < 0.66, phi


def test_stability_guard_and_override():
    sim = parsim.Simulation(dt=1e-3)
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    sim.add_sphere((0, 0, 0), 0.5, m)
    with pytest.raises(parsim.SimulationError, match=r"dt = 0.001 s exceeds 0.1 x the smallest"):
        sim.run(1)
    sim = parsim.Simulation(dt=1e-3, allow_large_dt=True, gravity=(0, 0, -9.81))
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    sim.add_sphere((0, 0, 0), 0.5, m)
    sim.run(1)                             # the override lets the same step run
    assert sim.step_count == 1
    assert sim.state()["velocity"][0, 2] == pytest.approx(-9.81e-3)


def test_outflow_error_names_uid_and_step_and_delete_counts():
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)))
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    sim.add_sphere((0.5, 0.5, 0.5), 0.1, m)
    sim.add_sphere((0.5, 0.5, 0.99), 0.005, m, velocity=(0, 0, 10.0))
    with pytest.raises(parsim.SimulationError, match=r"body uid 1 at step 10: .*left the domain"):
        sim.run(100)
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)), outflow="delete")
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    sim.add_sphere((0.5, 0.5, 0.5), 0.1, m)
    sim.add_sphere((0.5, 0.5, 0.99), 0.005, m, velocity=(0, 0, 10.0))
    sim.run(100)
    assert sim.deleted == 1 and sim.n_bodies == 1
    assert sim.state()["uid"].tolist() == [0]


def test_non_finite_state_is_reported():
    sim = parsim.Simulation(dt=1e-4)
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    sim.add_sphere((0, 0, 0), 0.1, m)
    sim.add_sphere((0.5, 0, 0), 0.1, m)
    sim.st.velocity[1, 0] = np.nan
    with pytest.raises(parsim.SimulationError, match=r"body uid 1 at step 1: non-finite"):
        sim.run(5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(dt=0), "dt must be a positive"),
    (dict(dt=1e-4, periodic=(True, False, False)), "periodic boundaries need a domain"),
    (dict(dt=1e-4, domain=((0, 0, 0), (1, -1, 1))), "upper corner"),
    (dict(dt=1e-4, outflow="bounce"), "outflow must be"),
    (dict(dt=1e-4, skin=-1), "skin must be"),
    # corners whose distance overflows float64 (a periodic box of infinite length gave NaN
    # positions; 2026-11-29)
    (dict(dt=1e-4, domain=((-1e308, 0, 0), (1e308, 1, 1)), periodic=True),
     r"along x .* not a finite float64"),
    (dict(dt=1e-4, domain=((0, -1e308, 0), (1, 1e308, 1))), r"along y .* not a finite float64"),
])
def test_bad_simulation_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        parsim.Simulation(**kwargs)


def test_bad_body_arguments():
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)))
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    with pytest.raises(ValueError, match="unknown material 'x'"):
        sim.add_sphere((0.5, 0.5, 0.5), 0.1, "x")
    with pytest.raises(ValueError, match="sizes must be finite and > 0"):
        sim.add_sphere((0.5, 0.5, 0.5), -0.1, m)
    with pytest.raises(ValueError, match="outside the domain"):
        sim.add_sphere((0.5, 0.5, 1.5), 0.1, m)
    # sizes whose mass or moments of inertia float64 cannot invert (a radius of 1e-300 raised
    # a ZeroDivisionError, one of 1e300 ran into NaN; 2026-11-29)
    with pytest.raises(ValueError,
                       match=r"sphere 0: sizes \[1e-300\] .* material 'm' .* cannot invert"):
        sim.add_sphere((0.5, 0.5, 0.5), 1e-300, m)
    with pytest.raises(ValueError, match=r"sphere 1: sizes \[1e\+300\] .* cannot invert"):
        sim.add_spheres([(0.5, 0.5, 0.5), (0.2, 0.2, 0.2)], [0.1, 1e300], m)
    with pytest.raises(ValueError, match=r"box 0: sizes .* cannot invert"):
        sim.add_box((0.5, 0.5, 0.5), (1e-110, 1e-110, 1e-110), material=m)
    assert sim.state()["uid"].size == 0  # nothing was added
    with pytest.raises(ValueError, match="zero quaternion"):
        sim.add_box((0.5, 0.5, 0.5), (0.1, 0.1, 0.1), orientation=(0, 0, 0, 0), material=m)
    with pytest.raises(ValueError, match="material 'm' exists"):
        sim.add_material("m", density=1.0, restitution=0.5, collision_time=1e-3)
    with pytest.raises(ValueError, match=r"material 'q': restitution = 1.5 is outside"):
        sim.add_material("q", density=1.0, restitution=1.5, collision_time=1e-3)
    # collision times whose square float64 cannot hold (1e-300 raised ZeroDivisionError, 1e300
    # OverflowError at the first step; 2026-11-29)
    for tc in (1e-300, 1e300):
        with pytest.raises(ValueError, match=r"material 'q': collision_time = .* outside the "
                                             r"allowed range \[1e-150, 1e\+150\]"):
            sim.add_material("q", density=1.0, restitution=0.5, collision_time=tc)


C3 = np.array([[0.2, 0.5, 0.5], [0.5, 0.5, 0.5], [0.8, 0.5, 0.5]])


@pytest.mark.parametrize("call, match", [
    (lambda s, m: s.add_spheres(C3[:, :2], 0.01, m),
     r"sphere centers must be rows of 3 coordinates \(shape \(n, 3\)\), got shape \(3, 2\)"),
    (lambda s, m: s.add_spheres(C3, 0.01, m, velocities=np.zeros((3, 2))),
     r"sphere velocities must be 3 numbers per body.*\(3, 3\)\), got shape \(3, 2\)"),
    (lambda s, m: s.add_sphere(C3[0], 0.01, m, angular_velocity=(1, 2, 3, 4)),
     r"sphere angular_velocities must be 3 numbers per body.*got shape \(1, 4\)"),
    (lambda s, m: s.add_spheres(C3, np.full((3, 1), 0.01), m),
     r"sphere radii must be one number for all bodies or one per body \(3\), got shape \(3, 1\)"),
    (lambda s, m: s.add_box(C3[0], (0.1, 0.1), material=m),
     r"box half_extents must be 3 numbers per body.*got shape \(1, 2\)"),
    (lambda s, m: s.add_box(C3[0], 0.1, material=m), r"box half_extents must be 3 numbers"),
    (lambda s, m: s.add_boxes(C3, (0.1, 0.1, 0.1), m, orientations=[1, 0, 0]),
     r"box orientations \(quaternions w, x, y, z\) must be 4 numbers per body"),
    (lambda s, m: s.add_capsules(C3, [0.01, 0.02], 0.05, m),
     r"capsule radii must be one number for all bodies or one per body \(3\), got shape \(2,\)"),
    (lambda s, m: s.add_capsules(C3, 0.01, [0.05, 0.05], m), r"capsule lengths must be one"),
    (lambda s, m: s.add_spheres([[0.5, 0.5, "a"]], 0.01, m), r"sphere centers must be numbers"),
], ids=["centers", "velocities", "angular_velocity", "radii_column", "half_extents_2",
        "half_extents_scalar", "orientation_3", "capsule_radii", "capsule_lengths", "text"])
def test_wrong_array_shapes_name_the_argument(call, match):
    """Arrays of the wrong shape in the adders: a ValueError naming the argument and the shape
    expected (they gave numpy's broadcast errors, an IndexError, or blamed the centers)."""
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)))
    m = sim.add_material("m", density=2500.0, restitution=0.5, collision_time=1e-3)
    with pytest.raises(ValueError, match=match):
        call(sim, m)
    assert sim.n_bodies == 0                  # nothing was added
    sim.add_spheres(C3, [0.01, 0.02, 0.03], m)           # the right shapes are fine
    sim.add_spheres(C3 + [0, 0.2, 0], 0.01, m, velocities=(1, 0, 0))
    sim.add_capsules(C3 + [0, -0.2, 0], 0.01, [0.02, 0.03, 0.04], m)
    sim.add_boxes(np.empty((0, 3)), np.empty((0, 3)), m)
    assert sim.n_bodies == 9


def test_run_refuses_a_callback_without_a_valid_every():
    """``run(n, callback=f)`` needs every >= 1 (without it the callback was silently never
    called; a negative every looped forever); every without a callback, fractional steps and
    a callback that cannot be called are refused too. A valid one is called on the multiples
    of every."""
    sim = parsim.Simulation(dt=1e-4)
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    sim.add_sphere((0, 0, 0), 0.1, m)
    calls = []
    for kwargs, match in ((dict(callback=calls.append), r"every \(the steps between two "
                                                          r"callback calls\) must be >= 1, got 0"),
                          (dict(callback=calls.append, every=-5), r"must be >= 1, got -5"),
                          (dict(callback=calls.append, every=2.5), r"whole number >= 1, got 2.5"),
                          (dict(callback=calls.append, every=True), r"whole number"),
                          (dict(every=5), r"every = 5 without a callback does nothing"),
                          (dict(callback=3, every=5), r"callback must be callable")):
        with pytest.raises(ValueError, match=match):
            sim.run(10, **kwargs)
    with pytest.raises(ValueError, match=r"steps must be a whole number >= 0, got 1.5"):
        sim.run(1.5)
    assert sim.step_count == 0 and calls == []
    sim.run(10, callback=lambda s: calls.append(s.step_count), every=4)
    sim.run(10.0)
    assert calls == [4, 8] and sim.step_count == 20


def test_thread_count_does_not_change_the_result_bitwise(monkeypatch):
    import numba

    import parsim.parallel

    monkeypatch.setattr(parsim.parallel, "PARALLEL_MIN", 0)    # threaded kernels even here

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.fail("this test needs numba with >= 2 threads (NUMBA_NUM_THREADS)")
    finals = []
    for threads in (1, 2):
        numba.set_num_threads(threads)
        try:
            sim = parsim.Simulation(dt=5e-5, gravity=(0, 0, -9.81),
                                    domain=((0, 0, 0), (3, 3, 6)), periodic=(True, True, False))
            m = sim.add_material("m", density=1000.0, restitution=0.5, collision_time=2e-3,
                                 friction=0.5, rolling_friction=0.01)
            sim.add_plane((0, 0, 0), (0, 0, 1), m)
            g = np.stack(np.meshgrid(np.arange(6), np.arange(6), np.arange(6), indexing="ij"),
                         -1).reshape(-1, 3)
            rng = np.random.default_rng(9)
            sim.add_spheres((g + 0.5) * 0.5, rng.uniform(0.2, 0.25, len(g)), m,
                            velocities=rng.uniform(-1, 1, (len(g), 3)))
            sim.run(800)
            finals.append(sim.state())
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    for k in ("position", "velocity", "angular_velocity", "orientation"):
        assert np.array_equal(finals[0][k], finals[1][k]), k


def test_hertz_contact_duration_matches_hertz_theory():
    """F = kn sqrt(R_eff) delta^1.5 (LAMMPS gran/hertz/history), i.e. E* = 3 kn / 4:
    t_c = 2.868 (m_eff^2 / (R_eff E*^2 v))^(1/5) for an undamped head-on collision."""
    kn, v = 1e6, 0.5
    sim = parsim.Simulation(dt=1e-6, allow_large_dt=True)
    m = sim.add_material("m", density=1000.0, stiffness=kn, damping=0.0, friction=0.0,
                         model="hertz")
    sim.add_sphere((0, 0, 0), 0.05, m, velocity=(v / 2, 0, 0))
    sim.add_sphere((0.1001, 0, 0), 0.05, m, velocity=(-v / 2, 0, 0))
    steps_in_contact = 0
    for _ in range(20000):
        sim.step()
        steps_in_contact += sim.n_contacts
    mass = 1000.0 * 4 / 3 * math.pi * 0.05**3
    meff, reff, estar = mass / 2, 0.025, 0.75 * kn
    tc = 2.868 * (meff**2 / (reff * estar**2 * v)) ** 0.2
    assert steps_in_contact * sim.dt == pytest.approx(tc, rel=1e-2)
    assert sim.state()["velocity"][1, 0] == pytest.approx(v / 2, rel=1e-4)   # elastic


def test_hertz_needs_stiffness_form_and_matching_partner():
    sim = parsim.Simulation(dt=1e-5)
    with pytest.raises(ValueError, match="hertz model takes stiffness and damping"):
        sim.add_material("h", density=1.0, restitution=0.5, collision_time=1e-3, model="hertz")
    a = sim.add_material("a", density=1.0, stiffness=1e5, damping=1.0, model="hertz")
    b = sim.add_material("b", density=1.0, stiffness=1e5, damping=1.0)
    sim.add_sphere((0, 0, 0), 0.1, a)
    sim.add_sphere((1, 0, 0), 0.1, b)
    with pytest.raises(ValueError, match="different contact models"):
        sim.run(1)


def test_a_time_step_changed_between_runs_is_checked_again():
    """Setting ``sim.dt`` (or a stiffer pair) between runs goes through the stability guard at
    the next run, as at the first (it was skipped: a sphere at rest was launched)."""
    sim = parsim.Simulation(dt=1e-5, gravity=(0, 0, -9.81))
    m = sim.add_material("m", density=2500.0, restitution=0.5, collision_time=1e-3)
    floor = sim.add_material("floor", density=2500.0, restitution=0.5, collision_time=1e-3)
    sim.add_plane((0, 0, 0), (0, 0, 1), floor)
    sim.add_sphere((0, 0, 0.01), 0.01, m)
    sim.run(10)
    sim.dt = 2e-3
    with pytest.raises(parsim.SimulationError, match=r"dt = 0.002 s exceeds 0.1 x the smallest"):
        sim.run(10)
    assert sim.step_count == 10
    sim.dt = 1e-5
    sim.run(10)
    sim.set_interaction(m, floor, restitution=0.5, collision_time=1e-5)
    with pytest.raises(parsim.SimulationError, match=r"materials m/floor \(wall\)"):
        sim.run(10)
    for bad in (0.0, -1e-5, float("nan"), "1e-5x", True):
        with pytest.raises(ValueError, match="dt must be a positive"):
            sim.dt = bad
    assert sim.dt == 1e-5 and sim.step_count == 20


def test_flags_must_be_booleans():
    """``periodic``, ``fixed`` and ``allow_large_dt`` take True or False only ("false" is a
    true string: it made a periodic box or a fixed body); ``periodic=True`` means every axis."""
    for periodic in (("false", "false", "false"), (1, 0, 0), "xyz", 3):
        with pytest.raises(ValueError, match="periodic must be"):
            parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)), periodic=periodic)
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)), periodic=True)
    assert sim.periodic.tolist() == [True, True, True]
    with pytest.raises(ValueError, match="allow_large_dt must be True or False, got 'no'"):
        parsim.Simulation(dt=1e-4, allow_large_dt="no")
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    with pytest.raises(ValueError, match="sphere fixed must be True or False, got 'false'"):
        sim.add_sphere((0.5, 0.5, 0.5), 0.1, m, fixed="false")
    sim.add_sphere((0.5, 0.5, 0.5), 0.1, m, fixed=np.bool_(False))
    assert sim.state()["flags"].tolist() == [0]


@pytest.mark.mpi(min_size=2)
def test_a_collective_add_with_different_bodies_per_rank_is_refused(comm):
    """A collective add whose arguments differ between the ranks (unseeded random numbers)
    lost or duplicated bodies silently; now every rank raises the same error and nothing is
    added. The same arguments everywhere are fine."""
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (1, 1, 1)), comm=comm)
    m = sim.add_material("m", density=1000.0, restitution=0.8, collision_time=1e-3)
    rank = comm.Get_rank()
    centers = np.random.default_rng(rank).uniform(0.1, 0.9, (40, 3))
    with pytest.raises(ValueError, match=r"collective add_sphere\(s\) got different arguments "
                                         r"on ranks \[1"):
        sim.add_spheres(centers, 0.01, m)
    with pytest.raises(ValueError, match=r"different arguments"):
        sim.add_sphere((0.5, 0.5, 0.5), 0.01 * (1 + rank), m)
    assert sim.count_bodies() == 0 and sim.next_uid == 0
    sim.add_spheres(np.random.default_rng(7).uniform(0.1, 0.9, (40, 3)), 0.01, m)
    assert sim.count_bodies() == 40


def test_a_body_far_away_does_not_grow_the_others_candidate_lists():
    """The hash grid's rounding hair is per body: one sphere 1e7 m out in unbounded space
    leaves the broad phase's pairs of a cluster of millimetre grains as they are (with one hair
    for all, from the largest coordinate, every box grew by 1 cm and every pair of the cluster
    was found, to be filtered out again)."""
    def cluster(far: bool):
        sim = parsim.Simulation(dt=1e-6, skin=2e-4)
        m = sim.add_material("m", density=2500.0, restitution=0.5, collision_time=1e-4)
        g = np.stack(np.meshgrid(*[np.arange(7)] * 3, indexing="ij"), -1).reshape(-1, 3)
        pos = g * 2.1e-3 + np.random.default_rng(3).uniform(-5e-5, 5e-5, (len(g), 3))
        sim.add_spheres(pos, np.full(len(pos), 1e-3), m)
        if far:
            sim.add_sphere((1e7, 0.0, 0.0), 1e-3, m, velocity=(1e3, 0.0, 0.0))
        sim.run(5)
        return sim
    near, far = cluster(False), cluster(True)
    found = [len(sim.nl.bp.pairs()) for sim in (near, far)]   # the grid's pairs, unfiltered
    # each grain's 26 lattice neighbours at most (13 pairs per grain), not all 343 * 342 / 2
    assert found[0] == found[1] and found[0] <= 13 * 343, found
    assert far.nl.n_pairs == near.nl.n_pairs
    s, t = near.state(), far.state()
    for k in ("position", "velocity", "angular_velocity"):
        assert np.array_equal(s[k], t[k][:-1]), k
