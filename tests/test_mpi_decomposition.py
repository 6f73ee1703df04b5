"""The domain decomposition: a run on N ranks gives the same bits as the run on one rank.

Each test builds the same scene on a sub-communicator of 1..size ranks with several block layouts
(``comm.Split``), runs it, gathers the uid-sorted state on the group's rank 0 and compares it with
``==`` to the serial run made on world rank 0. The verdict is broadcast before anything is
asserted, so every rank passes or fails alike (no rank is left waiting in a collective).

A session on ``size`` ranks runs the layouts of more than ``size // 2`` ranks: the suite's
sessions on 2, 4 and 8 ranks (scripts/run_tests.sh) run each layout once, in the smallest session
it fits (the 8-rank session ran the layouts of 1 to 4 ranks again, at a quarter of a core each).
"""

from __future__ import annotations

import numpy as np
import pytest

from mpi_wait import quiet_barrier, quiet_bcast
from parsim import Simulation

FIELDS = ("uid", "position", "orientation", "velocity", "angular_velocity", "wraps")
L = 4.0


def mixed_scene(comm, blocks, periodic: bool, scene: str = "mixed", check_ownership: bool = False,
                n_side: int = 7, speed: float = 4.0) -> Simulation:
    """A dense, colliding mix of spheres, boxes and capsules in [0, L]^3: all-periodic without
    gravity, or walled (6 planes) with gravity. ``scene="big"``: :func:`big_bodies_scene`."""
    if scene == "big":
        return big_bodies_scene(comm, blocks, periodic)
    per = (True, True, True) if periodic else (False, False, False)
    sim = Simulation(dt=1e-4, gravity=(0, 0, 0) if periodic else (0, 0, -9.81),
                     domain=((0, 0, 0), (L, L, L)), periodic=per, skin=0.05, comm=comm,
                     blocks=blocks, check_ownership=check_ownership)
    sim.add_material("grain", density=1000.0, restitution=0.7, collision_time=2e-3,
                     friction=0.4)
    rng = np.random.default_rng(7)
    g = (np.arange(n_side) + 0.5) * (L / n_side)
    c = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
    c += rng.uniform(-0.05, 0.05, size=c.shape)
    v = rng.normal(0.0, speed, size=c.shape)
    w = rng.normal(0.0, 5.0, size=c.shape)
    q = rng.normal(size=(c.shape[0], 4))
    kind = np.arange(c.shape[0]) % 3
    s, b, k = kind == 0, kind == 1, kind == 2
    sim.add_spheres(c[s], rng.uniform(0.17, 0.24, size=int(s.sum())), "grain", velocities=v[s],
                    angular_velocities=w[s])
    sim.add_boxes(c[b], rng.uniform(0.1, 0.2, size=(int(b.sum()), 3)), "grain",
                  orientations=q[b], velocities=v[b], angular_velocities=w[b])
    sim.add_capsules(c[k], 0.1, rng.uniform(0.1, 0.25, size=int(k.sum())), "grain",
                     orientations=q[k], velocities=v[k], angular_velocities=w[k])
    if not periodic:
        for d in range(3):
            n = np.zeros(3)
            n[d] = 1.0
            sim.add_plane(np.zeros(3), n, "grain")
            sim.add_plane(np.full(3, L), -n, "grain")
    return sim


