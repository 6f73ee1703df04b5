"""The config's lattice generator builds rank-locally (each rank makes only the lattice points
that can land in its block, with counter-based random numbers): the bodies must be the serial
bodies, bit for bit, and no point may be lost at a block border or a periodic seam."""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

import parsim
from parsim import config
from parsim.config import _lattice_axis, build
from parsim.shapes import bounding_radius
from mpi_wait import quiet_barrier

CONFIG = """
[simulation]
dt = 1e-5
steps = 10
seed = 11

[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.0, 0.6, 0.5]
periodic = [true, true, false]

[[materials]]
name = "m"
density = 1000.0
restitution = 0.5
collision_time = 1e-3

[[bodies]]              # boxes jittered across block borders and the periodic seams
kind = "lattice"
shape = "box"
half_extents = [0.02, 0.015, 0.01]
spacing = 0.1
jitter = 0.06
random_velocity = 0.5
region = [[0.0, 0.0, 0.1], [1.0, 0.6, 0.3]]

[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.02
scale = { distribution = "lognormal", median = 1.0, sigma = 0.3, min = 0.5, max = 1.5 }
spacing = 0.07
jitter = 0.004
region = [[0.0, 0.0, 0.3], [1.0, 0.6, 0.4]]

[[bodies]]
kind = "lattice"
shape = "capsule"
radius = 0.01
length = 0.03
scale = { distribution = "choice", values = [0.5, 1.0], weights = [1, 2] }
spacing = 0.1
velocity = [0.0, 0.0, -1.0]
region = [[0.03, 0.0, 0.4], [0.98, 0.6, 0.5]]
"""

FIELDS = ("uid", "shape", "params", "position", "orientation", "velocity", "angular_velocity",
          "mass", "material", "flags", "wraps")


def test_lattice_axis_covers_every_point_that_can_land_in_the_block():
    """Brute force over jitters and blocks: every lattice index whose jittered, wrapped
    coordinate falls in [blo, bhi) is among the candidates."""
    rng = np.random.default_rng(0)
    lo, hi, a, c0, count = 0.0, 1.0, 0.1, 0.0, 10
    for periodic in (False, True):
        for blo, bhi in ((0.0, 0.5), (0.5, 1.0), (0.25, 0.6), (0.0, 1.0), (0.9, 1.0)):
            for jitter in (0.0, 0.03, 0.06):
                cand = set(_lattice_axis(c0, a, count, blo, bhi, jitter, lo, hi, periodic))
                x = c0 + (np.arange(count) + 0.5) * a
                for _ in range(200):
                    y = x + jitter * rng.uniform(-1, 1, count)
                    if periodic:
                        y = y - np.floor((y - lo) / (hi - lo)) * (hi - lo)
                    inside = np.flatnonzero((y >= blo) & (y < bhi))
                    assert set(inside.tolist()) <= cand, (periodic, blo, bhi, jitter)
                # and a block of half the domain makes about half of the points
                if (blo, bhi) == (0.0, 0.5) and jitter == 0.0:
                    assert len(cand) <= 6
    # unbounded axis, one block
    assert _lattice_axis(0.0, 0.1, 10, -np.inf, np.inf, 0.0, -np.inf, np.inf, False).tolist() \
        == list(range(10))


def _every_point(monkeypatch):
    """The serial build with no point left out (the overlap test switched off)."""
    with monkeypatch.context() as m:
        m.setattr(config, "_clear_of_bodies", lambda sim, c, rb: np.ones(len(c), dtype=bool))
        return build(tomllib.loads(CONFIG), comm=None).sim.state()


def test_serial_lattice_has_every_point_once(monkeypatch):
    """The serial build (one block: the whole domain): every lattice point once, uids in
    lattice order, the boxes jittered across the seam at x = 0 wrapped to the other side."""
    whole = _every_point(monkeypatch)
    n = whole["uid"].size
    assert n == 10 * 6 * 2 + 14 * 8 * 1 + 9 * 6 * 1
    assert np.array_equal(whole["uid"], np.arange(n))
    # the jitter moved some boxes across the periodic seam at x = 0 (wrapped, counted)
    boxes = whole["shape"] == 1
    assert (whole["wraps"][boxes, 0] != 0).any()
    assert (whole["position"][:, 0] >= 0.0).all() and (whole["position"][:, 0] < 1.0).all()


