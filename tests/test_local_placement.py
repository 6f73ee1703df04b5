"""``placement = "local"`` of the random and rain generators (``parsim/packing.py``): random
sequential addition in cells, each rank computing only the cells near its block. The bodies
must not overlap each other or the bodies already there, the counts must be exact, and the
bodies must be the serial ones bit for bit on any number of ranks (with cells fine enough that
each rank computes only part of them). Checked by hand that the parallel test fails on 2 ranks
when a rank computes only the cells meeting its block (``packing.HALO`` = 0 and no cell of
margin); with the one-cell margin alone it passes: at this density, conflicts that chain over
two or more cells are too rare to show, let alone over the 7 the halo covers."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from parsim import packing
from parsim.bodies import GLOBAL
from parsim.config import ConfigError, build, pour
from parsim.shapes import PLANE, bounding_radius
from mpi_wait import quiet_barrier

CONFIG = """
[simulation]
dt = 1e-5
steps = 10
seed = 21

[domain]
lo = [0.0, 0.0, 0.0]
hi = [4.0, 0.5, 0.5]
periodic = [true, false, false]

[[materials]]
name = "m"
density = 1000.0
restitution = 0.5
collision_time = 1e-3

[[bodies]]              # fixed rocks: global bodies once y or z is cut in two
kind = "random"
placement = "local"
radius = 0.2
count = 3
fixed = true

[[bodies]]
kind = "random"
placement = "local"
shape = "box"
half_extents = [0.02, 0.015, 0.01]
scale = { distribution = "uniform", min = 0.8, max = 1.2 }
random_velocity = 0.5
count = 300

[[bodies]]
kind = "random"
placement = "local"
radius = 0.012
scale = { distribution = "lognormal", median = 1.0, sigma = 0.3, min = 0.5, max = 1.5 }
count = 8000

[[bodies]]
kind = "rain"
placement = "local"
shape = "capsule"
radius = 0.008
length = 0.02
count = 200
every = 5
total = 400
velocity = [0.0, 0.0, -1.0]
region = [[0.0, 0.0, 0.4], [4.0, 0.5, 0.5]]
"""

COUNTS = (3, 300, 8000, 200 + 200)
REPO = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
FIELDS = ("uid", "shape", "params", "position", "orientation", "velocity", "angular_velocity",
          "mass", "material", "wraps")


@pytest.fixture
def fine_cells(monkeypatch):
    """2 bodies per fine cell instead of 32: the 4 x 0.5 x 0.5 domain gets 57 generation
    cells along x, so a rank owning half of x computes ~36 of them, not all."""
    monkeypatch.setattr(packing, "PER_CELL", 2)


def _build(comm):
    """The config built, and the rain's second batch poured."""
    cfg = build(tomllib.loads(CONFIG), comm=comm)
    pour(cfg.sim, cfg.rains[0])
    return cfg.sim


def _overlaps(p, rb):
    """Pairs of bounding spheres that overlap (brute force over a uniform grid)."""
    from scipy.spatial import cKDTree

    tree = cKDTree(p)
    pairs = tree.query_pairs(2 * rb.max(), output_type="ndarray")
    d = np.linalg.norm(p[pairs[:, 0]] - p[pairs[:, 1]], axis=1)
    return pairs[d < rb[pairs[:, 0]] + rb[pairs[:, 1]]]


