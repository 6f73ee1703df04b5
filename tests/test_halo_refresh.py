"""The per-step shadow refresh copies what the contacts read, and only that.

Every shadow copy must hold its original's position, velocity and angular velocity after a
refresh (positions are stored unshifted, so the values are equal bit for bit). The orientation
is carried only when some rank owns a movable non-sphere: no contact of a sphere reads it, and
leaving it out makes a refresh message 9 float64 per copy instead of 13.
"""

from __future__ import annotations

import numpy as np
import pytest

import parsim
from parsim import halo as H
from test_joint_halves import _pile, _verdict, add_lattice
from mpi_wait import quiet_barrier


def _owners(sim):
    """uid -> (position, velocity, angular velocity, orientation) of every owned body, on every
    rank."""
    st = sim.st
    no = st.n_owned
    rows = (st.uid[:no].copy(), st.position[:no].copy(), st.velocity[:no].copy(),
            st.angular_velocity[:no].copy(), st.orientation[:no].copy())
    parts = sim.net.allgather(rows)
    return {int(u): (p[i], v[i], w[i], q[i])
            for u_, p, v, w, q in parts for i, u in enumerate(u_)} if parts else {}


def _read(sim) -> np.ndarray:
    """The shadow slots a candidate pair reads (what the refresh must keep current)."""
    st, nl = sim.st, sim.nl
    rows = np.union1d(nl.pa, nl.pb)
    return rows[rows >= st.n_owned]


def _shadows_match(sim, rows=None) -> str | None:
    """None if every shadow of ``rows`` (default: those a pair reads) equals its original after
    a refresh, else what differs."""
    sim._refresh_shadows()
    owners = _owners(sim)
    st = sim.st
    turning = sim.halo.turning
    rows = _read(sim) if rows is None else rows
    if len(rows) == 0:
        return "no shadow to compare (no candidate pair reads one)"
    for j in rows:
        p, v, w, q = owners[int(st.uid[j])]
        fields = [("position", st.position[j], p), ("velocity", st.velocity[j], v),
                  ("angular velocity", st.angular_velocity[j], w)]
        if turning:
            fields.append(("orientation", st.orientation[j], q))
        for name, got, want in fields:
            if not np.array_equal(got, want):
                return f"shadow of uid {int(st.uid[j])}: {name} {got} != {want}"
    return None


def _widths(sim) -> set[int]:
    return {step[3].shape[1] for step in sim.halo.program if step[0] == "send"}


@pytest.mark.parametrize("box", [False, True], ids=["spheres", "one_capsule"])
def test_refresh_copies_the_state_of_the_periodic_images(box):
    sim = _pile(periodic=True, box=box)
    sim.run(60)
    assert sim.st.n > sim.st.n_owned            # there are periodic images
    assert sim.halo.turning == box              # a movable capsule needs the orientation
    assert _shadows_match(sim) is None


def test_a_fixed_non_sphere_does_not_need_the_orientation():
    sim = _pile(periodic=True)
    sim.add_box((1.5, 1.5, 1.5), (0.1, 0.1, 0.1), material="g", fixed=True)
    sim.run(10)
    assert not sim.halo.turning


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("box", [False, True], ids=["spheres", "one_capsule"])
def test_ranks_refresh_messages_carry_what_is_needed(comm, box):
    """On several ranks: 9 float64 per copy for spheres, 13 with a movable capsule (whichever
    rank owns it); every shadow, received or a local image, equals its original."""
    sim = _pile(comm=comm, periodic=True, box=box)
    sim.run(60)
    want = H.STATE_WIDTH if box else H.SPHERE_WIDTH
    widths = _widths(sim)
    bad = _shadows_match(sim)
    if bad is None and widths != {want}:
        bad = f"rank {comm.rank}: refresh widths {sorted(widths)}, expected {want}"
    bad = comm.allgather(bad)
    _verdict(comm, not any(bad), str([b for b in bad if b]))


@pytest.mark.mpi(min_size=2)
def test_ranks_spheres_on_a_fixed_box_give_the_serial_bits(comm):
    """Spheres (whose shadows keep a stale orientation: no movable non-sphere) hitting a fixed
    box on the block borders (the centre of the domain): the sphere-box contacts, which pass a
    shadow sphere's quaternion to the narrow phase, give the serial run's bits."""
    def build(c):
        sim = _pile(comm=c)
        sim.add_box((1.5, 1.5, 1.5), (0.1, 0.1, 0.1), material="g", fixed=True)
        return sim
    ref = None
    if comm.rank == 0:
        s = build(None)
        s.run(400)
        ref = s.state()
    quiet_barrier(comm)                # the others sleep while rank 0 runs alone
    sim = build(comm)
    sim.run(400)
    got = sim.state(gather=True)
    ok = not sim.halo.turning
    if comm.rank == 0:
        ok = ok and all(np.array_equal(np.asarray(got[k]).view(np.uint8),
                                       np.asarray(ref[k]).view(np.uint8)) for k in ref)
    _verdict(comm, ok, f"{comm.size} ranks differ from the serial run, or a shadow turns")


def _gas(comm=None, pruning=True):
    """A periodic gas: 512 spheres on a jittered lattice (spacing 0.5, radii 0.1-0.2) in
    [0, 4]^3, fast enough to collide and cross block borders within a few hundred steps. Most
    shadows lie within the halo but have no candidate partner."""
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (4, 4, 4)), periodic=(True,) * 3,
                            skin=0.05, comm=comm)
    sim.halo.pruning = pruning
    sim.add_material("g", density=1000.0, restitution=0.7, collision_time=1e-3, friction=0.3)
    add_lattice(sim, 8, 0.04, (0.1, 0.2), 4.0, seed=7)   # gaps >= 0.42 > 2 x 0.2: no overlap
    return sim


