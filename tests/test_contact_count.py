"""`Simulation.count_contacts()` counts every physical contact once, also across periodic seams,
where the pair is evaluated twice (once per periodic copy): equal to a brute-force count."""

from __future__ import annotations

import numpy as np

from parsim import Simulation


def brute_force_contacts(s, box, lo, hi, periodic) -> int:
    """Sphere pairs closer than the sum of their radii (minimum image on periodic axes), plus
    spheres reaching through a wall of a non-periodic axis."""
    x, r = s["position"], s["params"][:, 0]
    d = x[:, None, :] - x[None, :, :]
    for k in range(3):
        if periodic[k]:
            d[..., k] -= box[k] * np.round(d[..., k] / box[k])
    dist = np.linalg.norm(d, axis=-1)
    i, j = np.triu_indices(x.shape[0], 1)
    n = int(np.count_nonzero(dist[i, j] < r[i] + r[j]))
    for k in range(3):
        if not periodic[k]:
            n += int(np.count_nonzero(x[:, k] - r < lo[k]) + np.count_nonzero(x[:, k] + r > hi[k]))
    return n


def test_contacts_across_periodic_seams_are_counted_once():
    L = 1.0
    lo, hi, periodic = np.zeros(3), np.full(3, L), (True, True, False)
    sim = Simulation(dt=1e-5, gravity=(0, 0, -9.81), domain=(lo, hi), periodic=periodic,
                     skin=0.02)
    sim.add_material("grain", density=1000.0, restitution=0.5, collision_time=1e-3, friction=0.3)
    rng = np.random.default_rng(3)
    n = 400
    c = rng.uniform(0.0, L, size=(n, 3))
    c[:, 2] = rng.uniform(0.03, 0.5, size=n)
    c[: n // 4, 0] = rng.uniform(-0.03, 0.03, size=n // 4) % L      # crowd the x seam
    radius = rng.uniform(0.03, 0.06, size=n)
    sim.add_spheres(c, radius, "grain")
    sim.add_plane((0, 0, 0), (0, 0, 1), "grain")
    sim.add_plane((0, 0, L), (0, 0, -1), "grain")
    sim.run(1)                       # forces of step 1 evaluated at the positions of its end
    s = sim.state()
    spheres = {k: v[s["shape"] == 0] for k, v in s.items()}
    expected = brute_force_contacts(spheres, hi - lo, lo, hi, periodic)
    assert expected > 100                                    # many contacts, some across seams
    assert sim.count_contacts() == expected
