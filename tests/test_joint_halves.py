"""The joint pass (a step's second half kick + the next step's first half in one pass over the
arrays, ``integrator.both_halves``) changes no bit and no error report.

``Simulation.run(n)`` takes it between the steps of one call when every owned movable body is a
sphere; ``step()`` never does (each call ends with the separate second half). So ``run(n)`` and
``n`` calls of ``step()`` must give the same bits, and a failure (a non-finite force, a body
leaving the domain) must stop both at the same step with the same state, on one rank and on
several (where one rank fails while the others were about to take the joint pass).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import parsim
from parsim import integrator as I
from parsim.bodies import FIXED
from parsim.shapes import BOX, SPHERE
from mpi_wait import quiet_barrier

FIRST = ("flags", "shape", "inv_mass", "inertia", "inv_inertia", "iso_inv_inertia",
         "bounding_radius", "position",
         "orientation", "velocity", "angular_velocity", "force", "torque", "ref_position",
         "ref_orientation")
SECOND = ("flags", "shape", "inv_mass", "inertia", "inv_inertia", "iso_inv_inertia",
          "orientation", "velocity",
          "angular_velocity", "force", "torque", "position")
JOINT = ("flags", "shape", "inv_mass", "iso_inv_inertia", "position", "orientation", "velocity",
         "angular_velocity", "force", "torque", "ref_position")
LO, HI, WALLED = np.full(3, -10.0), np.full(3, 10.0), np.array([True, False, True])


def _spheres(n, seed):
    """Movable spheres turning slowly, not at all and fast (|w| dt > 1e-2 at dt = 1e-3), fixed
    spheres and fixed boxes, in a mixed order."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1)[:, None]
    ii = np.repeat(rng.uniform(5.0, 20.0, (n, 1)), 3, axis=1)     # isotropic, per body
    s = dict(flags=np.zeros(n, np.uint8), shape=np.full(n, SPHERE, np.int8),
             inv_mass=rng.uniform(0.5, 2.0, n), inertia=1.0 / ii,
             inv_inertia=ii, iso_inv_inertia=ii[:, 0].copy(),
             bounding_radius=rng.uniform(0.1, 1.0, n),
             position=rng.uniform(-5, 5, (n, 3)), orientation=q,
             velocity=rng.uniform(-1, 1, (n, 3)), angular_velocity=rng.uniform(-5, 5, (n, 3)),
             force=rng.uniform(-1, 1, (n, 3)), torque=rng.uniform(-1, 1, (n, 3)))
    s["ref_position"] = s["position"] + rng.normal(scale=0.01, size=(n, 3))
    s["ref_orientation"] = s["orientation"].copy()
    kind = rng.integers(0, 5, n)
    s["angular_velocity"][kind == 1] = 0.0
    s["torque"][kind == 1] = 0.0
    s["angular_velocity"][kind == 2] *= 400.0
    s["flags"][kind == 3] = FIXED
    s["flags"][kind == 4] = FIXED
    s["shape"][kind == 4] = BOX
    return s


def _bits_equal(a, b):
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        if x.dtype == np.float64:
            x, y = x.view(np.uint64), y.view(np.uint64)
        assert np.array_equal(x, y), k


@pytest.mark.parametrize("dt", [1e-4, 1e-3])
@pytest.mark.parametrize("build", [0, 1], ids=["serial", "threaded"])
def test_joint_pass_gives_the_bits_of_the_two_halves(dt, build):
    n = 5000
    s = _spheres(n, seed=3)
    ref = {k: v.copy() for k, v in s.items()}
    assert tuple(int(x) for x in I.second_half[0](n, dt, *[ref[k] for k in SECOND], LO, HI,
                                                  WALLED)) == (-1, 0)
    moved = I.first_half[0](n, dt, *[ref[k] for k in FIRST])
    got = {k: v.copy() for k, v in s.items()}
    m, bad, odd, speed = I.both_halves[build](n, dt, *[got[k] for k in JOINT], LO, HI, WALLED)
    assert (m, bad, odd) == (moved, 0, 0)
    _bits_equal(got, ref)
    v, free = ref["velocity"], ref["flags"] == 0
    assert speed == np.sqrt((v[:, 0] * v[:, 0] + v[:, 1] * v[:, 1] + v[:, 2] * v[:, 2])[free].max())
    if dt == 1e-3:       # the fast spheres took the serial trigonometric branch
        fast = (np.linalg.norm(ref["angular_velocity"], axis=1) * dt > 1e-2)
        assert np.count_nonzero(fast & (s["flags"] == 0)) > 0