def test_local_placement_places_every_body_without_overlap(fine_cells):
    sim = _build(None)
    s = sim.state()
    finite = s["shape"] != PLANE
    assert int(finite.sum()) == sum(COUNTS)
    rb = bounding_radius(s["shape"], s["params"])
    assert _overlaps(s["position"][finite], rb[finite]).size == 0
    # every body inside its region, its bounding sphere too
    lo, hi = np.zeros(3), np.array([4.0, 0.5, 0.5])
    assert ((s["position"] - rb[:, None] >= lo) & (s["position"] + rb[:, None] <= hi)).all()
    rain = s["shape"] == 2
    assert int(rain.sum()) == 400 and (s["position"][rain, 2] - rb[rain] >= 0.4).all()
    # uids unique, each generator's below the next one's
    assert np.unique(s["uid"]).size == s["uid"].size
    by_uid = np.argsort(s["uid"])
    shapes = s["shape"][by_uid]
    first_box, first_capsule = np.argmax(shapes == 1), np.argmax(shapes == 2)
    assert (shapes[:3] == 0).all() and (s["flags"][by_uid][:3] & 1).all()   # the fixed rocks
    assert first_box == 3 and (shapes[first_box:first_box + 300] == 1).all()
    assert first_capsule == sum(COUNTS[:3])
    assert sim.next_uid > s["uid"].max()


def test_local_placement_follows_the_free_room(fine_cells):
    """The small spheres avoid the rocks and boxes placed before them, and split between the
    halves of every axis as the free room does (within 5 standard deviations of a binomial;
    the free room measured by 200,000 random points)."""
    s = _build(None).state()
    rb = bounding_radius(s["shape"], s["params"])
    order = np.argsort(s["uid"])
    before = order[:303]                       # the rocks and the boxes
    small = order[303:303 + 8000]
    assert (s["shape"][small] == 0).all() and (rb[small] < 0.02).all()
    p = s["position"][small]
    r = 0.012
    q = np.random.default_rng(0).uniform([r, r, r], [4.0 - r, 0.5 - r, 0.5 - r], (200_000, 3))
    free = np.ones(q.shape[0], dtype=bool)
    for j in before:
        free &= ((q - s["position"][j]) ** 2).sum(axis=1) >= (rb[j] + r) ** 2
    n = p.shape[0]
    for d, half in enumerate((2.0, 0.25, 0.25)):
        share = (free & (q[:, d] < half)).sum() / free.sum()
        left = int((p[:, d] < half).sum())
        assert abs(left - n * share) < 5 * np.sqrt(n * share * (1 - share)), (d, left, share)
    rocks = s["position"][order[:3]]
    assert (np.linalg.norm(p[:, None, :] - rocks[None, :, :], axis=2) >= 0.2).all()


def test_local_placement_depends_on_the_seed_and_repeats(fine_cells):
    a = _build(None).state()
    b = _build(None).state()
    assert all(np.array_equal(a[k], b[k]) for k in FIELDS)
    data = tomllib.loads(CONFIG.replace("seed = 21", "seed = 22"))
    c = build(data, comm=None).sim.state()
    assert not np.array_equal(np.sort(a["position"][:, 0])[:100],
                              np.sort(c["position"][:, 0])[:100])


SMALL = """
[simulation]
dt = 1e-5
steps = 10
[domain]
lo = [0.0, 0.0, 0.0]
hi = [1.0, 1.0, 1.0]
[[materials]]
name = "m"
density = 1000.0
restitution = 0.5
collision_time = 1e-3
[[bodies]]
kind = "random"
placement = "local"
radius = 0.45
count = 1
fixed = true
[[bodies]]
kind = "random"
placement = "local"
radius = 0.01
"""


def test_crowded_region_is_an_error_naming_the_way_out():
    crowded = SMALL + "count = 30000\nmax_attempts = 5\n"        # 1.5 times the volume
    with pytest.raises(ConfigError, match=r"\[\[bodies\]\]\[1\]\.count: only \d+ of 30000 .*after "
                                          r"5 attempts each.*raise max_attempts"):
        build(tomllib.loads(crowded), comm=None)
    # the rock's centre lies within 0.05 of the middle: this region lies inside the rock
    inside = SMALL + "count = 10\nregion = [[0.48, 0.48, 0.48], [0.52, 0.52, 0.52]]\n"
    with pytest.raises(ConfigError, match=r"\[\[bodies\]\]\[1\]\.region: has no free room"):
        build(tomllib.loads(inside), comm=None)
    data = tomllib.loads(CONFIG.replace('placement = "local"\nradius = 0.2',
                                        'placement = "nearby"\nradius = 0.2'))
    with pytest.raises(ConfigError, match=r"\[\[bodies\]\]\[0\]\.placement"):
        build(data, comm=None)


