"""scripts/analyze_run.py against independent answers: the engine's kinetic energy, the packing
fraction of lattices (exact in whole-layer bins), and the ranks' own body counts."""

from __future__ import annotations

import csv
import importlib.util
import math
import os
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import parsim
import parsim.io
from parsim.output_shared import open_writer
from parsim.runner import run_config
from mpi_wait import quiet_bcast

REPO = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
_spec = importlib.util.spec_from_file_location("analyze_run", REPO / "scripts" / "analyze_run.py")
analyze_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(analyze_run)

QUIET = open(os.devnull, "w")

MATERIALS = """
[[materials]]
name = "steel"
density = 7800.0
restitution = 0.6
collision_time = 2e-3

[[materials]]
name = "wood"
density = 700.0
restitution = 0.5
collision_time = 2e-3
"""


def _random_quaternions(rng, n):
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1)[:, None]


def test_kinetic_energy_equals_the_engines(tmp_path):
    """Free spheres, boxes and capsules of two materials, spinning about random axes in random
    orientations: the script's energy (from the snapshot's arrays and the config's densities)
    equals Simulation.kinetic_energy at every snapshot."""
    rng = np.random.default_rng(7)
    sim = parsim.Simulation(dt=1e-4, domain=([0, 0, 0], [1, 1, 1]), comm=None)
    steel = sim.add_material("steel", 7800.0, restitution=0.6, collision_time=2e-3)
    wood = sim.add_material("wood", 700.0, restitution=0.5, collision_time=2e-3)
    g = np.stack(np.meshgrid(*[np.arange(4)] * 3, indexing="ij"), -1).reshape(-1, 3)
    centres = 0.125 + 0.25 * g                                   # 64 places, 0.25 apart
    n = 20
    vel = lambda: rng.uniform(-0.5, 0.5, (n, 3))               # noqa: E731
    spin = lambda: rng.uniform(-40.0, 40.0, (n, 3))            # noqa: E731
    sim.add_spheres(centres[:n], rng.uniform(0.02, 0.04, n), steel, vel(), spin())
    sim.add_boxes(centres[n:2 * n], rng.uniform(0.01, 0.05, (n, 3)), wood,
                  _random_quaternions(rng, n), vel(), spin())
    sim.add_capsules(centres[2 * n:3 * n], rng.uniform(0.01, 0.03, n), rng.uniform(0.02, 0.1, n),
                     steel, _random_quaternions(rng, n), vel(), spin())
    text = "[simulation]\ndt = 1e-4\n" + MATERIALS
    out = tmp_path / "run"
    writer = open_writer(out, text, "free.toml", sim)
    expected = []
    for _ in range(3):
        writer.write(sim)
        expected.append(sim.kinetic_energy())
        sim.run(40)
    writer.close()

    res = analyze_run.analyze(out, quiet=True)
    assert res["n_bodies"].tolist() == [3 * n] * 3
    np.testing.assert_allclose(res["ke"], expected, rtol=1e-12)
    assert np.all(res["ke_rot"] > 0.2 * res["ke"])              # the rotation part matters
    mass = sim.st.mass[:sim.st.n_owned]
    v = sim.st.velocity[:sim.st.n_owned]
    assert res["ke_trans"][-1] == pytest.approx(0.5 * np.sum(mass * np.sum(v * v, axis=1)),
                                                rel=1e-12)
    for name in ("energy.png", "packing.png", "load.png", "timeseries.csv", "profile.csv",
                 "summary.txt"):
        assert (out / "analysis" / name).stat().st_size > 0, name
    rows = np.genfromtxt(out / "analysis" / "timeseries.csv", delimiter=",", names=True)
    np.testing.assert_array_equal(rows["ke"], res["ke"])


LATTICE = """
[simulation]
dt = 1e-4
steps = 0
gravity = [0.0, 0.0, -9.81]

[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.08, 0.06, 0.2]
periodic = [true, true, false]

[output]
every = 1
""" + MATERIALS