def test_joint_pass_counts_what_the_exact_check_would_report():
    n = 300
    s = _spheres(n, seed=4)
    s["angular_velocity"][:] = 0.0
    s["flags"][[20, 30, 40]] = 0               # movable spheres
    s["shape"][[20, 30, 40]] = SPHERE
    s["velocity"][7] = [np.nan, 0, 0]          # non-finite velocity
    s["torque"][20] = [0, np.inf, 0]           # non-finite angular velocity after the kicks
    s["position"][30] = [0, 0, 9.9999999]      # drifts out through z = 10 (walled)
    s["velocity"][30] = [0, 0, 5.0]
    s["position"][40] = [0, 9.9999999, 0]      # drifts past y = 10: not walled, not counted
    s["velocity"][40] = [0, 5.0, 0]
    got = {k: v.copy() for k, v in s.items()}
    _, bad, _, _ = I.both_halves[0](n, 1e-4, *[got[k] for k in JOINT], LO, HI, WALLED)
    assert bad == 3
    assert I.count_unchecked(n, got["flags"], got["position"], got["velocity"],
                             got["angular_velocity"], LO, HI, WALLED)[0] == 3
    assert I.screen_loads(n, s["force"], s["torque"])[0] == 1
    s["force"][50] = [1e308, 0, 0]             # finite parts whose sum overflows: counted
    s["torque"][50] = [1e308, 0, 0]
    assert I.screen_loads(n, s["force"], s["torque"])[0] == 2


@pytest.mark.parametrize("dt", [1e-4, 1e-2])
@pytest.mark.parametrize("seed", range(4))
def test_drift_bound_bounds_the_next_displacement(dt, seed):
    """The displacement the joint pass computes is never above the bound made from the
    previous drift's displacement, speed (count_unchecked) and largest acceleration (which
    Simulation bounds from screen_loads), also with large forces and bodies far from their
    reference poses; for a body moving straight away from its reference pose it is tight."""
    n = 4000
    s = _spheres(n, seed=10 + seed)
    rng = np.random.default_rng(seed)
    s["force"] *= rng.choice([1.0, 1e3, 1e6], size=(n, 1))
    s["position"] += rng.normal(scale=0.2, size=(n, 3))
    # body 0 (a movable sphere) is the farthest from its reference pose, the fastest and the
    # most accelerated, all away from its reference: the bound is tight for it
    away = np.array([0.6, -0.48, 0.64])
    s["flags"][0], s["shape"][0], s["inv_mass"][0] = 0, SPHERE, 2.0
    s["position"][0] = s["ref_position"][0] + 2.0 * away
    s["velocity"][0] = 3.0 * away / dt * 1e-3
    s["force"][0] = 8e6 * away
    moved0 = I.first_half[0](n, dt, *[s[k] for k in FIRST])
    bad, speed = I.count_unchecked(n, s["flags"], s["position"], s["velocity"],
                                   s["angular_velocity"], LO, HI, np.zeros(3, np.bool_))
    assert bad == 0
    v, free = s["velocity"], s["flags"] == 0
    assert speed == np.sqrt((v[:, 0] * v[:, 0] + v[:, 1] * v[:, 1] + v[:, 2] * v[:, 2])[free].max())
    bad, fmax = I.screen_loads(n, s["force"], s["torque"])
    assert bad == 0
    assert fmax == np.abs(s["force"]).max()
    f = s["force"]
    accel = np.sqrt((f[:, 0] * f[:, 0] + f[:, 1] * f[:, 1] + f[:, 2] * f[:, 2])
                    * s["inv_mass"] ** 2)[free].max()
    assert I.SQRT3_UP * fmax * s["inv_mass"][free].max() >= accel   # how Simulation bounds it
    bound = I.drift_bound(moved0, speed, accel, dt, 1e-15 * (1.0 + 10.0))
    moved1, _, _, _ = I.both_halves[0](n, dt, *[s[k] for k in JOINT], LO, HI, WALLED)
    assert bound * (1.0 - 1e-9) < moved1 <= bound


