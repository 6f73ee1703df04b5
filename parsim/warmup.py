"""Compile (or load from the cache) the kernels of a run in one process.

A parallel run lets rank 0 call :func:`compile_kernels` while the other ranks wait, after which
every rank only loads compiled code: one compile instead of one per rank (several ranks saving
one kernel at once crashed numba before :mod:`parsim.numba_cache` locked the cache). With a warm
cache this takes about a second.
"""

from __future__ import annotations

import tomllib
import warnings

from . import halo
from .config import build

_SCENE = """
[simulation]
dt = 1e-4
steps = 30
gravity = [0.0, 0.0, -9.81]
skin = 0.02

[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.0, 1.0, 1.0]
periodic = [true, true, false]
walls = true

[[materials]]
name = "a"
density = 1000.0
restitution = 0.5
collision_time = 1e-3
friction = 0.3
rolling_friction = 0.01

[[materials]]
name = "b"
density = 2000.0
restitution = 0.8
collision_time = 1e-3

[[bodies]]
kind = "random"
shape = "sphere"
material = "a"
radius = 0.05
region = [[0.1, 0.1, 0.1], [0.9, 0.9, 0.5]]
count = 60
random_velocity = 1.0

[[bodies]]
kind = "rain"
shape = "box"
material = "b"
half_extents = [0.04, 0.05, 0.03]
region = [[0.1, 0.1, 0.76], [0.9, 0.9, 0.92]]
count = 3
every = 10
total = 6

[[bodies]]
kind = "lattice"
shape = "capsule"
material = "a"
radius = 0.03
length = 0.08
region = [[0.2, 0.2, 0.5], [0.8, 0.8, 0.7]]
spacing = 0.2
"""


def compile_kernels() -> None:
    """Run a tiny serial scene with every shape, two materials, periodic images, walls and
    a pour, step by step, then its spheres alone in one call (the joint half-steps), a box
    overlapping a plane at the start (the overlap warning's kernel), plus the halo kernels.
    Warnings of these scenes are not shown."""
    halo.warm_up()
    scene = tomllib.loads(_SCENE)
    with warnings.catch_warnings():
        # the scene is the warm-up's own: nothing in it concerns the user's run
        warnings.simplefilter("ignore")
        _run_scene(scene)


def _run_scene(scene) -> None:
    from .config import pour

    cfg = build(scene, "<warm-up>", comm=None)
    sim = cfg.sim
    for k in range(cfg.steps):
        for rain in cfg.rains:
            if rain.remaining and sim.step_count % rain.every == 0 and sim.step_count:
                pour(sim, rain)
        sim.step()
    sim.state()
    sim.kinetic_energy()
    sim.count_contacts()
    # spheres only, several steps per call: the joint half-steps of sphere runs
    spheres = build(dict(scene, bodies=scene["bodies"][:1]), "<warm-up>", comm=None)
    spheres.sim.run(cfg.steps)
    # a box pressed into a plane at the start of a run: the overlap check's narrow phase
    # (contacts_general.deepest_overlaps), which the scene above, apart at its start, skips
    from .simulation import Simulation

    sim = Simulation(dt=1e-5, domain=((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)), comm=None)
    m = sim.add_material("a", density=1000.0, restitution=0.5, collision_time=1e-3)
    sim.add_plane((0.0, 0.0, 0.0), (0.0, 0.0, 1.0), m)
    sim.add_box((0.5, 0.5, 0.09), (0.1, 0.1, 0.1), material=m)
    sim.run(1)