def test_rain_into_a_full_region_takes_none():
    """A rain batch whose region the bodies already there fill places none and goes on (as
    the global placement's crowded batch takes fewer); a restart fuzzer's pour hit this and
    stopped the run with a config error."""
    full = SMALL.replace('kind = "random"\nplacement = "local"\nradius = 0.01',
                         'kind = "rain"\nplacement = "local"\nradius = 0.01\nevery = 10\n'
                         'total = 20') + \
        "count = 10\nregion = [[0.48, 0.48, 0.48], [0.52, 0.52, 0.52]]\n"
    cfg = build(tomllib.loads(full), comm=None)
    assert cfg.sim.count_bodies() == 1                   # the rock only
    assert pour(cfg.sim, cfg.rains[0]) == 0 and cfg.rains[0].remaining == 0


def test_permutation_is_a_bijection():
    for total in (1, 2, 3, 5, 16, 17, 1000, 4097):
        cells = np.arange(total, dtype=np.int64)
        got = packing.permute(cells, total, packing.subkey(7, 3))
        assert np.array_equal(np.sort(got), cells), total
        if total >= 16:
            assert not np.array_equal(got, cells)


@pytest.mark.mpi(min_size=2)
def test_local_placement_equals_the_serial_one(comm, fine_cells):
    serial = _build(None).state() if comm.rank == 0 else None
    quiet_barrier(comm)                # the others sleep while rank 0 builds alone
    sim = _build(comm)
    everyone = sim.state(gather=True)
    mine = int(sim.st.n_owned)
    counts = comm.gather(mine, root=0)
    found = None
    if comm.rank == 0:
        flags_differ = (serial["flags"] ^ everyone["flags"]) & ~GLOBAL
        found = ([k for k in FIELDS if not np.array_equal(serial[k], everyone[k])]
                 + (["flags"] if flags_differ.any() else []),
                 int(serial["uid"].size), int(everyone["uid"].size), counts,
                 int((everyone["flags"] & GLOBAL != 0).sum()))
    differ, n_serial, n_par, counts, n_global = comm.bcast(found, root=0)
    assert n_par == n_serial == sum(COUNTS)
    assert differ == []
    assert min(counts) > 0
    if tuple(sim.dec.dims)[1:] != (1, 1):      # y or z cut: the rocks are global bodies
        assert n_global == 3
    assert comm.allgather(sim.next_uid) == [sim.next_uid] * comm.size


THREE_RANKS = """
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
from mpi4py import MPI
from parsim import packing
packing.PER_CELL = 2                       # as the fine_cells fixture
import test_local_placement as T
comm = MPI.COMM_WORLD
sim = T._build(comm)
state = sim.state(gather=True)
counts = comm.gather(int(sim.st.n_owned), root=0)
if comm.rank == 0:
    np.savez(sys.argv[2], counts=np.array(counts), dims=np.array(sim.dec.dims),
             **{k: state[k] for k in T.FIELDS + ("flags",)})
"""


@pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpiexec next to the interpreter")
def test_local_placement_on_three_ranks_equals_the_serial_one(tmp_path, fine_cells):
    """The MPI sessions of the suite have 2, 4 and 8 ranks, all powers of two; on 3 ranks the
    blocks (3 x 1 x 1, each 4/3 long) cut the generation cells at other places. Run in a
    subprocess under `mpiexec -n 3`, compared with the serial build here."""
    serial = _build(None).state()          # also fills the kernel cache for the ranks
    script = tmp_path / "three.py"
    script.write_text(THREE_RANKS)
    out = tmp_path / "three.npz"
    cache = os.path.abspath(os.environ.get("NUMBA_CACHE_DIR", REPO / ".numba_cache"))
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", NUMBA_CACHE_DIR=cache,
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([str(MPIEXEC), "-n", "3", sys.executable, "-m", "mpi4py", str(script),
                        str(REPO / "tests"), str(out)],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    three = np.load(out)
    assert three["dims"].tolist() == [3, 1, 1]
    assert three["counts"].size == 3 and three["counts"].min() > 0
    assert three["uid"].size == serial["uid"].size == sum(COUNTS)
    assert [k for k in FIELDS if not np.array_equal(serial[k], three[k])] == []
    assert not ((serial["flags"] ^ three["flags"]) & ~GLOBAL).any()


def test_fill_equals_testing_every_obstacle_and_body():
    """`packing.fill` tests a draw only against the obstacles listed for its sub-cell (nearest
    first) and the bodies placed in the neighbouring cells it can reach; the outcome must be
    that of testing every obstacle and every placed body (brute force over the same draws):
    uneven cells split into 4 sub-cells per axis, small and large obstacles (some outside the
    cells), a crowded cell where bodies fail."""
    rng = np.random.default_rng(5)
    ex, ey, ez = np.array([0.0, 1.0, 2.1, 3.0]), np.array([0.0, 0.9, 2.0]), np.array([0.0, 1.05])
    c0, dims = np.zeros(3, np.int64), np.array([3, 2, 1])
    rlo, rhi = np.zeros(3), np.array([3.0, 2.0, 1.05])
    obs_pos = np.concatenate([rng.uniform([-0.3, -0.3, -0.3], [3.3, 2.3, 1.3], (150, 3)),
                              [[0.5, 0.5, 0.5], [2.5, 1.5, 1.3]],
                              rng.uniform([2.1, 0.9, 0.0], [3.0, 2.0, 1.05], (40, 3))])
    obs_r = np.concatenate([rng.uniform(0.05, 0.15, 150), [0.45, 0.6], np.full(40, 0.12)])
    per = 20
    ncell = int(dims.prod())
    radius = -np.sort(-rng.uniform(0.05, 0.2, (ncell, per)), axis=1).ravel()  # biggest first
    ordinal = np.arange(radius.size, dtype=np.int64)
    start, size = np.arange(ncell, dtype=np.int64) * per, np.full(ncell, per, np.int64)
    attempts = np.full(ncell, 300, np.int64)
    rb_max, key = float(radius.max()), packing.subkey(7, 11)
    pos, placed = np.zeros((radius.size, 3)), np.zeros(radius.size, np.int8)
    packing.fill(c0, dims, ex, ey, ez, rlo, rhi, start, size, ordinal, radius, obs_pos, obs_r,
                 rb_max, key, attempts, pos, placed)
    assert 0 < placed.sum() < placed.size            # the crowded cell turns bodies away

    ref_pos, ref_placed = np.zeros_like(pos), np.zeros_like(placed)
    done_p, done_r = np.zeros((0, 3)), np.zeros(0)
    e = (ex, ey, ez)
    for colour in range(8):
        for l in range(ncell):
            g = (l // dims[1], l % dims[1], 0)
            if (g[0] & 1) | ((g[1] & 1) << 1) | ((g[2] & 1) << 2) != colour:
                continue
            for b in range(start[l], start[l] + size[l]):
                r = radius[b]
                lo = np.array([max(e[d][g[d]], rlo[d] + r) for d in range(3)])
                hi = np.array([min(e[d][g[d] + 1], rhi[d] - r) for d in range(3)])
                for a in range(attempts[l]):
                    x = np.array([lo[d] + packing._uniform(key, ordinal[b], a, d) * (hi[d] - lo[d])
                                  for d in range(3)])
                    if (((obs_pos - x) ** 2).sum(1) < (obs_r + r) ** 2).any():
                        continue
                    if (((done_p - x) ** 2).sum(1) < (done_r + r) ** 2).any():
                        continue
                    ref_pos[b], ref_placed[b] = x, 1
                    done_p, done_r = np.vstack([done_p, x]), np.append(done_r, r)
                    break
    assert np.array_equal(placed, ref_placed)
    assert np.array_equal(pos[placed == 1], ref_pos[ref_placed == 1])