@pytest.mark.parametrize("shape, size, solid", [
    ("sphere", "radius = 0.005", 4.0 / 3.0 * math.pi * 0.005 ** 3),
    ("box", "half_extents = [0.004, 0.002, 0.0015]\nrandom_orientation = false",
     8 * 0.004 * 0.002 * 0.0015),
    ("capsule", "radius = 0.002\nlength = 0.006\nrandom_orientation = false",
     math.pi * 0.002 ** 2 * 0.006 + 4.0 / 3.0 * math.pi * 0.002 ** 3),
])
def test_packing_profile_of_a_lattice(tmp_path, shape, size, solid):
    """A simple cubic lattice (spacing 1 cm) filling z in [2, 10) cm: with 1 cm bins aligned
    with its layers, each filled bin holds one whole layer, so its solid fraction is
    body volume / spacing^3 exactly, the others hold nothing; the bed fraction is the
    total body volume over the box spanned by the lowest and the highest body."""
    s = 0.01
    cfg = tmp_path / f"{shape}.toml"
    cfg.write_text(LATTICE + f"""
[[bodies]]
kind = "lattice"
shape = "{shape}"
material = "steel"
{size}
spacing = {s}
region = [[0.0, 0.0, 0.02], [0.08, 0.06, 0.1]]
""")
    out = tmp_path / "out"
    assert run_config(str(cfg), str(out), stream=QUIET) == 0
    res = analyze_run.analyze(out, nbins=20, quiet=True)
    phi = res["profile_phi"]
    filled = (res["profile_centres"] > 0.02) & (res["profile_centres"] < 0.1)
    assert filled.sum() == 8
    np.testing.assert_allclose(phi[filled], solid / s ** 3, rtol=1e-9)
    assert np.all(phi[~filled] == 0.0)
    # profile.csv holds the same numbers, as plain numbers (until 2026-11-25 its solid_volume
    # and phi columns read "np.float64(...)" with numpy 2)
    with open(out / "analysis" / "profile.csv") as fh:
        table = list(csv.reader(fh))
    assert table[0] == ["height_lo", "height_hi", "solid_volume", "phi"]
    values = np.array([[float(x) for x in r] for r in table[1:]])
    np.testing.assert_array_equal(values[:, 3], phi)
    with open(out / "analysis" / "timeseries.csv") as fh:
        for r in list(csv.reader(fh))[1:]:
            [float(x) for x in r]
    n_bodies = 8 * 6 * 8
    assert res["n_bodies"][-1] == n_bodies
    assert res["solid_in_bins"] == pytest.approx(n_bodies * solid, rel=1e-9)
    assert res["solid_total"] == pytest.approx(n_bodies * solid, rel=1e-12)
    # the extent along z of the lowest / highest body: centres at 2.5 and 9.5 cm
    half = {"sphere": 0.005, "box": 0.0015, "capsule": 0.002}[shape]
    assert res["bed_bottom"] == pytest.approx(0.025 - half, abs=1e-12)
    assert res["bed_top"] == pytest.approx(0.095 + half, abs=1e-12)
    height = 0.07 + 2 * half
    assert res["phi_bed"] == pytest.approx(n_bodies * solid / (0.08 * 0.06 * height), rel=1e-9)
    if shape == "sphere":
        # bulk: one mean diameter (1 cm) in from bottom (2 cm) and top (10 cm): 6 whole layers
        assert res["mean_diameter"] == pytest.approx(0.01, rel=1e-12)
        assert res["phi_bulk"] == pytest.approx(math.pi / 6, rel=1e-9)


def test_bad_input_names_the_file_and_the_fix(tmp_path):
    with pytest.raises(SystemExit, match="snapshots.h5"):
        analyze_run.main([str(tmp_path)])
    assert not (tmp_path / "analysis").exists()      # nothing made in a directory that is no run
    # a run whose config lacks the density of a material: the error names it and --density
    sim = parsim.Simulation(dt=1e-4, domain=([0, 0, 0], [1, 1, 1]), comm=None)
    m = sim.add_material("glass", 2500.0, restitution=0.5, collision_time=2e-3)
    sim.add_sphere([0.5, 0.5, 0.5], 0.1, m, velocity=(1.0, 0.0, 0.0))
    writer = open_writer(tmp_path / "run", "[simulation]\ndt = 1e-4\n", "", sim)
    writer.write(sim)
    writer.close()
    # the file stores the densities; one written before they were (without the attribute)
    # and without them in its config must be given them
    assert analyze_run.main([str(tmp_path / "run"), "--quiet"])["ke"][0] > 0
    with h5py.File(tmp_path / "run" / "snapshots.h5", "a") as f:
        del f["materials"].attrs["density"]
    with pytest.raises(SystemExit, match=r"glass.*--density NAME=RHO"):
        analyze_run.main([str(tmp_path / "run"), "--quiet"])
    res = analyze_run.main([str(tmp_path / "run"), "--quiet", "--density", "glass=2500"])
    m = 2500.0 * 4.0 / 3.0 * math.pi * 0.1 ** 3
    assert res["ke"][0] == pytest.approx(0.5 * m, rel=1e-12)
    with pytest.raises(SystemExit, match="no snapshot at step 5"):
        analyze_run.main([str(tmp_path / "run"), "--quiet", "--density", "glass=2500",
                          "--step", "5"])


