"""The config's file generator on several ranks reads rank-locally: each rank reads one slice of
the HDF5 rows and sends each sphere to its owner. The bodies (and a run from them) must be the
serial ones bit for bit, a global body (larger than the blocks allow) must reach every rank, and
a bad row must stop every rank with an error naming it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import h5py
import numpy as np
import pytest

from parsim import config
from parsim.bodies import GLOBAL
from parsim.config import ConfigError, build
from mpi_wait import quiet_barrier

FIELDS = ("uid", "shape", "params", "position", "orientation", "velocity", "angular_velocity",
          "mass", "material", "flags", "wraps")

CONFIG = """
[simulation]
dt = 1e-5
steps = 10

[domain]
lo = [0.0, 0.0, 0.0]
hi = [4.0, 4.0, 4.0]
periodic = [true, false, false]

[[materials]]
name = "m"
density = 1000.0
restitution = 0.5
collision_time = 1e-3

[[walls]]
point = [0.0, 0.0, 0.0]
normal = [0.0, 0.0, 1.0]

[[bodies]]
kind = "file"
path = "PATH"
velocity = [0.5, 0.0, 0.0]
"""


def write_spheres(path: Path, n: int = 3000, seed: int = 5, diameter: bool = False,
                  bad_row: int | None = None) -> None:
    """n small spheres (some beyond the periodic x bounds, to be wrapped) and, in row 17, one
    big sphere (radius 0.7: a global body on 2+ ranks)."""
    rng = np.random.default_rng(seed)
    pos = rng.uniform([-0.5, 0.4, 0.4], [4.5, 3.6, 3.6], (n, 3))
    near = np.linalg.norm(pos - 2.0, axis=1) < 0.8       # keep clear of the big sphere
    pos[near, 1] = rng.uniform(0.4, 1.0, int(near.sum()))
    rad = rng.uniform(0.02, 0.05, n)
    pos[17], rad[17] = (2.0, 2.0, 2.0), 0.7
    if bad_row is not None:
        rad[bad_row] = np.nan
    with h5py.File(path, "w") as f:
        f["position"] = pos
        f["diameter" if diameter else "radius"] = 2.0 * rad if diameter else rad
        f["velocity"] = rng.normal(0.0, 0.5, (n, 3))
        f["angular_velocity"] = rng.normal(0.0, 5.0, (n, 3))


def config_for(path: Path) -> dict:
    return tomllib.loads(CONFIG.replace("PATH", str(path)))


def test_slices_of_a_file_are_the_rows_of_the_whole(tmp_path):
    h5 = tmp_path / "s.h5"
    write_spheres(h5, n=101, diameter=True)
    npz = tmp_path / "s.npz"
    with h5py.File(h5, "r") as f:
        np.savez(npz, **{k: f[k][()] for k in f})
    t = config._Table({}, "bodies[0]", "test")
    for path in (h5, npz):
        whole = config._read_bodies(path, t)
        assert whole[4] == 0 and whole[0].shape == (101, 3)
        got = [config._read_bodies(path, t, part=(k, 4)) for k in range(4)]
        assert [g[4] for g in got] == [0, 25, 50, 75]
        for j in range(4):
            assert np.array_equal(np.concatenate([g[j] for g in got]), whole[j])


def test_bad_shapes_are_named(tmp_path):
    h5 = tmp_path / "s.h5"
    with h5py.File(h5, "w") as f:
        f["position"] = np.zeros((5, 3))
        f["radius"] = np.ones(4)
    t = config._Table({}, "bodies[0]", "test")
    with pytest.raises(ConfigError, match=r"'radius' must be one number or one per position"):
        config._read_bodies(h5, t)
    with h5py.File(h5, "w") as f:
        f["position"] = np.zeros((5, 3))
        f["radius"] = 0.1
        f["velocity"] = np.zeros((5, 2))
    with pytest.raises(ConfigError, match=r"'velocity' must have shape \(5, 3\)"):
        config._read_bodies(h5, t)
    with h5py.File(h5, "w") as f:      # a scalar radius is broadcast
        f["position"] = np.zeros((5, 3))
        f["radius"] = 0.1
    assert (config._read_bodies(h5, t)[1] == 0.1).all()


def _shared_file(comm, tmp_path, **kw) -> Path:
    """Rank 0 writes the file into its temporary directory; every rank gets the path."""
    path = None
    if comm.rank == 0:
        path = tmp_path / "spheres.h5"
        write_spheres(path, **kw)
    path = Path(comm.bcast(None if path is None else str(path), root=0))
    comm.Barrier()
    return path


@pytest.mark.mpi(min_size=2)
def test_rank_local_file_equals_the_serial_bodies(comm, tmp_path, monkeypatch):
    path = _shared_file(comm, tmp_path)
    data = config_for(path)
    serial = None
    if comm.rank == 0:
        s = build(data, comm=None).sim
        serial = (s.state(), s.next_uid)
        s.run(300)
        serial += (s.state(),)
    quiet_barrier(comm)                # the others sleep while rank 0 runs alone
    parts = []
    read = config._read_bodies
    monkeypatch.setattr(config, "_read_bodies",
                        lambda p, t, part=None: parts.append(part) or read(p, t, part))
    sim = build(data).sim
    before = sim.state(gather=True)
    n_owned = comm.gather(int(sim.st.n_owned), root=0)
    sim.run(300)
    after = sim.state(gather=True)
    verdict = None
    if comm.rank == 0:
        for st in (before, after):        # the big sphere is a global body here, not serially
            assert (st["flags"][st["uid"] == 1 + 17] & GLOBAL).all()
            st["flags"] = st["flags"] & ~np.uint8(GLOBAL)
        differ = [k for k in FIELDS if not np.array_equal(serial[0][k], before[k])]
        differ += [f"after 300 steps: {k}" for k in FIELDS
                   if not np.array_equal(serial[2][k], after[k])]
        verdict = (differ, serial[1], n_owned)
    differ, next_uid, n_owned = comm.bcast(verdict, root=0)
    assert differ == []
    assert sim.next_uid == next_uid == 1 + 3000          # the wall (uid 0), then the rows
    assert parts == [(comm.rank, comm.size)]               # this rank read its slice only
    assert min(n_owned) > 1                                  # the bodies are spread
    big = np.flatnonzero(sim.st.uid[: sim.st.n_owned] == 1 + 17)
    assert big.size == 1                                     # the global body is on every rank


@pytest.mark.mpi(min_size=2)
def test_a_bad_row_stops_every_rank_with_its_number(comm, tmp_path):
    path = _shared_file(comm, tmp_path, bad_row=2345)
    with pytest.raises(ConfigError, match=r"row 2345: the radius must be finite and > 0"):
        build(config_for(path))