def big_bodies_scene(comm, blocks, periodic: bool) -> Simulation:
    """Small grains around one big sphere and one big box (the very polydisperse case): on
    several ranks the two are global bodies (larger than a quarter of a block)."""
    big = 6.0
    per = (True, True, True) if periodic else (False, False, False)
    sim = Simulation(dt=1e-4, gravity=(0, 0, 0) if periodic else (0, 0, -9.81),
                     domain=((0, 0, 0), (big, big, big)), periodic=per, skin=0.05, comm=comm,
                     blocks=blocks)
    sim.add_material("grain", density=1000.0, restitution=0.7, collision_time=2e-3,
                     friction=0.4)
    rng = np.random.default_rng(11)
    g = (np.arange(8) + 0.5) * (big / 8)
    c = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
    # periodic: the sphere straddles the x seam, so grains meet it through its images
    rock_a = np.array([0.3 if periodic else 1.6, 1.7, 1.5])
    rock_b = np.array([4.2, 4.4, 4.5])
    wrapped = c.copy()
    wrapped[:, 0] = np.where(periodic & (c[:, 0] > big - 1.5), c[:, 0] - big, c[:, 0])
    keep = ((np.linalg.norm(wrapped - rock_a, axis=1) > 1.1)
            & (np.linalg.norm(c - rock_b, axis=1) > 1.3))
    c = c[keep] + rng.uniform(-0.05, 0.05, size=(int(keep.sum()), 3))
    v = rng.normal(0.0, 4.0, size=c.shape)
    # the rocks first in one batch and the grains after: uids interleave partners of both kinds
    sim.add_sphere(rock_a, 0.8, "grain", velocity=(2.0, 1.0, 0.5))
    sim.add_spheres(c[::2], rng.uniform(0.15, 0.22, size=c[::2].shape[0]), "grain",
                    velocities=v[::2])
    sim.add_box(rock_b, (0.6, 0.5, 0.4), orientation=(0.9, 0.1, 0.3, 0.2), material="grain",
                velocity=(-1.0, -2.0, 0.5), angular_velocity=(1.0, 2.0, 3.0))
    sim.add_boxes(c[1::2], rng.uniform(0.1, 0.15, size=(c[1::2].shape[0], 3)), "grain",
                  orientations=rng.normal(size=(c[1::2].shape[0], 4)), velocities=v[1::2])
    if not periodic:
        for d in range(3):
            n = np.zeros(3)
            n[d] = 1.0
            sim.add_plane(np.zeros(3), n, "grain")
            sim.add_plane(np.full(3, big), -n, "grain")
    return sim


def serial_reference(comm, steps, **kw):
    """The uid-sorted final state of the serial run, on world rank 0 (None elsewhere)."""
    if comm.rank != 0:
        return None
    sim = mixed_scene(None, None, **kw)
    sim.run(steps)
    out = sim.state()
    out["contacts"] = sim.count_contacts()
    out["energy"] = sim.kinetic_energy()
    return out


def compare(ref, got) -> str | None:
    if got["uid"].shape != ref["uid"].shape or (got["uid"] != ref["uid"]).any():
        return f"uids differ: {got['uid'].size} bodies vs {ref['uid'].size}"
    if got["contacts"] != ref["contacts"]:       # each contact counted once, whatever the ranks
        return f"count_contacts() {got['contacts']} vs {ref['contacts']} on one rank"
    if got["energy"] != ref["energy"]:           # an exact sum: the same bits on any ranks
        return f"kinetic_energy() {got['energy']!r} vs {ref['energy']!r} on one rank"
    for k in FIELDS:
        bad = np.flatnonzero((got[k] != ref[k]).reshape(got[k].shape[0], -1).any(axis=1))
        if bad.size:
            i = bad[0]
            return (f"{k} differs for {bad.size} bodies, first uid {ref['uid'][i]}: "
                    f"{got[k][i]!r} vs {ref[k][i]!r}")
    return None


#: the ranks of the MPI sessions of scripts/run_tests.sh (checked against it below)
SESSIONS = (2, 4, 8)


def in_session(n: int, size: int) -> bool:
    """Whether the session on ``size`` ranks runs the layouts of ``n`` ranks: each layout runs
    once, in the smallest session it fits (more than ``size // 2`` ranks, at most ``size``; the
    smallest session also takes the 1-rank layouts, which no session ran from 2026-11-28 02:30
    to 09:30)."""
    lo = 0 if size <= SESSIONS[0] else size // 2
    return lo < n <= size


def run_layouts(comm, layouts, steps, **kw):
    """Run the scene on each (ranks, blocks) layout of this session (:func:`in_session`);
    [(layout, verdict)] on every rank, verdict None when the bits equal the serial run's."""
    ref = serial_reference(comm, steps, **kw)
    quiet_barrier(comm)                     # the other ranks sleep while rank 0 runs alone
    verdicts = []
    for n, blocks in layouts:
        if not in_session(n, comm.size):
            continue
        sub = comm.Split(0 if comm.rank < n else 1, comm.rank)
        msg = None
        if comm.rank < n:
            try:
                sim = mixed_scene(sub, blocks, **kw)
                sim.run(steps)
                got = sim.state(gather=True)
                contacts = sim.count_contacts()
                energy = sim.kinetic_energy()
                if got is not None:
                    got["contacts"] = contacts
                    got["energy"] = energy
                err = None
            except Exception as e:          # reported below, on every rank
                got, err = None, f"{type(e).__name__}: {e}"
            errs = sub.allgather(err)
            if any(errs):
                msg = "; ".join(e for e in errs if e)
            elif comm.rank == 0:
                msg = compare(ref, got)
        sub.Free()
        msg = quiet_bcast(comm, msg if comm.rank == 0 else None)
        verdicts.append(((n, blocks), msg))
    return verdicts