def test_joint_pass_reports_a_movable_non_sphere():
    s = _spheres(100, seed=5)
    s["flags"][10] = 0
    s["shape"][10] = BOX
    s["angular_velocity"][10] = 1.0            # not a slow sphere: left to the serial loop
    _, _, odd, _ = I.both_halves[0](100, 1e-4, *[s[k] for k in JOINT], LO, HI, WALLED)
    assert odd == 1


def add_lattice(sim, n, jitter, radii, speed, seed):
    """n^3 spheres of material "g" on a lattice of spacing 0.5 (first centre at 0.25), each
    moved by up to ``jitter``, radii uniform in ``radii``, velocities normal with deviation
    ``speed``, spins normal with deviation 20."""
    rng = np.random.default_rng(seed)
    g = (np.arange(n) + 0.5) * 0.5
    c = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
    c += rng.uniform(-jitter, jitter, c.shape)
    sim.add_spheres(c, rng.uniform(*radii, c.shape[0]), "g",
                    velocities=rng.normal(0, speed, c.shape),
                    angular_velocities=rng.normal(0, 20.0, c.shape))


def _pile(comm=None, blocks=None, periodic=False, box=False, planes=True, seed=1):
    """Colliding spheres (and optionally one small capsule in a gap) in [0, 3]^3 with gravity
    and walls (planes unless ``planes=False``), or periodic without gravity."""
    per = (periodic,) * 3
    sim = parsim.Simulation(dt=1e-4, gravity=(0, 0, 0) if periodic else (0, 0, -9.81),
                            domain=((0, 0, 0), (3, 3, 3)), periodic=per, skin=0.04,
                            comm=comm, blocks=blocks)
    sim.add_material("g", density=1000.0, restitution=0.6, collision_time=2e-3, friction=0.4)
    add_lattice(sim, 6, 0.03, (0.18, 0.24), 3.0, seed)
    if box:
        sim.add_capsule((0.5, 0.5, 0.5), 0.05, 0.05, material="g", velocity=(3.0, 2.0, 1.0))
    if planes and not periodic:
        for d in range(3):
            nrm = np.zeros(3)
            nrm[d] = 1.0
            sim.add_plane(np.zeros(3), nrm, "g")
            sim.add_plane(np.full(3, 3.0), -nrm, "g")
    return sim


def _count_joint(monkeypatch):
    calls = []
    serial, threaded = I.both_halves

    def counted(build):
        def f(*a):
            calls.append(1)
            return build(*a)
        return f
    monkeypatch.setattr(I, "both_halves", (counted(serial), counted(threaded)))
    return calls


@pytest.mark.parametrize("periodic", [False, True], ids=["walled", "periodic"])
def test_run_equals_one_step_at_a_time(monkeypatch, periodic):
    calls = _count_joint(monkeypatch)
    a, b = _pile(periodic=periodic), _pile(periodic=periodic)
    a.run(600)
    assert len(calls) > 550                    # the joint pass did the work ...
    n = len(calls)
    for _ in range(600):
        b.step()
    assert len(calls) == n                     # ... and step() never takes it
    _bits_equal(a.state(), b.state())
    assert a.step_count == b.step_count == 600


def test_a_non_sphere_keeps_the_separate_halves(monkeypatch):
    calls = _count_joint(monkeypatch)
    a, b = _pile(box=True), _pile(box=True)
    a.run(300)
    for _ in range(300):
        b.step()
    assert calls == []
    _bits_equal(a.state(), b.state())