def test_density_of_a_material_the_run_does_not_have_is_an_error(tmp_path):
    """--density NAME=RHO with a NAME that is no material of the run (a typo) stops with the
    run's materials; it was silently ignored."""
    sim = parsim.Simulation(dt=1e-4, domain=([0, 0, 0], [1, 1, 1]), comm=None)
    steel = sim.add_material("steel", 7800.0, restitution=0.6, collision_time=2e-3)
    sim.add_material("wood", 700.0, restitution=0.5, collision_time=2e-3)
    sim.add_sphere([0.5, 0.5, 0.5], 0.1, steel, velocity=(1.0, 0.0, 0.0))
    writer = open_writer(tmp_path / "run", "[simulation]\ndt = 1e-4\n" + MATERIALS, "", sim)
    writer.write(sim)
    writer.close()
    with pytest.raises(SystemExit, match=r"unknown material\(s\) 'stel' \(the run's materials: "
                                         r"steel, wood\)"):
        analyze_run.main([str(tmp_path / "run"), "--quiet", "--density", "stel=7800"])
    assert not (tmp_path / "run" / "analysis" / "summary.txt").exists()
    res = analyze_run.main([str(tmp_path / "run"), "--quiet", "--density", "steel=7000"])
    assert res["ke"][0] == pytest.approx(0.5 * 7000.0 * 4.0 / 3.0 * math.pi * 0.1 ** 3,
                                         rel=1e-12)


def _scripted_lattice(out):
    """A simple cubic lattice of touching spheres (r = 0.5 cm, spacing 1 cm) filling
    y in [2, 10) cm of a 8 x 20 x 6 cm domain, periodic in x and z, gravity along -y, written by
    a script with no config text (as in the walkthrough that found the file lacked its domain).
    Returns the simulation."""
    sim = parsim.Simulation(dt=1e-4, gravity=(0.0, -9.81, 0.0),
                            domain=([0.0, 0.0, 0.0], [0.08, 0.2, 0.06]),
                            periodic=(True, False, True), comm=None)
    glass = sim.add_material("glass", 2500.0, restitution=0.5, collision_time=1e-3)
    g = np.stack(np.meshgrid(np.arange(8), np.arange(8), np.arange(6), indexing="ij"),
                 -1).reshape(-1, 3)
    sim.add_spheres(0.005 + 0.01 * g + np.array([0.0, 0.02, 0.0]), 0.005, glass)
    writer = open_writer(out, sim=sim)
    writer.write(sim)
    writer.close()
    return sim


def test_scripted_run_without_config_uses_the_files_domain_and_gravity(tmp_path):
    """A run written by a script without a config text: the file stores the domain, the
    periodic flags, gravity and the densities, and the analysis uses them (it assumed the domain
    [0, 1]^3 and no gravity: packing fractions 1/0.0048 too low, along z)."""
    out = tmp_path / "run"
    sim = _scripted_lattice(out)
    with parsim.io.open_run(out) as run:
        assert run.config == ""
        lo, hi, periodic = run.domain
        np.testing.assert_array_equal(lo, sim.lo)
        np.testing.assert_array_equal(hi, sim.hi)
        assert periodic.tolist() == [True, False, True]
        np.testing.assert_array_equal(run.gravity, [0.0, -9.81, 0.0])
        assert run.densities == {"glass": 2500.0}
    res = analyze_run.analyze(out, nbins=20, quiet=True)       # no --density needed
    np.testing.assert_array_equal(res["up"], [0.0, 1.0, 0.0])
    assert res["area"] == pytest.approx(0.08 * 0.06, rel=1e-12)
    assert res["bed_bottom"] == pytest.approx(0.02, abs=1e-12)
    assert res["bed_top"] == pytest.approx(0.1, abs=1e-12)
    filled = (res["profile_centres"] > 0.02) & (res["profile_centres"] < 0.1)
    np.testing.assert_allclose(res["profile_phi"][filled], math.pi / 6, rtol=1e-9)
    assert res["phi_bulk"] == pytest.approx(math.pi / 6, rel=1e-9)
    assert "packing at step 0 along +y: 20 bins" in res["summary"]