LAYOUTS = [(1, (1, 1, 1)), (2, (2, 1, 1)), (2, (1, 1, 2)), (3, (1, 3, 1)), (4, (2, 2, 1)),
           (4, (1, 2, 2)), (4, (4, 1, 1)), (8, (2, 2, 2)), (8, (4, 2, 1))]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("periodic", [True, False], ids=["periodic", "walled"])
def test_rank_count_invariance_bitwise(comm, periodic):
    """500 steps of 343 colliding spheres, boxes and capsules: every layout of 1 to 8 ranks
    (1, 2 in the 2-rank session; 3, 4 in the 4-rank one; 2x2x2 and 4x2x1 in the 8-rank one)
    gives bit-identical positions, velocities, orientations and wraps."""
    verdicts = run_layouts(comm, LAYOUTS, 500, periodic=periodic)
    failed = [(layout, msg) for layout, msg in verdicts if msg is not None]
    assert [layout for layout, _ in verdicts] == [x for x in LAYOUTS if in_session(x[0], comm.size)]
    assert len(verdicts) >= (3 if comm.size == 2 else 2)   # 2 ranks: (1, 1, 1) and two of 2
    assert not failed, failed


def test_every_layout_runs_in_exactly_one_mpi_session():
    """Serial: with the sessions scripts/run_tests.sh starts, each layout of the rank-count
    tests runs in one session exactly (the 1-rank layout ran in none for seven hours)."""
    import re
    from pathlib import Path

    script = (Path(__file__).resolve().parents[1] / "scripts" / "run_tests.sh").read_text()
    found = re.search(r"^for n in ([\d ]+); do", script, re.M)
    sizes = tuple(int(x) for x in found.group(1).split())
    assert sizes == SESSIONS
    for n in sorted({x[0] for x in LAYOUTS} | {2, 3, 4, 8}):
        assert sum(in_session(n, size) for size in sizes) == 1, n


def test_mpi_sessions_find_every_file_with_mpi_tests():
    """Serial: scripts/run_tests.sh hands the MPI sessions the test files that contain the text
    '@pytest.mark.mpi'; a file marking its tests otherwise (``pytestmark = pytest.mark.mpi``,
    an alias) would run in no session, and only be skipped in the serial one."""
    import re
    from pathlib import Path

    tests = Path(__file__).resolve().parent
    script = (tests.parent / "scripts" / "run_tests.sh").read_text()
    assert "grep -rl --include='test_*.py' -e '@pytest.mark.mpi' tests" in script
    odd = []
    for path in sorted(tests.rglob("test_*.py")):
        text = path.read_text()
        marks = re.findall(r"^(.*)\bmark\.mpi\b", text, re.M)
        if marks and not any(m.strip() == "@pytest." for m in marks):
            odd.append(path.name)
    assert odd == []


@pytest.mark.mpi(min_size=2)
def test_ownership_conserved_under_fast_crossings(comm):
    """Fast bodies (10 m/s rms per axis: a block width every ~2000 steps) cross block faces,
    edges, corners and the periodic seams for 3000 steps with the ownership check on every step;
    the result still equals the serial run's bits."""
    layouts = [(comm.size, None)]
    verdicts = run_layouts(comm, layouts, 3000, periodic=True, check_ownership=True,
                           n_side=5, speed=10.0)
    assert verdicts and verdicts[0][1] is None, verdicts