def _poison(sim, uid, step):
    """Make the force on body ``uid`` non-finite in step ``step`` (on the rank owning it)."""
    forces = sim._forces

    def poisoned(*args, **kw):
        forces(*args, **kw)
        if sim.step_count + 1 == step:
            st = sim.st
            st.force[np.flatnonzero(st.uid[: st.n_owned] == uid), 0] = np.nan
            # rows changed after the sums: no longer the kept ones (as accumulate's keep=False)
            sim.nl.n_listed[0] = -1
    sim._forces = poisoned


def _fail(sim, steps, one_at_a_time):
    with pytest.raises(parsim.SimulationError) as e:
        if one_at_a_time:
            for _ in range(steps):
                sim.step()
        else:
            sim.run(steps)
    return str(e.value)


def test_screen_of_the_kept_rows_has_the_verdict_of_the_full_screen(monkeypatch):
    """With sparse sums that keep gravity-only rows, ``Simulation._screen_loads`` reads only the
    rows written in the step: the same count of non-finite values as the full screen, and a
    largest force component at least as large (the kept rows' m g, over every movable body),
    also with a NaN in a touched body's force."""
    sim = _pile(seed=4)
    seen = {"kept": 0, "full": 0, "nan": 0}
    real = parsim.Simulation._screen_loads

    def compare(self, no):
        nl, st = self.nl, self.st
        if nl.n_listed[0] >= 0:
            seen["kept"] += 1
            if seen["kept"] == 50 and nl.n_listed[0] > 0:
                st.force[nl.listed[0][0], 1] = np.nan     # a touched body's force
                seen["nan"] += 1
        else:
            seen["full"] += 1
        got = real(self, no)
        want = I.screen_loads(no, st.force, st.torque)
        assert got[0] == want[0]
        if want[0] == 0:
            assert got[1] >= want[1]
            movable = (st.flags[:no] & FIXED) == 0
            gmax = np.abs(st.mass[:no][movable, None] * self.gravity).max()
            assert got[1] == max(want[1], gmax)
        return got

    monkeypatch.setattr(parsim.Simulation, "_screen_loads", compare)
    with pytest.raises(parsim.SimulationError):
        sim.run(400)                    # the NaN stops the run at that step
    assert seen["kept"] >= 50 and seen["full"] >= 1 and seen["nan"] == 1


def _record_ahead(monkeypatch, sim, seen):
    """Keep in ``seen["ahead"]`` what the step's check last returned (every rank's bound)."""
    check = sim._check

    def checked(*a, **k):
        seen["ahead"] = check(*a, **k)
        return seen["ahead"]
    monkeypatch.setattr(sim, "_check", checked)


def _watch_bound_only(monkeypatch, sim):
    """Every rank lets its joint pass skip the displacement (``BOUND_ONLY_MIN`` = 0); records,
    for each joint pass that skipped it, whether this rank's actual displacement (computed
    here from the arrays) is within the bound of every rank the preceding check returned."""
    monkeypatch.setattr(I, "BOUND_ONLY_MIN", 0)
    seen = {"ahead": np.inf, "free": 0, "bad": []}
    _record_ahead(monkeypatch, sim, seen)

    def watched(build):
        def f(*a):
            out = build(*a)
            if not a[-1]:                 # track False
                seen["free"] += 1
                st = sim.st
                no = st.n_owned
                d = st.position[:no] - st.ref_position[:no]
                movable = (st.flags[:no] & FIXED) == 0
                real = np.sqrt((d * d).sum(axis=1))[movable].max(initial=0.0)
                if not (out[0] == np.inf and real <= seen["ahead"] < 0.5 * sim.nl.skin):
                    seen["bad"].append((out[0], real, seen["ahead"]))
            return out
        return f
    monkeypatch.setattr(I, "both_halves", tuple(watched(b) for b in I.both_halves))
    return seen


