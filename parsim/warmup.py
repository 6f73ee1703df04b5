"""Compile (or load from the cache) the kernels of a run before its ranks start stepping.

A parallel run lets rank 0 call :func:`compile_kernels` while the other ranks wait, after which
every rank only loads compiled code: one compile instead of one per rank (several ranks saving
one kernel at once crashed numba before :mod:`parsim.numba_cache` locked the cache). Where a
second core is free, rank 1 meanwhile compiles the narrow phase of boxes and capsules and the
integrator of rotating bodies (:func:`compile_helper_part`), about 45 % of the compile time,
which rank 0 then loads instead of compiling. With a warm cache this takes about a second.
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
skin = 0.004          # below what the fastest spheres move in 30 steps: a rebuild mid-run

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
    """Run tiny serial scenes that reach every kernel of a run: the halo kernels; the spheres
    of the scene below, several steps per call (the joint half-steps), rebuilding mid-run, and
    on their arrays the contact kernels that large ranks take (:func:`_far_listing`);
    then the whole scene, step by step, with every shape, two materials, periodic images,
    walls and a pour (the narrow phase of boxes and capsules comes last, so that a helper's
    :func:`compile_helper_part` may have saved it by then); the springs a checkpoint or a
    migration takes along; a box overlapping a plane at the start (the overlap warning's
    kernel); both builds of the hash grid's detection; a hash grid losing half its bodies at
    once; spheres deleted by outflow. The
    threaded builds are left to their first use (:mod:`parsim.compile_watch`). Warnings of
    these scenes are not shown."""
    scene = tomllib.loads(_SCENE)
    with warnings.catch_warnings():
        # the scenes are the warm-up's own: nothing in them concerns the user's run
        warnings.simplefilter("ignore")
        halo.warm_up()
        spheres = dict(scene, bodies=scene["bodies"][:1])
        sim = build(spheres, "<warm-up>", comm=None).sim
        sim.run(30)
        _far_listing(sim)
        _screens(sim)
        sim = _run_scene(scene)
        sim.nl.export_touching()           # a checkpoint's springs (and a migration's)
        _pressed_box()
        _detection_builds()
        _bulk_removal()
        _outflow()


def compile_helper_part() -> None:
    """What a second process compiles while :func:`compile_kernels` runs: the kernels of
    rotating bodies (the narrow phase of boxes and capsules, the overlap check, the
    integrator's two halves: about 45 of the 100 s of a cold compile here), called on nothing
    with a one-box simulation's arrays. :func:`compile_kernels` reaches them last and then
    loads them from the cache, if this process has saved them by then (else it compiles them
    too: the same code, saved twice)."""
    from .simulation import Simulation

    sim = Simulation(dt=1e-4, domain=((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)), comm=None)
    m = sim.add_material("a", density=1000.0, restitution=0.5, collision_time=1e-3)
    sim.add_box((0.5, 0.5, 0.5), (0.1, 0.1, 0.1), material=m)
    sim._compile_rotating_kernels()


def _run_scene(scene):
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
    return sim


def _far_listing(sim) -> None:
    """The kernels that ranks of :data:`parsim.contacts.FAR_ROWS` bodies or more take (they ask
    for rows ahead), which the small scenes never reach: the listing of the pairs in play, the
    force kernel on them and the sums, called on the arrays of ``sim``, a scene of spheres that
    has run, as ``Simulation._forces`` calls them (without changing a spring: ``update``
    False; the forces it leaves are the sums of its rows)."""
    import numpy as np

    from .contacts import _accumulate_far, _in_play_far, _pair_forces_far

    st, nl = sim.st, sim.nl
    n = nl.simple_idx.size
    sel = np.empty(n, dtype=np.int64)
    m = _in_play_far(n, n == nl.n_pairs, nl.simple_idx, nl.pa, nl.pb, nl.hist, st.shape,
                     st.params, st.position, st.image, sim.box, nl.live, nl.touching, nl.gap,
                     0.0, sel)
    _pair_forces_far(sel, m, False, nl.pa, nl.pb, nl.hist, st.shape, st.params, st.flags,
                     st.material, st.mass, st.position, st.velocity, st.angular_velocity,
                     st.image, sim.table, sim.box, sim.dt, nl.shear, nl.touching, nl.pout,
                     nl.live, False, False, st.n_owned, st.force, st.torque, True)
    no = st.n_owned
    _accumulate_far(no, nl.ptr, nl.entry, nl.live, False, nl.touched, nl.pout, st.flags,
                    st.mass, sim.gravity, st.force, st.torque, sim._keep_rows, nl.kept_gravity,
                    nl.pa, nl.pb, nl.listed, nl.n_listed)


def _screens(sim) -> None:
    """Both load screens of the joint pass (``Simulation._screen_loads``: the rows the sums
    wrote, or all of them); which one a short scene reaches depends on its contacts."""
    from . import integrator as I

    st, nl = sim.st, sim.nl
    I.screen_rows(nl.listed[0], 0, st.force, st.torque)
    I.screen_loads(st.n_owned, st.force, st.torque)


def _detection_builds() -> None:
    """Both builds of the hash grid's detection (``hashgrid_detect``): a grid tries the one
    that sweeps sparse grids body by body first and every ``FLAT_RECHECK`` calls, so a run
    may reach either at any rebuild. A dense grid runs the first, then the plain one."""
    import numpy as np

    from .broadphase import HierarchicalHashGrid

    bp = HierarchicalHashGrid()
    c = np.random.default_rng(0).uniform(0.0, 2.0, (200, 3))
    bp.add(np.arange(200, dtype=np.int64), c - 0.25, c + 0.25)
    bp.pairs()
    bp.pairs()


def _bulk_removal() -> None:
    """A hash grid losing many of its bodies at once (outflow deleting a layer): the removal
    in descending slot order (``broadphase.base._descending``), which the scenes never reach."""
    import numpy as np

    from .broadphase import HierarchicalHashGrid

    bp = HierarchicalHashGrid()
    ids = np.arange(128, dtype=np.int64)
    lo = np.zeros((128, 3))
    lo[:, 0] = ids
    bp.add(ids, lo, lo + 0.5)
    bp.remove(ids[::2])


def _outflow() -> None:
    """Spheres falling out through the walled floor under ``outflow = "delete"``: the
    deletion of owned bodies at a rebuild."""
    from .simulation import Simulation

    sim = Simulation(dt=1e-3, gravity=(0.0, 0.0, -9.81), outflow="delete",
                     domain=((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)), comm=None)
    m = sim.add_material("a", density=1000.0, restitution=0.5, collision_time=1e-2)
    for k in range(4):
        sim.add_sphere((0.2 + 0.2 * k, 0.5, 0.02), 0.01, m, velocity=(0.0, 0.0, -2.0))
    sim.run(20)


def _pressed_box() -> None:
    """A box pressed into a plane at the start of a run: the overlap check's narrow phase
    (contacts_general.deepest_overlaps), which the scenes, apart at their start, skip."""
    from .simulation import Simulation

    sim = Simulation(dt=1e-5, domain=((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)), comm=None)
    m = sim.add_material("a", density=1000.0, restitution=0.5, collision_time=1e-3)
    sim.add_plane((0.0, 0.0, 0.0), (0.0, 0.0, 1.0), m)
    sim.add_box((0.5, 0.5, 0.09), (0.1, 0.1, 0.1), material=m)
    sim.run(1)