@pytest.mark.mpi(min_size=2)
def test_bodies_are_distributed_and_migrate(comm):
    """Each rank owns only bodies in its block, every body has exactly one owner, and bodies do
    migrate during the run."""
    sim = mixed_scene(comm, None, periodic=True, n_side=5, speed=10.0)
    from mpi4py import MPI

    total = sim.count_bodies()
    for _ in range(10):
        sim.run(100)
        st = sim.st
        inside = sim.dec.owns(st.position[: st.n_owned])
        ok = bool(inside.all())
        all_ok = comm.allreduce(int(ok), op=MPI.MIN)
        assert all_ok == 1
        assert sim.count_bodies() == total
    uids = np.sort(np.concatenate(comm.allgather(sim.state()["uid"])))
    assert (uids == np.arange(total)).all()
    assert comm.allreduce(sim.halo.migrated_total) > 0


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("periodic", [True, False], ids=["periodic", "walled"])
def test_global_bodies_bitwise(comm, periodic):
    """A big sphere and a big box among ~500 grains, 400 steps: on several ranks both are global
    bodies (every rank integrates them, their forces summed over all ranks in partner order);
    the state equals the serial run's (where they are ordinary bodies) bit for bit."""
    layouts = [(2, (2, 1, 1)), (3, (3, 1, 1)), (4, (2, 2, 1)), (8, (2, 2, 2))]
    verdicts = run_layouts(comm, layouts, 400, periodic=periodic, scene="big")
    failed = [(layout, msg) for layout, msg in verdicts if msg is not None]
    assert verdicts and not failed, failed


def _stop(sim, steps):
    """(message, step) of the SimulationError that stops ``sim.run(steps)``, or (None, step)."""
    from parsim.simulation import SimulationError

    try:
        sim.run(steps)
    except SimulationError as e:
        return str(e), sim.step_count
    return None, sim.step_count


def _same_on_every_rank(comm, value):
    """Rank 0's value if every rank has the same, else a description of the difference."""
    values = comm.allgather(value)
    return values[0] if all(v == values[0] for v in values) else f"ranks differ: {values}"


@pytest.mark.mpi(min_size=2)
def test_blocks_thinner_than_the_halo_get_an_error_with_the_skin_that_fits(comm):
    """Blocks 0.5 wide along x, spheres of diameter 0.1: a skin of 0.45 makes the halo (0.55)
    wider than a block, which every rank refuses with the same message; the skin it suggests
    (below 0.4) runs, on the same blocks. (Bodies wider than a quarter block are global, so only
    the skin can make the halo too wide; the message used to suggest fewer blocks only.)"""

    def scene(skin):
        sim = Simulation(dt=1e-4, domain=((0, 0, 0), (0.5 * comm.size, 1, 1)), skin=skin,
                         comm=comm, blocks=(comm.size, 1, 1))
        sim.add_material("m", density=1000.0, restitution=0.7, collision_time=2e-3)
        for x in 0.25 + 0.5 * np.arange(comm.size):
            sim.add_sphere((x, 0.5, 0.5), 0.05, "m", velocity=(1.0, 0, 0))
        return sim

    got = _same_on_every_rank(comm, _stop(scene(0.45), 10))
    assert isinstance(got, tuple) and got[1] == 0, got
    msg = got[0]
    assert "blocks along x are 0.5 wide, thinner than the halo" in msg, msg
    assert "0.1 + 0.45 = 0.55" in msg and "set a skin below 0.4 " in msg, msg
    assert _same_on_every_rank(comm, _stop(scene(0.39), 10)) == (None, 10)


@pytest.mark.mpi(min_size=3)
def test_a_body_jumping_over_a_block_gets_an_error_on_every_rank(comm):
    """A body that moves more than one block between two rebuilds (one step of 0.6 across
    blocks 0.5 wide, walled along x) cannot be handed over: every rank raises the same error
    naming it. Slower, the same bodies cross into the next block and migrate, without error."""

    def scene(speed):
        sim = Simulation(dt=1e-4, domain=((0, 0, 0), (0.5 * comm.size, 1, 1)),
                         periodic=(False, True, True), skin=0.01, comm=comm,
                         blocks=(comm.size, 1, 1))
        sim.add_material("m", density=1000.0, restitution=0.7, collision_time=2e-3)
        sim.add_sphere((0.45, 0.25, 0.5), 0.02, "m", velocity=(speed, 0, 0))   # uid 0
        sim.add_sphere((0.49, 0.75, 0.5), 0.02, "m", velocity=(100.0, 0, 0))  # uid 1
        return sim

    got = _same_on_every_rank(comm, _stop(scene(6000.0), 3))
    assert isinstance(got, tuple) and got[0] is not None, got
    assert "body uid 0 at " in got[0] and "moved more than one block along x" in got[0], got
    slow = scene(100.0)
    assert _same_on_every_rank(comm, _stop(slow, 3)) == (None, 3)
    assert sum(comm.allgather(slow.halo.migrated_total)) >= 1


