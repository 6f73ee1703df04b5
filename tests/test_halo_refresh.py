"""The per-step shadow refresh copies what the contacts read, and only that.

Every shadow copy must hold its original's position, velocity and angular velocity after a
refresh (positions are stored unshifted, so the values are equal bit for bit). The orientation
is carried only when some rank owns a movable non-sphere: no contact of a sphere reads it, and
leaving it out makes a refresh message 9 float64 per copy instead of 13.
"""

from __future__ import annotations

import numpy as np
import pytest

from parsim import halo as H
from test_joint_halves import _pile, _verdict


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


def _shadows_match(sim) -> str | None:
    """None if every shadow equals its original after a refresh, else what differs."""
    sim._refresh_shadows()
    owners = _owners(sim)
    st = sim.st
    turning = sim.halo.turning
    for j in range(st.n_owned, st.n):
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
    sim = build(comm)
    sim.run(400)
    got = sim.state(gather=True)
    ok = not sim.halo.turning
    if comm.rank == 0:
        ok = ok and all(np.array_equal(np.asarray(got[k]).view(np.uint8),
                                       np.asarray(ref[k]).view(np.uint8)) for k in ref)
    _verdict(comm, comm.bcast(ok, root=0), f"{comm.size} ranks differ from the serial run")