def test_points_overlapping_earlier_bodies_are_left_out(monkeypatch):
    """The three lattices of CONFIG overlap (jittered boxes reach into the spheres' layer, the
    spheres into the capsules'): a point is left out exactly when its body's bounding sphere
    would overlap that of a body already there (earlier generators' bodies that were kept;
    minimum image across the periodic x and y), found here by brute force over every pair; the
    kept bodies are those of the full lattice, bit for bit, and a note gives the counts."""
    full = _every_point(monkeypatch)
    cfg = build(tomllib.loads(CONFIG), comm=None)
    got = cfg.sim.state()
    ranges = [(0, 120), (120, 232), (232, 286)]             # the three generators' uids
    rb = bounding_radius(full["shape"], full["params"])
    box = np.array([1.0, 0.6, np.inf])
    kept = np.zeros(full["uid"].size, dtype=bool)
    for g, (u0, u1) in enumerate(ranges):
        before = np.flatnonzero(kept[:u0])
        for i in range(u0, u1):
            d = full["position"][before] - full["position"][i]
            d[:, :2] -= box[:2] * np.round(d[:, :2] / box[:2])
            gap = np.sqrt((d * d).sum(axis=1)) - (rb[before] + rb[i])
            kept[i] = not (gap < 0.0).any()
    assert 0 < (~kept).sum() < 20                         # the case is exercised, mildly
    assert kept[:120].all()                               # the first lattice has nothing before it
    assert np.array_equal(got["uid"], full["uid"][kept])
    for k in FIELDS:
        assert np.array_equal(got[k], full[k][kept]), k
    left = [(~kept[u0:u1]).sum() for u0, u1 in ranges]
    notes = [x for x in cfg.notes if "(lattice)" in x]
    assert [int(x.split(": ")[1].split()[0]) for x in notes] == [k for k in left if k]
    assert cfg.sim.next_uid == 286


@pytest.mark.mpi(min_size=2)
def test_rank_local_lattice_equals_the_serial_one(comm):
    data = tomllib.loads(CONFIG)
    one = build(data, comm=None).sim if comm.rank == 0 else None
    serial = one.state() if comm.rank == 0 else None
    quiet_barrier(comm)                # the others sleep while rank 0 builds alone
    sim = build(data).sim
    mine = int(sim.st.n_owned)
    everyone = sim.state(gather=True)
    counts = comm.gather(mine, root=0)
    found = None
    if comm.rank == 0:
        found = ([k for k in FIELDS if not np.array_equal(serial[k], everyone[k])],
                 int(serial["uid"].size), int(everyone["uid"].size), counts, one.next_uid)
    found = comm.bcast(found, root=0)
    differ, n_serial, n_par, counts, next_uid = found
    assert n_par == n_serial
    assert differ == []
    assert min(counts) > 0
    assert sim.next_uid == next_uid == 286      # the lattices' whole uid ranges


BIG = """
[simulation]
dt = 1e-5
steps = 10
seed = 5

[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.0, 0.6, 0.5]
periodic = [true, true, false]
walls = true

[[materials]]
name = "m"
density = 1000.0
restitution = 0.5
collision_time = 1e-3

[[bodies]]              # a few spheres of radius 0.14: wider than a quarter of any block
kind = "lattice"
shape = "sphere"
radius = 0.02
scale = { distribution = "choice", values = [1.0, 7.0], weights = [1, 1] }
spacing = 0.3
random_velocity = 2.0
region = [[0.0, 0.0, 0.0], [1.0, 0.6, 0.3]]

[[bodies]]              # small ones around them (those that would overlap are left out)
kind = "lattice"
shape = "sphere"
radius = 0.02
spacing = 0.06
random_velocity = 2.0
region = [[0.0, 0.0, 0.0], [1.0, 0.6, 0.5]]
"""