@pytest.mark.mpi(min_size=2)
def test_ownership_check_with_an_error_on_one_rank_stops_every_rank(comm):
    """With ``check_ownership`` on, a body leaving the walled domain (outflow 'error') on one
    rank stops every rank with the serial run's message at the serial run's step. (The rank that
    found the error used to skip the ownership check's allgather and wait in the next
    reduction while the others waited in the allgather: a hang.)"""

    def scene(c):
        sim = Simulation(dt=1e-4, domain=((0, 0, 0), (4, 4, 4)), periodic=(False,) * 3,
                         skin=0.02, comm=c, blocks=(c.size, 1, 1) if c else None,
                         check_ownership=True)
        sim.add_material("m", density=1000.0, restitution=0.7, collision_time=2e-3)
        sim.add_sphere((0.02, 2.0, 2.0), 0.1, "m", velocity=(-10.0, 0, 0))  # leaves at x < 0
        sim.add_sphere((3.9, 2.0, 2.0), 0.1, "m")                          # the last block's
        return sim

    ref = _stop(scene(None), 100) if comm.rank == 0 else None
    got = _same_on_every_rank(comm, _stop(scene(comm), 100))
    ref = comm.bcast(ref, root=0)
    assert ref[0] is not None and "left the domain" in ref[0], ref
    assert got == ref, (got, ref)


@pytest.mark.mpi(min_size=2)
def test_a_global_body_too_big_for_a_short_periodic_box_is_refused_on_any_rank_count(comm):
    """A big sphere in a periodic box shorter than 2 x (its diameter + skin) is refused on one
    rank; on several ranks, where it is a global body, the same scene must be refused alike
    (it ran: the periodic check looked at the non-global bodies only)."""

    def scene(c):
        sim = Simulation(dt=1e-4, domain=((0, 0, 0), (2.8, 4, 4)), periodic=(True,) * 3,
                         skin=0.05, comm=c, blocks=(c.size, 1, 1) if c else None)
        sim.add_material("m", density=1000.0, restitution=0.7, collision_time=2e-3)
        sim.add_sphere((1.0, 1.0, 1.0), 0.7, "m", velocity=(3.0, 1.0, 0.5))
        for y in (0.5, 2.0, 3.5):
            sim.add_sphere((2.3, y, 2.5), 0.15, "m", velocity=(-2, 0.5, 0.3))
        return sim

    ref = _stop(scene(None), 50) if comm.rank == 0 else None
    sim = scene(comm)
    assert sim.global_radius < 0.7          # the big sphere is a global body here
    got = _same_on_every_rank(comm, _stop(sim, 50))
    ref = comm.bcast(ref, root=0)
    assert ref[0] is not None and "periodic axis x" in ref[0], ref
    assert got == ref, (got, ref)


@pytest.mark.mpi(min_size=2)
def test_two_global_bodies_touching_across_a_seam_are_one_contact(comm):
    """Two big spheres (global bodies on several ranks) touching across the periodic x seam:
    count_contacts() equals the serial count at every check (it counted them twice), and the
    state the serial bits."""

    def scene(c):
        sim = Simulation(dt=1e-4, domain=((0, 0, 0), (8, 4, 4)), periodic=(True,) * 3,
                         skin=0.05, comm=c, blocks=(1, c.size, 1) if c else None)
        sim.add_material("m", density=1000.0, restitution=0.7, collision_time=2e-3)
        # 1 mm apart across the seam, closing at 1 m/s: they touch from step 10 to about 30
        sim.add_sphere((0.6505, 2.0, 2.0), 0.65, "m", velocity=(-0.5, 0, 0))
        sim.add_sphere((7.3495, 2.0, 2.0), 0.65, "m", velocity=(0.5, 0, 0))
        sim.add_sphere((4.0, 2.0, 2.0), 0.65, "m")                 # and one touching nothing
        return sim

    def counts(sim):
        sim.run(10)
        out = []
        for _ in range(3):
            sim.run(5)
            out.append(sim.count_contacts())
        energy = sim.kinetic_energy()
        state = sim.state(gather=sim.net.size > 1)
        if state is not None:
            state["energy"] = energy
        return out, state

    ref = counts(scene(None)) if comm.rank == 0 else None
    sim = scene(comm)
    assert sim.global_radius < 0.65
    got = counts(sim)
    msg = None
    if comm.rank == 0:
        msg = compare(dict(ref[1], contacts=0), dict(got[1], contacts=0))
        if got[0] != ref[0]:
            msg = f"count_contacts() {got[0]} on {comm.size} ranks, serial {ref[0]}"
        elif ref[0] != [1, 1, 1]:
            msg = f"the two spheres should touch at steps 15, 20, 25: serial counts {ref[0]}"
    msg = comm.bcast(msg, root=0)
    assert msg is None, msg