def _gas_reference(comm, steps: int = 300):
    """The serial run's state of :func:`_gas` after ``steps`` steps, on rank 0 (None elsewhere;
    the other ranks sleep meanwhile)."""
    ref = None
    if comm.rank == 0:
        s = _gas()
        s.run(steps)
        ref = s.state()
    quiet_barrier(comm)
    return ref


def _same(a, b) -> bool:
    return all(np.array_equal(np.asarray(a[k]).view(np.uint8), np.asarray(b[k]).view(np.uint8))
               for k in a)


def test_pruned_refresh_leaves_out_unread_shadows_and_changes_no_bit():
    """The refresh writes only the periodic images some pair reads; the run gives the bits of
    a run that refreshes every image."""
    full = _gas(pruning=False)
    full.run(300)
    sim = _gas()
    sim.run(300)
    assert sim.nl.builds > 1 and sim.n_contacts > 0
    assert full.halo.refreshed == full.st.n_shadow > 0
    read = _read(sim)
    assert 0 < read.size and sim.halo.refreshed < sim.st.n_shadow // 2
    assert _shadows_match(sim) is None
    assert _same(sim.state(), full.state())


@pytest.mark.mpi(min_size=2)
def test_ranks_pruned_refresh_sends_less_and_gives_the_serial_bits(comm):
    """On several ranks the pruned refresh sends fewer bytes than the full one, every shadow a
    pair reads equals its original, and the final state is the serial run's, bit for bit."""
    ref = _gas_reference(comm)
    runs = []
    for pruning in (False, True):
        sim = _gas(comm, pruning)
        sim.run(300)
        runs.append((sim.net.bytes_sent, sim.state(gather=True)))
    bad = _shadows_match(sim)
    sent = comm.allgather(runs[1][0] < runs[0][0])
    if bad is None and not all(sent):
        bad = f"pruned refresh sent no fewer bytes: {[r[0] for r in runs]} on rank {comm.rank}"
    if bad is None and comm.rank == 0 and not (_same(runs[1][1], ref) and _same(runs[0][1], ref)):
        bad = f"{comm.size} ranks differ from the serial run"
    bad = comm.allgather(bad)
    _verdict(comm, not any(bad), str([b for b in bad if b]))


def _corner(pruning=True):
    """Two spheres that meet across the corner of a periodic box: the contact reads the image
    of B made in the third sweep from its image of the second, made from that of the first."""
    sim = parsim.Simulation(dt=1e-4, domain=((0, 0, 0), (2, 2, 2)), periodic=(True,) * 3,
                            skin=0.05)
    sim.halo.pruning = pruning
    sim.add_material("g", density=1000.0, restitution=0.8, collision_time=1e-3)
    sim.add_spheres([[0.08, 0.08, 0.08], [1.92, 1.92, 1.92], [1.0, 1.0, 1.0]], [0.1, 0.1, 0.1],
                    "g", velocities=[[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    return sim


def test_pruned_refresh_keeps_the_chain_of_a_corner_image():
    full = _corner(pruning=False)
    full.run(400)
    sim = _corner()
    sim.run(400)
    v = sim.state()["velocity"]
    assert np.all(v[0] > 0.5) and np.all(v[1] < -0.5)      # they bounced off each other
    assert sim.halo.refreshed < sim.st.n_shadow
    assert _same(sim.state(), full.state())


@pytest.mark.mpi(min_size=2)
def test_ranks_refresh_and_check_from_kernels_or_mpi4py_give_the_serial_bits(comm, monkeypatch):
    """The per-step messages go through MPI called from kernels (parsim.native_mpi) where the
    library has the MPICH ABI, else through mpi4py (PARSIM_NATIVE_MPI=0 chooses mpi4py). With
    the kernels a step's check rides on the next refresh (speculation), unless turned off; then
    the refresh sends what mpi4py's sends. Every way gives the serial run's bits."""
    from mpi4py import MPI

    ref = _gas_reference(comm)
    runs = {}
    for way, native, speculate in (("spec", "1", True), ("kernels", "1", False),
                                   ("mpi4py", "0", True)):
        monkeypatch.setenv("PARSIM_NATIVE_MPI", native)
        sim = _gas(comm)
        sim.speculate = speculate
        sim.run(300)
        runs[way] = (sim.net.native is not None, sim.net.bytes_sent, sim.net.messages_sent,
                     sim.state(gather=True), sim.speculated)
    bad = None
    mpich = MPI.Get_library_version().startswith("MPICH")
    if [r[4] > 0 for r in runs.values()] != [mpich, False, False]:
        bad = f"steps speculated: {[r[4] for r in runs.values()]} (MPICH: {mpich})"
    elif runs["spec"][0] != mpich or runs["mpi4py"][0]:
        bad = (f"kernels' MPI used: {runs['spec'][0]} (MPICH: {mpich}), with "
               f"PARSIM_NATIVE_MPI=0: {runs['mpi4py'][0]}")
    elif runs["kernels"][1:3] != runs["mpi4py"][1:3]:
        bad = f"bytes, messages {runs['kernels'][1:3]} != {runs['mpi4py'][1:3]} on rank {comm.rank}"
    elif comm.rank == 0 and not all(_same(r[3], ref) for r in runs.values()):
        bad = f"{comm.size} ranks differ from the serial run: " + str(
            [w for w, r in runs.items() if not _same(r[3], ref)])
    bad = comm.allgather(bad)
    _verdict(comm, not any(bad), str([b for b in bad if b]))
