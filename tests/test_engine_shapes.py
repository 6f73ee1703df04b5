"""Engine checks with boxes and capsules (narrow phase of every shape pair in a time step)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import parsim
from parsim.bodies import FIXED


def _sim(dt=2e-5, **kw):
    sim = parsim.Simulation(dt=dt, gravity=(0, 0, -9.81), **kw)
    m = sim.add_material("m", density=1000.0, restitution=0.3, collision_time=5e-4, friction=0.5)
    return sim, m


def test_box_on_plane_stays_at_rest_without_drift():
    sim, m = _sim()
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    he = (0.1, 0.07, 0.05)
    sim.add_box((0.3, -0.2, 0.05), he, material=m)
    sim.run(10000)                                         # 0.2 s
    s = sim.state()
    # static overlap of 4 springs carrying m g: z = hz - m g / (4 kn) within a few 1e-6
    assert np.abs(s["velocity"][1]).max() < 1e-6
    assert np.abs(s["angular_velocity"][1]).max() < 1e-5
    assert abs(s["position"][1, 0] - 0.3) < 1e-9 and abs(s["position"][1, 1] + 0.2) < 1e-9
    assert 0.05 - 1e-3 < s["position"][1, 2] < 0.05
    assert np.allclose(s["orientation"][1], (1, 0, 0, 0), atol=1e-7)


def test_capsule_lying_on_plane_stays_lying():
    sim, m = _sim()
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    sim.add_capsule((0, 0, 0.05), 0.05, 0.3, material=m)
    sim.run(10000)
    s = sim.state()
    assert np.abs(s["velocity"][1]).max() < 1e-6
    assert np.abs(s["angular_velocity"][1]).max() < 1e-5
    assert np.allclose(s["orientation"][1], (1, 0, 0, 0), atol=1e-7)   # axis still horizontal


@pytest.mark.parametrize("mu", [0.3, 0.6])
def test_block_sliding_on_plane_stops_after_v2_over_2mug(mu):
    sim = parsim.Simulation(dt=2e-5, gravity=(0, 0, -9.81))
    m = sim.add_material("m", density=1000.0, restitution=0.3, collision_time=5e-4, friction=mu)
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    he = (0.05, 0.05, 0.02)
    sim.add_box((0, 0, 0.02 - 2e-6), he, material=m)
    sim.run(2000)                                          # settle the static overlap
    v0 = 1.0
    sim.st.velocity[1, 0] = v0
    x0 = sim.state()["position"][1, 0]
    sim.run(int(1.2 * v0 / (mu * 9.81) / sim.dt))
    s = sim.state()
    assert abs(s["velocity"][1, 0]) < 1e-3
    assert s["position"][1, 0] - x0 == pytest.approx(v0**2 / (2 * mu * 9.81), rel=2e-2)


def test_box_stack_and_capsule_on_box_come_to_rest():
    sim, m = _sim()
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    sim.add_box((0, 0, 0.05), (0.1, 0.1, 0.05), material=m)
    sim.add_box((0.01, 0, 0.15), (0.08, 0.08, 0.05), material=m)
    sim.add_capsule((0, 0.01, 0.23), 0.03, 0.1, material=m)
    sim.add_sphere((0.05, -0.05, 0.235), 0.03, material=m)   # on the upper box, beside
    sim.run(25000)
    s = sim.state()
    assert np.abs(s["velocity"][1:]).max() < 1e-3
    z = s["position"][1:, 2]
    assert z[0] < z[1] < z[2] and z[1] < z[3]              # nothing fell through
    assert z[2] == pytest.approx(0.23, abs=2e-3) and z[3] == pytest.approx(0.23, abs=2e-3)
    assert z[1] == pytest.approx(0.15, abs=2e-3)


def test_dropped_box_bounces_and_settles_flat_never_penetrates():
    sim, m = _sim()
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    q = np.array([math.cos(0.3), math.sin(0.3) / math.sqrt(2), math.sin(0.3) / math.sqrt(2), 0])
    sim.add_box((0, 0, 0.3), (0.1, 0.06, 0.04), orientation=q, material=m,
                angular_velocity=(1, 2, 0))
    lowest = np.inf
    touched = False     # a corner has reached the floor
    rebound = 0.0       # the largest upward speed of the centre after that
    from parsim.rotation import quat_matrix
    corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
    for _ in range(500):
        sim.run(100)
        st = sim.st
        R = np.array(quat_matrix(*st.orientation[1])).reshape(3, 3)
        world = st.position[1] + (corners * st.params[1]) @ R.T
        lowest = min(lowest, world[:, 2].min())
        if touched:
            rebound = max(rebound, st.velocity[1, 2])
        touched |= world[:, 2].min() < 1e-3
    assert lowest > -0.01                                 # penetration stays small
    assert touched and rebound > 0.05, rebound            # it bounced off the floor
    assert np.abs(sim.state()["velocity"][1]).max() < 1e-3
    # at rest a box lies on a face: its lowest corner height ~ 0 and 4 corners touch
    assert abs(world[:, 2].min()) < 1e-3
    assert np.sum(world[:, 2] < 1e-3) == 4


def _mixed(skin, n=4):
    sim = parsim.Simulation(dt=2e-5, gravity=(0, 0, -9.81), domain=((0, 0, 0), (1, 1, 2)),
                            periodic=(True, True, False), skin=skin)
    m = sim.add_material("m", density=1000.0, restitution=0.5, collision_time=5e-4, friction=0.4)
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    rng = np.random.default_rng(5)
    g = np.stack(np.meshgrid(np.arange(n), np.arange(n), np.arange(n), indexing="ij"),
                 -1).reshape(-1, 3)
    pos = (g + 0.5) * 0.25 + (0, 0, 0.02)
    pos[:, 2] *= 0.8
    q = rng.standard_normal((len(pos), 4))
    q /= np.linalg.norm(q, axis=1)[:, None]
    v = rng.uniform(-1.5, 1.5, pos.shape)
    k = len(pos) // 3
    sim.add_spheres(pos[:k], rng.uniform(0.06, 0.1, k), m, velocities=v[:k])
    sim.add_boxes(pos[k:2 * k], rng.uniform(0.04, 0.07, (k, 3)), m, orientations=q[k:2 * k],
                  velocities=v[k:2 * k])
    rest = len(pos) - 2 * k
    sim.add_capsules(pos[2 * k:], rng.uniform(0.03, 0.05, rest), rng.uniform(0.05, 0.1, rest), m,
                     orientations=q[2 * k:], velocities=v[2 * k:])
    return sim


def _mechanical_energy(sim):
    """Kinetic + gravitational potential energy of the movable bodies (gravity -9.81 z)."""
    s = sim.state()
    free = (s["flags"] & FIXED) == 0
    return sim.kinetic_energy() + 9.81 * (s["mass"][free] * s["position"][free, 2]).sum()


def test_mixed_shapes_are_skin_invariant_bitwise_and_lose_energy():
    """Both skins give the same bits; the collisions (e = 0.5, mu = 0.4) only ever take
    energy: kinetic + potential never rises above its start (rounding aside), and here, where
    the bodies fall little in 0.08 s, the kinetic energy stays below its start (103.5 J) too
    (a damping of the wrong sign raised it to 161 J)."""
    finals = []
    for skin in (0.0, 0.02):
        sim = _mixed(skin)
        k0, e0 = sim.kinetic_energy(), _mechanical_energy(sim)
        contacts = 0
        for _ in range(10):
            sim.run(400)
            contacts += sim.n_contacts
            assert sim.nl.general                          # boxes and capsules in contact
            assert _mechanical_energy(sim) <= e0 * (1 + 1e-9)
            assert sim.kinetic_energy() <= k0
        assert contacts > 0
        assert _mechanical_energy(sim) < 0.97 * e0         # 446.1 -> 418.9 J
        assert sim.kinetic_energy() < 0.95 * k0            # 103.5 -> 95.9 J
        finals.append(sim.state())
    for k in ("position", "velocity", "angular_velocity", "orientation"):
        assert np.array_equal(finals[0][k], finals[1][k]), k


def test_rotating_box_changes_aabb_and_grid_in_the_hash_grid():
    """A long box spinning about z sweeps AABBs of changing size; contacts are still found."""
    sim = parsim.Simulation(dt=2e-5, skin=0.0)
    m = sim.add_material("m", density=1000.0, restitution=0.5, collision_time=5e-4, friction=0.0)
    sim.add_box((0, 0, 0), (0.5, 0.02, 0.02), material=m, angular_velocity=(0, 0, 20.0))
    sim.add_sphere((0.0, 0.4, 0.0), 0.05, material=m)     # hit only by the rotating arm
    sim.run(5000)                                          # a quarter turn is 0.0785 s
    assert np.linalg.norm(sim.state()["velocity"][1]) > 0.1