@pytest.mark.mpi(min_size=2)
def test_many_global_bodies_get_a_warning(comm):
    """A tall column cut across its narrow side (the default keeps the gravity axis uncut):
    spheres larger than a quarter of a block are global, computed by every rank; `parsim run`
    warns when more than 16 (and 1 %) of the bodies are (it was silent until 2026-11-24)."""
    from parsim.runner import _global_warning

    def column(radius):
        sim = Simulation(dt=1e-5, domain=([0, 0, 0], [0.02, 0.02, 0.3]),
                                gravity=(0, 0, -9.81), comm=comm)
        m = sim.add_material("m", 2500.0, restitution=0.5, collision_time=5e-4)
        z = np.linspace(0.01, 0.29, 50)
        sim.add_spheres(np.stack([np.full(50, 0.01), np.full(50, 0.01), z], 1), radius, m)
        return sim

    sim = column(0.003)
    assert sim.dec.dims[0] > 1 and sim.global_radius < 0.003     # x is cut: 1 cm wide or less
    w = _global_warning(sim)
    assert w is not None and "50 of 50 bodies are larger than a quarter" in w, w
    assert _global_warning(column(0.3 * sim.global_radius)) is None


@pytest.mark.mpi(min_size=2)
def test_a_global_body_deleted_by_outflow_is_counted_once(comm):
    """outflow = "delete": a big sphere (a global body on several ranks, kept by every rank)
    leaves the domain next to a small one that stays; the ranks' `deleted` counts sum to the
    serial run's 1, and the state equals the serial one. (Until 2026-11-25 every rank counted
    the global body: P deletions on P ranks; found by a rank-count fuzzer.)"""
    def scene(c, blocks):
        sim = Simulation(dt=1e-4, domain=((0, 0, 0), (4, 2, 2)), outflow="delete", comm=c,
                         blocks=blocks, check_ownership=c is not None)
        sim.add_material("m", density=1000.0, restitution=0.7, collision_time=2e-3)
        sim.add_sphere((3.3, 1.0, 1.0), 0.6, "m", velocity=(20.0, 0, 0))
        sim.add_sphere((1.0, 1.0, 1.0), 0.1, "m", velocity=(1.0, 0, 0))
        sim.run(600)                                   # the big one leaves at step ~350
        return sim

    serial = scene(None, (1, 1, 1))
    sim = scene(comm, (comm.size, 1, 1))
    assert sim.global_radius < 0.6                     # the big sphere is a global body here
    assert serial.deleted == 1
    assert sim.net.isum(sim.deleted) == 1
    st, ref = sim.state(gather=True), serial.state()
    if comm.rank == 0:
        for k in ("uid", "position", "velocity"):
            assert np.array_equal(st[k], ref[k]), k


@pytest.mark.mpi(min_size=2)
def test_two_bodies_leaving_in_one_step_name_the_same_body_on_any_rank_count(comm):
    """Two spheres leave the walled domain through x = 0 in the same step, one of them after
    migrating between blocks: the error names the lower uid, on 1 rank as on several (it named
    the first bad body by slot, and slot order depends on the blocks: uid 1 serially, uid 0 on
    2-4 ranks; found by a rank-count fuzzer)."""
    def scene(c, blocks):
        sim = Simulation(dt=1e-4, domain=((0, 0, 0), (4, 2, 2)), outflow="error", comm=c,
                         blocks=blocks)
        sim.add_material("m", density=1000.0, restitution=0.7, collision_time=2e-3)
        sim.add_sphere((0.50003, 1.0, 1.5), 0.1, "m", velocity=(-10.0, 0, 0))
        sim.add_sphere((2.50015, 1.0, 0.5), 0.1, "m", velocity=(-50.0, 0, 0))
        return _stop(sim, 600)

    ref, ref_step = scene(None, (1, 1, 1))
    got, step = scene(comm, (comm.size, 1, 1))
    assert ref is not None and ref.startswith("body uid 0 at step 501: "), ref
    assert step == ref_step and got.split(" [rank ")[0] == ref