@pytest.mark.parametrize("periodic", [False, True], ids=["walled", "periodic"])
def test_bound_only_joint_pass_keeps_the_bits(monkeypatch, periodic):
    """A rank whose joint pass skips the displacement while the bound rules out a rebuild
    (large ranks; here forced) gives the bits and the rebuilds of the exact one; the bound
    holds at every such pass, and most passes skip."""
    ref = _pile(periodic=periodic)
    ref.run(500)
    sim = _pile(periodic=periodic)
    seen = _watch_bound_only(monkeypatch, sim)
    sim.run(500)
    assert not seen["bad"], seen["bad"][:5]
    assert seen["free"] > 250, seen["free"]
    assert sim.nl.builds == ref.nl.builds
    _bits_equal(sim.state(), ref.state())


def test_a_non_finite_force_stops_run_where_step_stops():
    out = []
    for one in (False, True):
        sim = _pile()
        _poison(sim, uid=77, step=137)
        msg = _fail(sim, 400, one)
        out.append((msg, sim.step_count, sim.state()))
    assert out[0][0] == out[1][0] and "body uid 77 at step 137: non-finite" in out[0][0]
    assert out[0][1] == out[1][1] == 137
    _bits_equal(out[0][2], out[1][2])


def test_leaving_the_domain_stops_run_where_step_stops():
    out = []
    for one in (False, True):
        sim = _pile(planes=False)          # no floor: the spheres fall out through z = 0
        msg = _fail(sim, 400, one)
        out.append((msg, sim.step_count, sim.state()))
    assert out[0][0] == out[1][0] and "left the domain" in out[0][0]
    assert out[0][1] == out[1][1] > 1
    _bits_equal(out[0][2], out[1][2])


def _verdict(comm, ok: bool, what: str):
    """Every rank asserts the same: that ``ok`` holds on every rank (until 2026-11-28 only rank
    0's ``ok`` counted, so a check computed on each rank was made on rank 0 alone)."""
    bad = [b for b in comm.allgather(None if ok else f"rank {comm.rank}: {what}") if b]
    assert not bad, bad


def _serial_reference(comm, steps, **pile):
    """On rank 0: (state, rebuilds) of the serial ``_pile(**pile)`` after ``steps`` steps (the
    other ranks sleep meanwhile and get None)."""
    ref = None
    if comm.rank == 0:
        s = _pile(comm=None, **pile)
        s.run(steps)
        ref = (s.state(), s.nl.builds)
    quiet_barrier(comm)
    return ref


def _verdict_serial(comm, sim, ref):
    """Every rank asserts that ``sim``'s gathered state is rank 0's serial ``ref`` bit for bit
    and that it rebuilt as often."""
    got = sim.state(gather=True)
    ok = True
    if comm.rank == 0:
        ok = all(np.array_equal(np.asarray(got[k]).view(np.uint8),
                                np.asarray(ref[0][k]).view(np.uint8)) for k in ref[0])
    _verdict(comm, ok, f"{comm.size} ranks differ from the serial run")
    builds = comm.bcast(None if ref is None else ref[1], root=0)
    _verdict(comm, sim.nl.builds == builds, f"{sim.nl.builds} rebuilds, serial {builds}")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("periodic", [False, True], ids=["walled", "periodic"])
