"""Snapshots in one shared HDF5 file, written collectively (h5py built for MPI).

PyPI's h5py (the test environment's) is serial, so these tests run `parsim run` in a second
environment, ``.venv-mpih5`` (Debian's python3-h5py-mpi for Open MPI, made by
``scripts/setup_mpi_h5py.sh``, which ``.ci/run`` calls), under Open MPI's ``mpiexec``, and read
the output back here with the serial reader. Compared bit for bit with the per-rank layout and
the serial run of the same environment (different numba/numpy versions than this one, so not
with this environment's runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

import extras
from parsim.io import open_run
from test_decomposition import CONFIG, check_xdmf, paraview_check, paraview_missing

REPO = Path(__file__).resolve().parents[1]
PYTHON = Path(os.environ.get("PARSIM_MPI_H5PY_PYTHON", REPO / ".venv-mpih5" / "bin" / "python"))
MPIEXEC = shutil.which("mpiexec.openmpi")
STATE = ("uid", "position", "orientation", "velocity", "angular_velocity", "wraps")



@pytest.fixture(autouse=True)
def _mpi_h5py():
    """Skip (or fail, under PARSIM_REQUIRE_EXTRAS=1) without the second environment."""
    if not (PYTHON.exists() and MPIEXEC):
        extras.missing(f"needs an interpreter with h5py built for MPI at {PYTHON} and Open "
                       "MPI's mpiexec.openmpi: run `bash scripts/setup_mpi_h5py.sh` (root, "
                       "Debian) first")


def _env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "MPI_", "HYDRA_", "OMPI_", "PMIX_"))}
    cache = Path(os.environ.get("NUMBA_CACHE_DIR", REPO / ".numba_cache")).resolve() / "mpih5"
    env.update(OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", NUMBA_CACHE_DIR=str(cache),
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONUNBUFFERED="1")
    # parsim from this checkout (the environment's editable install may point at another one)
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def _parsim(n, args, cwd, timeout=900, **env):
    """`parsim ARGS` in the MPI-h5py environment, on n ranks (n = 0: without mpiexec)."""
    cmd = [str(PYTHON), "-m", "mpi4py", "-m", "parsim", *args]
    if n:
        cmd = [MPIEXEC, "-n", str(n), *cmd]
    r = subprocess.run(cmd, cwd=cwd, env=_env(**env), capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


def _same(a, b, steps):
    for s in steps:
        x, y = a.snapshot(s), b.snapshot(s)
        bad = [k for k in STATE if not np.array_equal(x[k], y[k])]
        assert bad == [], (s, bad)


def test_shared_file_equals_per_rank_files_and_serial(tmp_path):
    """2 ranks: one file, plain (not virtual) datasets written by both ranks, the same bits as
    the per-rank layout and as the serial run; XDMF valid; a restart from a checkpoint appends
    to the shared file and reproduces the uninterrupted run."""
    cfg = tmp_path / "job.toml"
    cfg.write_text(CONFIG.format(blocks=""))
    _parsim(0, ["run", str(cfg), "--output", str(tmp_path / "serial")], tmp_path)
    r = _parsim(2, ["run", str(cfg), "--output", str(tmp_path / "shared"),
                    "--checkpoint-every", "200"], tmp_path)
    assert "2 rank(s) as blocks [2, 1, 1]" in r.stdout
    _parsim(2, ["run", str(cfg), "--output", str(tmp_path / "per_rank")], tmp_path,
            PARSIM_SNAPSHOT_LAYOUT="per-rank")
    shared = tmp_path / "shared"
    assert not (shared / "ranks").exists()
    with h5py.File(shared / "snapshots.h5") as f:
        assert f.attrs["layout"] == "shared"
        g = f["snapshots/0000000400"]
        assert not g["position"].is_virtual
        counts = list(g.attrs["counts"])
        assert len(counts) == 2 and min(counts) > 0
        assert np.array_equal(g["rank"][()], np.repeat([0, 1], counts))   # rank order
        assert np.array_equal(g["vertex_index"][()], np.arange(sum(counts)))
        assert set(f["timings"]) >= {"contacts", "communication", "output"}
        assert f["timings/contacts"].shape == (3,) and f["timings/contacts"][0] > 0
    a, b, c = open_run(tmp_path / "serial"), open_run(shared), open_run(tmp_path / "per_rank")
    assert a.steps == b.steps == c.steps == [0, 200, 400]
    _same(b, c, b.steps)
    _same(b, a, b.steps)
    # the simulation's attributes (domain, periodic axes, gravity, densities), written by the
    # shared-file writer's own code path, are those of the config and of the per-rank file
    lo, hi, periodic = b.domain
    assert lo.tolist() == [0.0, 0.0, 0.0] and hi.tolist() == [1.2, 0.6, 0.6]
    assert periodic.tolist() == [False, False, False]
    assert b.gravity.tolist() == [0.0, 0.0, -9.81]
    assert b.densities == {"grain": 2500.0}
    for x, y in zip(b.domain, c.domain):
        assert np.array_equal(x, y)
    assert np.array_equal(b.gravity, c.gravity) and b.densities == c.densities
    check_xdmf(shared / "snapshots.xmf", n_steps=3)
    if paraview_missing() is None:      # (its absence is reported by test_decomposition.py)
        paraview_check(shared / "snapshots.xmf", n_steps=3)
    # restart from the checkpoint of step 200 into a copy of the directory
    again = tmp_path / "again"
    shutil.copytree(shared, again)
    ck = sorted((again / "checkpoints").glob("checkpoint_*200.h5"))
    assert ck, sorted(p.name for p in (again / "checkpoints").iterdir())
    _parsim(2, ["restart", str(ck[0]), "--output", str(again)], tmp_path)
    d = open_run(again)
    assert d.steps == [0, 200, 400]
    _same(d, b, d.steps)


SPARSE = """
[simulation]
dt = 1e-4
steps = 100
gravity = [0.0, 0.0, -9.81]
seed = 4
skin = 0.02

[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.2, 0.4, 0.4]
walls = true
blocks = [3, 1, 1]

[output]
every = 50

[[materials]]
name = "grain"
density = 2500.0
restitution = 0.6
collision_time = 1e-3
friction = 0.5

[[bodies]]
kind = "random"
shape = "sphere"
material = "grain"
radius = 0.02
region = [[0.02, 0.02, 0.02], [0.3, 0.38, 0.38]]
count = 120
"""


def test_ranks_without_bodies_take_part_in_the_collective_writes(tmp_path):
    """3 blocks along x, all bodies in the first: ranks 1 and 2 write empty selections (a
    skipped collective write would hang the others) and the file is complete."""
    cfg = tmp_path / "sparse.toml"
    cfg.write_text(SPARSE.replace("blocks = [3, 1, 1]\n", ""))
    _parsim(0, ["run", str(cfg), "--output", str(tmp_path / "serial")], tmp_path)
    cfg.write_text(SPARSE)
    _parsim(3, ["run", str(cfg), "--output", str(tmp_path / "shared")], tmp_path, timeout=600)
    with h5py.File(tmp_path / "shared" / "snapshots.h5") as f:
        assert f.attrs["layout"] == "shared"
        g = f["snapshots/0000000100"]
        assert list(g.attrs["counts"]) == [g["uid"].shape[0], 0, 0]     # 120 spheres + 6 walls
    a, b = open_run(tmp_path / "serial"), open_run(tmp_path / "shared")
    assert a.steps == b.steps == [0, 50, 100]
    _same(a, b, a.steps)