def test_old_scripted_file_without_domain_gets_no_packing_and_says_why(tmp_path):
    """The same file without the attributes (as written before they were stored): the script
    does not assume a domain or gravity; the energies are still computed."""
    out = tmp_path / "run"
    _scripted_lattice(out)
    with h5py.File(out / "snapshots.h5", "a") as f:
        for k in ("domain_lo", "domain_hi", "periodic", "gravity"):
            del f.attrs[k]
    with parsim.io.open_run(out) as run:
        assert run.domain is None and run.gravity is None
    res = analyze_run.analyze(out, out_dir=tmp_path / "ana", quiet=True)
    assert "domain is unknown" in res["no_packing"]
    assert "packing: not computed: the run's domain is unknown" in res["summary"]
    assert math.isnan(res["phi_bed"]) and math.isnan(res["phi_bulk"])
    assert res["profile_phi"].size == 0
    assert not (tmp_path / "ana" / "packing.png").exists()
    assert res["n_bodies"].tolist() == [8 * 8 * 6] and res["ke"].tolist() == [0.0]


GAS = """
[simulation]
dt = 1e-4
steps = 300

[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.08, 0.06, 0.2]
periodic = [true, true, true]

[output]
every = 100
""" + MATERIALS + """
[[bodies]]
kind = "lattice"
shape = "sphere"
material = "steel"
radius = 0.004
spacing = 0.01
jitter = 0.0005
random_velocity = 0.3
"""


@pytest.mark.mpi(min_size=2)
def test_bodies_per_rank_match_the_ranks_counts(comm, mpi_tmp_path):
    """On several ranks: the per-rank body counts the script derives from the ``rank`` field
    of the snapshots equal the counts each rank reported itself (the ``counts`` attribute of
    each snapshot), and every rank owns some bodies."""
    cfg = mpi_tmp_path / "gas.toml"
    if comm.rank == 0:
        cfg.write_text(GAS)
    comm.Barrier()
    assert run_config(str(cfg), str(mpi_tmp_path / "par"), stream=QUIET) == 0
    comm.Barrier()
    found = None
    if comm.rank == 0:                       # only rank 0 analyses; the others wait in bcast
        try:
            res = analyze_run.analyze(mpi_tmp_path / "par", quiet=True)
            with h5py.File(mpi_tmp_path / "par" / "snapshots.h5", "r") as f:
                counts = [f["snapshots"][s].attrs["counts"].tolist()
                          for s in sorted(f["snapshots"])]
            found = (res["n_ranks"], res["per_rank"].tolist(), counts)
        except Exception as e:               # reported on every rank, after the bcast
            found = repr(e)
    found = quiet_bcast(comm, found)
    assert isinstance(found, tuple), found
    n_ranks, per_rank, counts = found
    assert n_ranks == comm.size
    assert len(per_rank) == 4
    assert all(sum(row) == 8 * 6 * 20 for row in per_rank)
    assert all(c > 0 for row in per_rank for c in row)
    assert per_rank == counts


def test_ranks_text_of_runs_restarted_on_other_ranks():
    assert analyze_run._ranks_text(np.array([2, 2, 1, 1])) == "2 -> 1 rank(s)"
    assert analyze_run._ranks_text(np.array([4])) == "4 rank(s)"
    assert analyze_run._ranks_text(np.array([1, 2, 2, 4])) == "1 -> 2 -> 4 rank(s)"


@pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpiexec next to the interpreter")
def test_load_of_a_run_restarted_on_other_ranks(tmp_path):
    """A run of the gas on 2 ranks (spawned mpiexec) to step 200, restarted serially to 300: the
    summary reads '2 -> 1 rank(s)', and the load of each snapshot is taken over its own ranks
    (the last one [960], max/mean 1.000; it read [960, 0], 2.000, before 2026-11-27)."""
    import subprocess

    from parsim.runner import restart

    cfg = tmp_path / "gas.toml"
    cfg.write_text(GAS)
    env = dict(os.environ, NUMBA_CACHE_DIR=os.path.abspath(
        os.environ.get("NUMBA_CACHE_DIR", REPO / ".numba_cache")))
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "mpi4py", "-m", "parsim",
                        "run", str(cfg), "--output", str(tmp_path / "run"), "--steps", "200",
                        "--checkpoint-every", "100"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    ckpt = tmp_path / "run" / "checkpoints" / "checkpoint_0000000200.h5"
    assert restart(str(ckpt), None, 300, stream=QUIET) == 0
    res = analyze_run.analyze(tmp_path / "run", quiet=True)
    assert res["snap_ranks"].tolist() == [2, 2, 2, 1]
    per_rank = res["per_rank"].tolist()
    assert per_rank[-1] == [960, 0] and all(a > 0 and b > 0 and a + b == 960
                                            for a, b in per_rank[:3])
    assert "2 -> 1 rank(s)" in res["summary"]
    assert "at the last snapshot [960] (sum 960); max/mean: last 1.000" in res["summary"]