@pytest.mark.parametrize("box", [False, True], ids=["spheres", "one_capsule"])
def test_ranks_joint_pass_bitwise(comm, periodic, box):
    """Spheres on all ranks of the session (2, 4 or 8), with one capsule or without (the rank
    owning it, which changes, keeps the separate halves while the others join them), give the
    serial run's bits."""
    steps = 500
    ref = _serial_reference(comm, steps, periodic=periodic, box=box)
    sim = _pile(comm=comm, periodic=periodic, box=box)
    reductions = []
    reduce = sim.net.max
    sim.net.max = lambda x: reductions.append(1) or reduce(x)
    sim.run(steps)
    # the same bits and rebuilds as the serial run, though with spheres only most steps skip
    # the reduction of the displacement (every rank's drift bound is below half the skin)
    _verdict_serial(comm, sim, ref)
    if not box:
        _verdict(comm, len(reductions) < steps // 2, f"{len(reductions)} reductions")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("periodic", [False, True], ids=["walled", "periodic"])
def test_ranks_drift_bound_holds_every_step(comm, monkeypatch, periodic):
    """In Simulation._advance, every joint drift's displacement (this rank's) is at most the
    bound the preceding check's reduction returned, whenever that bound was used (finite).
    Without speculation: a speculating step carries its check on the next refresh, with the
    exact displacement instead of a bound."""
    sim = _pile(comm=comm, periodic=periodic)
    sim.speculate = False
    seen = {"ahead": np.inf, "used": 0, "bad": []}
    _record_ahead(monkeypatch, sim, seen)
    builds = I.both_halves

    def bounded(build):
        def f(*a):
            out = build(*a)
            if np.isfinite(seen["ahead"]):
                seen["used"] += 1
                if not out[0] <= seen["ahead"]:
                    seen["bad"].append((out[0], seen["ahead"]))
            return out
        return f
    monkeypatch.setattr(I, "both_halves", tuple(bounded(b) for b in builds))
    sim.run(500)
    bad = comm.allgather(seen["bad"])
    _verdict(comm, not any(bad), f"displacements above their bounds: {bad}")
    _verdict(comm, seen["used"] > 300, f"the bound was used in {seen['used']} steps only")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("periodic", [False, True], ids=["walled", "periodic"])
def test_ranks_bound_only_joint_pass_gives_the_serial_bits(comm, monkeypatch, periodic):
    """Every rank skipping the displacement in its joint pass while every rank's bound rules
    out a rebuild: the serial run's bits and rebuilds, the bound holds on every rank."""
    ref = _serial_reference(comm, 500, periodic=periodic)
    sim = _pile(comm=comm, periodic=periodic)
    seen = _watch_bound_only(monkeypatch, sim)
    sim.run(500)
    _verdict_serial(comm, sim, ref)
    _verdict(comm, not seen["bad"], f"bounds broken: {seen['bad'][:5]}")
    _verdict(comm, seen["free"] > 100, f"only {seen['free']} passes skipped the displacement")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("step,box", [(2, False), (120, False), (121, False), (137, False),
                                      (120, True)],
                         ids=["second_step", "rebuild_step", "after_rebuild", "joint_pass",
                              "rebuild_capsule"])
def test_ranks_stop_together_with_the_serial_state(comm, step, box):
    """The force on one body becomes NaN in step ``step`` on the rank that owns it (in step
    137 the others were about to take the joint pass). All ranks raise the serial run's
    message (plus the failing rank's number), with the serial state at the end of that step,
    bit for bit. With speculation (the check of a step rides on the next refresh) the ranks
    that did not fail are one step ahead when they learn of it; they go back to the state kept
    at the start or the last rebuild (step 120 is one) and run again (one replay), also when
    the failing step is a rebuild's or the one after, and with a capsule (no joint pass on its
    rank)."""
    from mpi4py import MPI

    ref = None
    if comm.rank == 0:
        s = _pile(comm=None, box=box)
        _poison(s, uid=77, step=step)
        ref = (_fail(s, 300, False), s.state())
    quiet_barrier(comm)
    sim = _pile(comm=comm, box=box)
    _poison(sim, uid=77, step=step)
    msg = _fail(sim, 300, False)
    got = sim.state(gather=True)
    ok = True
    if comm.rank == 0:
        ok = re.sub(r" \[rank \d+\]$", "", msg) == ref[0] and all(
            np.array_equal(np.asarray(got[k]).view(np.uint8), np.asarray(ref[1][k]).view(np.uint8))
            for k in ref[1])
    msgs = comm.allgather(msg)
    replays = 1 if MPI.Get_library_version().startswith("MPICH") else 0
    _verdict(comm, ok and len(set(msgs)) == 1 and sim.step_count == step
             and sim.replays == replays,
             f"messages {set(msgs)}, step {sim.step_count}, replays {sim.replays}")
