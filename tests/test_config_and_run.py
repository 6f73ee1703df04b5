"""TOML configs (validation, generators), ``parsim run`` and its HDF5 snapshots."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import parsim
from parsim import io as pio
from parsim.config import ConfigError, build, load
from parsim.runner import run_config

REPO = Path(__file__).resolve().parents[1]

BASE = """
[simulation]
dt = 1e-4
steps = 50
gravity = [0.0, 0.0, -9.81]
seed = 5

[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.0, 1.0, 2.0]
walls = true

[output]
every = 20
progress_every = 25

[[materials]]
name = "glass"
density = 2500.0
restitution = 0.5
collision_time = 1e-3
friction = 0.5

[[bodies]]
kind = "random"
shape = "sphere"
radius = 0.03
scale = { distribution = "uniform", min = 0.5, max = 1.0 }
region = [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
count = 300
"""


def _cfg(extra: str = "", base: str = BASE, **replace) -> dict:
    text = base
    for k, v in replace.items():
        text = text.replace(k, v)
    return tomllib.loads(text + extra)


def test_random_generator_places_non_overlapping_bodies_deterministically():
    a = build(_cfg()).sim.state()
    b = build(_cfg()).sim.state()
    assert np.array_equal(a["position"], b["position"])
    spheres = a["shape"] == 0
    p, r = a["position"][spheres], a["params"][spheres, 0]
    assert len(p) == 300
    d = np.linalg.norm(p[:, None] - p[None], axis=2) - (r[:, None] + r[None])
    np.fill_diagonal(d, 1.0)
    assert d.min() >= 0.0                                  # brute-force overlap check
    assert (p - r[:, None] >= 0).all() and (p + r[:, None] <= [1, 1, 1]).all()
    assert 0.015 <= r.min() and r.max() <= 0.03
    c = build(_cfg(base=BASE.replace("seed = 5", "seed = 6"))).sim.state()
    assert not np.array_equal(a["position"], c["position"])


@pytest.mark.parametrize("box, r", [(0.2, 0.045), (0.31, 0.05), (1.0, 0.03), (0.5, 0.11)])
def test_random_sequential_addition_never_overlaps(box, r):
    """parsim.config._rsa (the global placement of `random` and `rain`) against brute force:
    equal balls and one obstacle, 20 seeds each. Its grid's cells were smaller than 2 r_max
    until 2026-11-28, and balls two cells apart could overlap (13 of 20 seeds at the first
    size; found by a fuzzer)."""
    from parsim.config import _rsa

    lo, hi = np.zeros(3), np.full(3, box)
    obs_pos, obs_r = np.array([[box / 2, box / 2, -r / 2]]), np.array([r])  # half outside
    for seed in range(20):
        radii = np.full(60, r)
        out = np.zeros((60, 3))
        k = _rsa(lo, hi, radii, obs_pos, obs_r, seed, 200, out)
        p = np.concatenate([out[:k], obs_pos])
        rr = np.concatenate([radii[:k], obs_r])
        d = np.linalg.norm(p[:, None] - p[None], axis=2) - (rr[:, None] + rr[None])
        np.fill_diagonal(d, 1.0)
        assert k >= 2 and d.min() >= 0.0, (seed, k, d.min())
        assert (out[:k] - r >= lo).all() and (out[:k] + r <= hi).all()


def test_lattice_lognormal_and_choice_sizes():
    """Sizes follow the distributions: besides the bounds, the lognormal's median and its
    +-sigma band and the choice's weights, each within 5 binomial standard deviations of
    900 draws (the lattice's counter-based draws are fixed by the seed)."""
    cfg = _cfg(base=BASE.split("[[bodies]]")[0], extra="""
[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.04
spacing = 0.1
region = [[0.0, 0.0, 0.0], [1.0, 1.0, 0.9]]
scale = { distribution = "lognormal", median = 0.8, sigma = 0.2, min = 0.5, max = 1.0 }

[[bodies]]
kind = "lattice"
shape = "capsule"
radius = 0.02
length = 0.05
spacing = 0.1
region = [[0.0, 0.0, 1.0], [1.0, 1.0, 1.9]]
scale = { distribution = "choice", values = [0.5, 1.0], weights = [1, 3] }
""")
    s = build(cfg).sim.state()

    def binomial_ok(hits, n, p):
        return abs(hits - n * p) <= 5 * math.sqrt(n * p * (1 - p))

    sph = s["shape"] == 0
    n = 10 * 10 * 9
    assert sph.sum() == n
    r = s["params"][sph, 0]
    assert r.min() >= 0.02 and r.max() <= 0.04 and r.std() > 0
    scale = r / 0.04
    assert binomial_ok((scale < 0.8).sum(), n, 0.5)                  # median 0.8
    # within one sigma of the median (0.655 .. 0.977, inside the clip bounds): 68.27 %
    inside = ((scale > 0.8 * math.exp(-0.2)) & (scale < 0.8 * math.exp(0.2))).sum()
    assert binomial_ok(inside, n, math.erf(1 / math.sqrt(2)))
    cap = s["shape"] == 2
    assert cap.sum() == n
    assert set(np.round(s["params"][cap, 0], 12)) == {0.01, 0.02}
    assert binomial_ok((s["params"][cap, 0] > 0.015).sum(), n, 0.75)   # weights 1 : 3
    assert np.allclose(s["params"][cap, 1], s["params"][cap, 0] * 1.25)   # half length scales too


def test_file_generator_reads_the_peer_bed():
    cfg = load(REPO / "configs" / "s2b_bed.toml")
    s = cfg.sim.state()
    with np.load(REPO / "configs" / "data" / "bed_n20.npz") as f:
        pos = f["position"]
        vel = f["velocity"]
    sph = s["shape"] == 0
    assert sph.sum() == 8000
    assert np.array_equal(s["position"][sph], pos)
    assert np.array_equal(s["velocity"][sph], vel)


def test_rain_pours_batches_during_the_run(tmp_path):
    text = BASE.replace('kind = "random"', 'kind = "rain"').replace(
        "count = 300", "count = 40\nevery = 10\ntotal = 100")
    p = tmp_path / "rain.toml"
    p.write_text(text)
    out = tmp_path / "out"
    assert run_config(str(p), str(out), steps=35) == 0
    run = pio.open_run(out)
    assert run.steps == [0, 20, 35]
    counts = [np.count_nonzero(run.snapshot(s)["shape"] == 0) for s in run.steps]
    assert counts == [40, 80, 100]      # poured at steps 0, 10 and 20 (40 + 40 + 20 = total)


@pytest.mark.parametrize("edit, message", [
    (("dt = 1e-4", "dt = -1.0"), r"\[simulation\]\.dt: = -1.0 is outside the allowed range \(0.0"),
    (("steps = 50", "steps = 2.5"), r"\[simulation\]\.steps: must be an integer"),
    (("seed = 5", "seed = 5\nbogus = 1"), r"\[simulation\]: unknown field\(s\) bogus"),
    (("hi = [1.0, 1.0, 2.0]", "hi = [1.0, 1.0]"), r"\[domain\]\.hi: must be a list of 3 numbers"),
    (("hi = [1.0, 1.0, 2.0]", "hi = [1.0, -1.0, 2.0]"), r"\[domain\]\.hi: must exceed lo"),
    (("restitution = 0.5", "restitution = 1.5"), r"\[\[materials\]\]\[0\]: material 'glass': restitution = 1.5"),
    (("radius = 0.03", "radius = 0"), r"\[\[bodies\]\]\[0\]\.radius: = 0 is outside"),
    (('kind = "random"', 'kind = "spiral"'), r"\[\[bodies\]\]\[0\]\.kind: = 'spiral'; allowed: 'lattice'"),
    (("count = 300", "count = 300000"), r"\[\[bodies\]\]\[0\]\.count: only the first \d+ of 300000 bodies fit"),
    (("min = 0.5, max = 1.0", "min = 0.5, max = 0.1"), r"scale\.max: = 0.1 is outside"),
    (("region = [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]", "region = [[0.0, 0.0, 0.0], [1.0, 1.0, 3.0]]"),
     r"\[\[bodies\]\]\[0\]\.region: must lie inside the domain"),
    (('shape = "sphere"', 'shape = "sphere"\nmaterial = "rubber"'), r"\[\[bodies\]\]\[0\]\.material: unknown material 'rubber'"),
    # material fields: a bool or a string is not a number (both were taken as numbers until
    # 2026-11-24: collision_time = true was 1 s), a typo's hint names every material key
    (("collision_time = 1e-3", "collision_time = true"), r"\[\[materials\]\]\[0\]\.collision_time: must be a number, got True"),
    (("density = 2500.0", 'density = "2500"'), r"\[\[materials\]\]\[0\]\.density: must be a number, got '2500'"),
    (("restitution = 0.5", "restitution = 0.5\nrolling_fricton = 0.1"), r"unknown field\(s\) rolling_fricton \(allowed: .*rolling_friction"),
    (("[[materials]]", "[materials]"), r"\[materials\] must be an array of tables: write \[\[materials\]\]"),
    # found by a fuzzer (2026-11-28): a fixed body's velocity was dropped without a word, a
    # median outside [min, max] made every size a bound, a lattice jitter that moved points
    # out of the domain was blamed on the shape
    (('shape = "sphere"', 'shape = "sphere"\nfixed = true\nrandom_velocity = 1.0'),
     r"\[\[bodies\]\]\[0\]\.fixed: fixed bodies do not move, so velocity and random_velocity"),
    (('{ distribution = "uniform", min = 0.5, max = 1.0 }',
      '{ distribution = "lognormal", median = 5.0, sigma = 0.3, min = 0.5, max = 2.0 }'),
     r"scale\.median: = 5.0 lies outside \[min, max\] = \[0.5, 2.0\]"),
    (("count = 300", "spacing = 0.1\njitter = 0.5", 'kind = "random"', 'kind = "lattice"'),
     r"\[\[bodies\]\]\[0\]\.jitter: = 0.5 moves lattice point \d+ to .* outside the domain"),
    # blocks for another rank count: said once (until 2026-11-28 "blocks: = [2, 2, 1]: blocks =
    # [2, 2, 1] must be ...", the API's message inside the config's)
    (("hi = [1.0, 1.0, 2.0]", "hi = [1.0, 1.0, 2.0]\nblocks = [2, 2, 1]"),
     r"^x.toml: \[domain\]\.blocks: = \[2, 2, 1\] makes 4 blocks, but the number of MPI ranks "
     r"\(1\) must equal the number of blocks: run on 4 ranks, give 3 counts whose product is 1, "
     r"or drop blocks to let parsim choose$"),
    # materials that do not mix: said with the file and entries before anything runs (until
    # 2026-11-28 the first step raised "set their pair with set_interaction(a, b, ...)")
    (("[[bodies]]", '[[materials]]\nname = "steel"\ndensity = 7800.0\nstiffness = 1e5\n'
      'damping = 10.0\n\n[[bodies]]'), r"x.toml: \[\[materials\]\]\[0\] \('glass'\) and "
     r"\[\[materials\]\]\[1\] \('steel'\) have different parameter forms .* give every material "
     r"the same model and the same form"),
    (("[[bodies]]", '[[materials]]\nname = "rubber"\ndensity = 1100.0\nstiffness = 1e7\n'
      'damping = 10.0\nmodel = "hertz"\n\n[[bodies]]'),
     r"\('glass'\) and \[\[materials\]\]\[1\] \('rubber'\) have different contact models "
     r"\(hooke and hertz\)"),
])
def test_config_errors_name_the_field(edit, message):
    with pytest.raises(ConfigError, match=message):
        build(_cfg(**dict(zip(edit[::2], edit[1::2]))), "x.toml")


def test_the_api_refuses_booleans_and_strings_as_material_numbers():
    sim = parsim.Simulation(dt=1e-5)
    for kw in ({"density": "2500", "restitution": 0.5, "collision_time": 1e-3},
               {"density": 2500.0, "restitution": True, "collision_time": 1e-3},
               {"density": 2500.0, "restitution": 0.5, "collision_time": np.bool_(True)}):
        with pytest.raises(ValueError, match="must be a number"):
            sim.add_material("m", **kw)
    m = sim.add_material("m", np.float32(2500.0), restitution=np.int64(1), collision_time=1e-3)
    # numpy numbers are numbers: stored as Python floats with their values
    assert (m.density, m.restitution, m.collision_time) == (2500.0, 1.0, 1e-3)
    assert type(m.density) is float and type(m.restitution) is float


def test_unreadable_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.toml: cannot read the config file"):
        load(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[simulation\ndt = 1")
    with pytest.raises(ConfigError, match=r"bad.toml: not valid TOML"):
        load(bad)


def test_every_shipped_config_validates():
    """Every config in configs/ loads and passes the time-step check of `parsim run`
    (configs/sand_and_rocks.toml, dt = 0.1 x its collision time, was refused by a rounding
    error until 2026-11-24)."""
    for p in sorted((REPO / "configs").glob("*.toml")):
        cfg = load(p)
        assert cfg.sim.n_bodies > 0, p
        cfg.sim._check_dt()


def test_a_time_step_of_exactly_a_tenth_of_the_collision_time_is_accepted():
    for tc in (4e-4, 2e-4, 1e-3, 3e-5):
        sim = parsim.Simulation(dt=tc / 10, domain=([0, 0, 0], [1, 1, 1]))
        m = sim.add_material("m", 2500.0, restitution=0.6, collision_time=tc)
        sim.add_sphere((0.5, 0.5, 0.5), 0.05, m)
        sim._setup()
        bad = parsim.Simulation(dt=tc / 10 * 1.001, domain=([0, 0, 0], [1, 1, 1]))
        m = bad.add_material("m", 2500.0, restitution=0.6, collision_time=tc)
        bad.add_sphere((0.5, 0.5, 0.5), 0.05, m)
        with pytest.raises(parsim.SimulationError, match="exceeds 0.1 x the smallest collision"):
            bad._setup()


def test_parsim_run_cli_writes_snapshots_and_progress(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(BASE)
    out = tmp_path / "o"
    r = subprocess.run([sys.executable, "-m", "parsim", "run", str(p), "--output", str(out),
                        "--steps", "40"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "steps/s" in r.stdout and "contacts" in r.stdout and "ETA" in r.stdout
    run = pio.open_run(out)
    assert run.steps == [0, 20, 40]                      # cadence + the last step
    snap = run.snapshot(-1)
    assert snap["status"] == "ok" and snap["step"] == 40
    assert np.all(np.diff(snap["uid"]) > 0)
    for k in ("uid", "params", "position", "orientation", "velocity", "angular_velocity"):
        assert snap[k].shape[0] == 300 + 6
    assert "restitution = 0.5" in run.config
    # the same config run from Python gives the same bits
    cfg = load(p, steps=40)
    cfg.sim.run(40)
    assert np.array_equal(cfg.sim.state()["position"], snap["position"])


def test_failed_run_keeps_its_output_and_names_the_body(tmp_path):
    text = BASE.replace("walls = true", "walls = false").replace(
        'count = 300', 'count = 3\nvelocity = [0.0, 0.0, -40.0]')
    p = tmp_path / "c.toml"
    p.write_text(text)
    out = tmp_path / "o"
    r = subprocess.run([sys.executable, "-m", "parsim", "run", str(p), "--output", str(out)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 1
    assert "left the domain" in r.stderr and "body uid" in r.stderr and "at step" in r.stderr
    run = pio.open_run(out)
    assert run.snapshot(0)["status"] == "ok"
    last = run.snapshot(-1)
    assert last["status"] == "failed" and last["step"] > 0


def test_a_failure_in_the_first_step_keeps_the_snapshot_of_step_zero(tmp_path):
    """Bodies at 1000 m/s leave the walled box in the first drift, found by the check before
    the neighbour-list rebuild: the failed state is written as step 1 (the step the error
    names) and the snapshot of step 0 stays. Until 2026-11-24 it was written over step 0."""
    text = BASE.replace('count = 300', 'count = 50\nvelocity = [0.0, 0.0, -1000.0]')
    p = tmp_path / "c.toml"
    p.write_text(text)
    out = tmp_path / "o"
    assert run_config(str(p), str(out), stream=open(os.devnull, "w")) == 1
    run = pio.open_run(out)
    assert run.steps == [0, 1]
    first, failed = run.snapshot(0), run.snapshot(1)
    assert first["status"] == "ok" and failed["status"] == "failed"
    assert (first["velocity"][:, 2] == -1000.0).sum() == 50     # the initial state
    assert failed["position"][:, 2].min() < 0.0                 # the failing one


def test_reader_errors_name_the_file(tmp_path):
    with pytest.raises(pio.OutputError, match="no such file"):
        pio.open_run(tmp_path)
    (tmp_path / "snapshots.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(pio.OutputError, match="not a readable HDF5 file"):
        pio.open_run(tmp_path)


CROWDED_RAIN = """
[simulation]
dt = 5e-5
steps = 150
gravity = [0.0, 0.0, -9.81]
[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.05, 0.05, 0.3]
walls = true
[output]
every = 100
[[materials]]
name = "glass"
density = 2500.0
restitution = 0.5
collision_time = 5e-4
[[bodies]]
kind = "rain"
shape = "sphere"
radius = 0.003
region = [[0.0, 0.0, 0.25], [0.05, 0.05, 0.3]]
count = 300
every = 100
total = 1000
"""


def test_a_crowded_rain_batch_says_how_many_it_placed(tmp_path):
    """A rain batch into a crowded region places fewer bodies; `parsim run` says so, for the
    batch at the start and for later ones (it was silent until 2026-11-24, and the run ended
    with far fewer bodies than `total` without a word)."""
    import io

    p = tmp_path / "c.toml"
    p.write_text(CROWDED_RAIN)
    out = io.StringIO()
    assert run_config(str(p), str(tmp_path / "o"), stream=out) == 0
    lines = [x for x in out.getvalue().splitlines() if "the region is crowded" in x]
    assert len(lines) == 2, out.getvalue()
    placed = [tuple(map(int, x.split("placed ")[1].split(" (")[0].split(" of "))) for x in lines]
    assert placed[0][0] < placed[0][1] == 300 and placed[1][0] < placed[1][1] == 300
    assert "at step 0" in lines[0] and "at step 100" in lines[1]
    run = pio.open_run(tmp_path / "o")
    assert run.snapshot(-1)["uid"].size == 6 + placed[0][0] + placed[1][0]