@pytest.mark.mpi(min_size=2)
def test_rank_local_lattice_with_global_bodies_equals_the_serial_one(comm):
    """A lattice whose bodies include some too large for the blocks: on several ranks they are
    global bodies (every rank passes them); the bodies, and 300 steps of them colliding with
    the rest, are the serial run's bits. (On several ranks this stopped with "larger than the
    blocks allow for a body added by one rank alone" until 2026-11-28: found by a fuzzer.)"""
    from parsim.bodies import GLOBAL

    data = tomllib.loads(BIG)
    serial = []
    if comm.rank == 0:
        one = build(data, comm=None).sim
        serial.append(one.state())
        one.run(300)
        serial.append(one.state())
    quiet_barrier(comm)                # the others sleep while rank 0 runs alone
    sim = build(data).sim
    st = sim.st
    n_global = int(np.count_nonzero(st.flags[: st.n_owned] & GLOBAL))
    got = [sim.state(gather=True)]
    sim.run(300)
    got.append(sim.state(gather=True))
    found = None
    if comm.rank == 0:
        found = [[k for k in FIELDS if k != "flags" and not np.array_equal(a[k], b[k])]
                 for a, b in zip(serial, got)]
    found = comm.bcast(found, root=0)
    assert comm.allgather(n_global) == [n_global] * comm.size and n_global >= 1
    assert found == [[], []]


@pytest.mark.mpi(min_size=2)
def test_rank_local_add_keeps_each_body_once(comm):
    """Simulation.add_spheres(uids=...): ranks pass overlapping sets; each body is kept by its
    owner only; next_uid is agreed; a bad uid on one rank is an error on every rank."""
    sim = parsim.Simulation(dt=1e-4, domain=([0, 0, 0], [1, 1, 1]), periodic=(True,) * 3)
    m = sim.add_material("m", 1000.0, restitution=0.5, collision_time=1e-3)
    x = (np.arange(40) + 0.5) / 40
    pos = np.stack([x, np.full(40, 0.5), np.full(40, 0.5)], 1)
    uids = 1000 + np.arange(40)
    # every rank passes a different, overlapping window (rank r: bodies 0 .. 40 - r)
    k = 40 - comm.rank
    sim.add_spheres(pos[:k], 0.01, m, uids=uids[:k])
    state = sim.state(gather=True)
    got = comm.bcast(None if state is None else state["uid"].tolist(), root=0)
    assert sim.next_uid == 1040
    # bodies 40 - r .. 39 are passed by ranks 0 .. r-1 only; their owner may have missed them,
    # so only check the bodies everyone passed, and that nothing is duplicated
    passed_by_all = set(range(1000, 1000 + 40 - comm.size + 1))
    assert passed_by_all <= set(got)
    assert len(got) == len(set(got))
    error = None
    try:
        sim.add_spheres(pos[:1], 0.01, m, uids=[5] if comm.rank == comm.size - 1 else [2000])
    except ValueError as e:
        error = str(e)
    assert error is not None and "uids must lie in" in error


def _seam(path) -> dict:
    """CONFIG's simulation and material in a unit box periodic along x only: a sphere read
    from ``path``, then a lattice of spheres filling the box."""
    data = tomllib.loads(CONFIG)
    data["domain"] = {"lo": [0.0, 0.0, 0.0], "hi": [1.0, 1.0, 1.0],
                      "periodic": [True, False, False]}
    data["bodies"] = [{"kind": "file", "path": str(path)},
                      {"kind": "lattice", "radius": 0.02, "spacing": 0.1,
                       "region": [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]}]
    return data


def test_a_lattice_point_overlapping_a_body_across_the_periodic_seam_is_left_out(tmp_path):
    """A sphere at x = 0.98 of radius 0.1 reaches x = 0.08 through the seam of the periodic x
    axis. Lattice points (radius 0.02) are left out where the centres are closer than 0.12: at
    x = 0.95 the one in line with the sphere and its 4 neighbours in y and z (0.104 away), at
    x = 0.05 the one in line (0.07 away, through the seam: only the image overlaps it); its
    neighbours there are 0.122 away and kept."""
    np.savez(tmp_path / "rock.npz", position=np.array([[0.98, 0.55, 0.55]]),
             radius=np.array([0.1]))
    cfg = build(_seam(tmp_path / "rock.npz"), comm=None)
    s = cfg.sim.state()
    lattice = s["uid"] != 0
    x = s["position"][lattice]
    assert lattice.sum() == 1000 - 6
    for cx in (0.05, 0.95):                          # the two columns next to the seam
        near = np.isclose(x[:, 0], cx) & (np.abs(x[:, 1] - 0.55) < 0.06) \
            & (np.abs(x[:, 2] - 0.55) < 0.06)
        assert not near.any(), cx
    d = x - [0.98, 0.55, 0.55]
    d[:, 0] -= np.round(d[:, 0])
    assert (np.sqrt((d * d).sum(axis=1)) >= 0.12).all()
