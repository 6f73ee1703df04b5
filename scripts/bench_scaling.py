"""Weak and strong scaling of parsim over MPI ranks, with LIGGGHTS and LAMMPS on the same ranks.

Scenarios are the peers' (``scripts/peers/README.md``, law and constants as in
``scripts/bench_dem.py``):

* **Weak scaling.** The start state of one rank is S2b's settled bed (``bed_n20`` = 8,000 or
  ``bed_n40`` = 64,000 spheres) or S1w's gas lattice (n^3 spheres); on P ranks it is tiled P times
  (``--layout slab``: along x, blocks (P, 1, 1), so 2 ranks = twice the domain; ``xy``: along x
  and y; ``xyz``: S1w only). Both scenarios are periodic along the tiled axes, so a tiled state is
  a valid state and every rank has the same work as the single rank. Parallel efficiency =
  t(1 rank) / t(P ranks) per step. For S1w, LAMMPS and LIGGGHTS run the same weak cases,
  interleaved with parsim's repeats: on 1 rank their ``s1_gas`` input as is, on P ranks the
  lattice tiled likewise (``-var nx/ny/nz``) with ``processors`` set so that each rank owns one
  n^3 tile (``-var px/py/pz``); their efficiency from their own ``Loop time``, and parsim's
  efficiency / the peer's, which tells whether the machine or parsim limits the efficiency.
* **Strong scaling.** S2b with 64,000 spheres on 1 and 2 ranks (blocks (2, 1, 1); an x/y split
  as the peers' ``-var pz 1``), and LIGGGHTS and LAMMPS on 1 and 2 ranks (``mpirun -np 2``) in the
  same run. Reports particle-steps/s of each and parsim/peer; checks that the kinetic energy at
  the end agrees with the peers and that parsim's state on 2 ranks is bit-identical to 1 rank
  (an order-independent 64-bit fingerprint of uid, pose and velocities over all ranks).

Every parsim run is launched as ``mpiexec -n P python -m mpi4py bench_scaling.py --worker CASE``
with ``NUMBA_NUM_THREADS=1`` per rank (the worker imports parsim before ``mpi4py.MPI``, as
``python -m mpi4py -m parsim run`` does, so parsim's MPICH defaults ``parsim.comm.MPICH_DEFAULTS``
apply); rank 0 prints one JSON line with every rank's telemetry:
the phase timers (``sim.timers``; compute = neighbours + contacts + integration), the per-step
shadow refresh (``sim.halo.timers``: pack, exchange = sending + waiting, unpack), the remaining
communication (the per-step allreduce of the largest displacement), checks (including their
allreduce), bytes and messages sent to neighbours (``sim.net``; per-step refreshes plus
rebuild-time shadow creation and migration), shadow copies per owned body (all, and those received
from other ranks), migrations, rebuilds and memory per body. The untimed part: building the
state, loading the kernels (:func:`parsim.warmup.compile_kernels` in every worker, then a
throw-away copy of the case runs 3 steps; S1w also runs ``--warm`` steps), and the
neighbour-list setup (``Simulation._setup``, as the peers' ``Loop time`` excludes their setup).

Runs of all configurations, the peers' included, are interleaved (repeat 1 of everything, then
repeat 2, ...) and the fastest repeat of each is reported (with the median), because a shared
2-core machine is noisy. Peers run where their binary is installed (``--no-peers``: none).

Before anything runs, parsim's sources are copied to ``<tmp>/parsim-bench-<digest>/parsim`` and the
workers import that copy (``PYTHONPATH``), so edits made to the repository during the benchmark
cannot mix versions or trigger concurrent compilations (``--no-snapshot`` imports the
repository's own parsim in place, or the one on ``PYTHONPATH`` if set, e.g. on a cluster whose
/tmp is node-local); the peers' input scripts are copied to a temporary directory likewise. A
serial warm-up compiles every kernel before the first multi-rank launch.

    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_scaling.py            # full (~25 min)
    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_scaling.py --quick    # smoke (< 2 min)

``--quick`` writes to a temporary directory unless ``--out`` is given. A full run appends every
run's result to ``<out>/scaling_raw.jsonl`` as it goes; ``--reuse FILE --sources SNAPSHOT`` counts
such results as repeats of a later invocation (``--repeats 0``: only write the report), so an
interrupted or noisy run can be completed. A new snapshot directory means a numba cache miss
(about a minute of compiling, done once, serially). On a cluster, the weak part
only, with any launcher (``{n}`` ranks, ``{nodes}`` nodes; see ``jobs/weak_scaling.sbatch``)::

    python scripts/bench_scaling.py --weak-only --ranks 1 2 4 8 --layout xy --no-peers \\
        --launcher "srun -N {nodes} -n {n} --cpu-bind=cores" --ranks-per-node 4 --out DIR

Peers: ``apt-get install -y --no-install-recommends liggghts lammps openmpi-bin``.
"""

from __future__ import annotations

import argparse
import atexit
import hashlib
import importlib
import json
import math
import os
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
import bench_dem as dem  # noqa: E402
from bench_common import machine_info, md_table, text_table  # noqa: E402
from bench_common import run_command, use_repo  # noqa: E402

use_repo(REPO)  # measure this tree's parsim

WORKER_TIMEOUT = 3600


# ==========================================================================================
# cases (worker side)
# ==========================================================================================
def blocks_for(ranks: int, layout: str, scenario: str) -> list[int]:
    """Blocks (= tiles of the one-rank state) per axis for ``ranks`` ranks."""
    if layout == "slab":
        return [ranks, 1, 1]
    if layout == "xyz" and scenario == "S2b":
        raise ValueError("S2b is walled along z (gravity): use layout slab or xy")
    factors = []
    n, p = ranks, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    k = 2 if layout == "xy" else 3
    dims = [1] * k
    for f in sorted(factors, reverse=True):
        dims[int(np.argmin(dims))] *= f
    dims.sort(reverse=True)
    return dims + [1] * (3 - k)


def build(case: dict, comm):
    """The tiled start state of ``case`` on ``comm``: (Simulation, number of spheres).

    ``case``: scenario ("S1w" | "S2b"), n_side (one rank's state has n_side^3 spheres), tiles
    (copies per axis), blocks (blocks per axis). Every rank makes the same calls, one per tile
    (each rank keeps the bodies in its block)."""
    import parsim

    sc, n, tiles = case["scenario"], case["n_side"], case["tiles"]
    if sc == "S1w":
        L = 1.25 * n
        hi = [L * t for t in tiles]
        sim = parsim.Simulation(dt=dem.DT, domain=((0, 0, 0), hi), periodic=(True,) * 3,
                                skin=dem.SKIN, blocks=case["blocks"], comm=comm)
        m = sim.add_material("grain", density=1.0, stiffness=dem.KN, damping=dem.GN,
                             friction=dem.MU)
        g = np.stack(np.meshgrid(*[np.arange(n)] * 3, indexing="ij"), -1).reshape(-1, 3)
        rng = np.random.default_rng(15485863)       # as bench_dem's S1w (same in every tile)
        vel = rng.uniform(-1, 1, (len(g), 3))
        pos = (g + 0.5) * 1.25
        radii = np.full(len(g), 0.5)
        count = 0
        for t in np.ndindex(*tiles):
            sim.add_spheres(pos + np.asarray(t) * L, radii, m, velocities=vel)
            count += len(g)
        return sim, count
    if tiles[2] != 1:
        raise ValueError("S2b cannot be tiled along z")
    with np.load(dem.bed_npz(n)) as f:
        pos, vel, ang, dia, box = (f["position"], f["velocity"], f["angular_velocity"],
                                   f["diameter"], f["box"])
    length = box[:, 1] - box[:, 0]
    hi = box[:, 0] + length * np.array([tiles[0], tiles[1], 1])
    sim = parsim.Simulation(dt=dem.DT, gravity=(0, 0, -9.81), domain=(box[:, 0], hi),
                            periodic=(True, True, False), skin=dem.SKIN, blocks=case["blocks"],
                            comm=comm)
    m = sim.add_material("grain", density=1.0, stiffness=dem.KN, damping=dem.GN, friction=dem.MU)
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    count = 0
    for t in np.ndindex(*tiles):
        shift = np.asarray(t) * length * np.array([1.0, 1.0, 0.0])
        sim.add_spheres(pos + shift, 0.5 * dia, m, velocities=vel, angular_velocities=ang)
        count += len(pos)
    return sim, count


_M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F)


def fingerprint(sim) -> int:
    """Collective: order-independent 64-bit hash of (uid, position, orientation, velocity,
    angular velocity) of every owned finite body over all ranks (equal iff the states agree bit
    for bit, up to a 2^-64 accident)."""
    from parsim.bodies import INFINITE

    st = sim.st
    no = st.n_owned
    sel = np.flatnonzero((st.flags[:no] & INFINITE) == 0)
    words = np.concatenate([st.position[sel], st.orientation[sel], st.velocity[sel],
                            st.angular_velocity[sel]], axis=1).view(np.uint64)
    with np.errstate(over="ignore"):
        h = st.uid[sel].astype(np.uint64) * _M1
        for k in range(words.shape[1]):
            h = (h ^ words[:, k]) * _M2
            h ^= h >> np.uint64(29)
        local = int(h.sum(dtype=np.uint64))
    return sum(sim.net.allgather(local)) % 2**64


def remote_shadows(sim) -> int:
    """Shadow copies this rank received from other ranks (not its own periodic images) at the
    last rebuild."""
    return int(getattr(sim.halo, "received", 0))


def worker(case: dict) -> dict | None:
    # parsim first, as in a user's script: importing it sets MPICH's defaults
    importlib.import_module("parsim")
    from mpi4py import MPI

    import numba

    comm = MPI.COMM_WORLD
    # every kernel loaded before the timed loop, also those a run first needs late (the hash
    # grid's removal, first called after 5,000 steps of the 8,000-sphere gas: a few ms to load
    # from the cache, or half a second to compile, inside the loop until 2026-11-29)
    from parsim import warmup
    warmup.compile_kernels()
    t_build = time.perf_counter()
    sim, n = build(case, comm)
    t_build = time.perf_counter() - t_build
    # load the kernels on a throw-away copy, so the timed run starts from the peers' state
    spare, _ = build(case, comm)
    spare.run(3)
    del spare
    if case.get("warm"):
        sim.run(case["warm"])
    if not sim._ready:                     # neighbour-list setup outside the timed loop
        sim._setup()
    for k in sim.timers:
        sim.timers[k] = 0.0
    htm = getattr(sim.halo, "timers", None)
    if htm is not None:
        for k in htm:
            htm[k] = 0.0
    b0, m0, mig0, nb0 = (sim.net.bytes_sent, sim.net.messages_sent, sim.halo.migrated_total,
                         sim.nl.builds)
    steps = case["steps"]
    comm.Barrier()
    t0 = time.perf_counter()
    sim.run(steps)
    t_rank = time.perf_counter() - t0
    comm.Barrier()
    wall = time.perf_counter() - t0
    from parsim.bodies import INFINITE

    st = sim.st
    no = st.n_owned
    finite = (st.flags[:no] & INFINITE) == 0
    owned = int(np.count_nonzero(finite))
    ke_local = float(0.5 * np.sum(st.mass[:no][finite] * np.sum(st.velocity[:no][finite] ** 2, axis=1)))
    rank = {
        "rank": comm.Get_rank(), "block": list(sim.dec.coords), "wall_rank": t_rank,
        "timers": dict(sim.timers), "halo_timers": dict(htm) if htm is not None else None,
        "bytes_sent": sim.net.bytes_sent - b0, "messages_sent": sim.net.messages_sent - m0,
        "migrated": sim.halo.migrated_total - mig0, "rebuilds": sim.nl.builds - nb0,
        "owned": owned, "shadows": int(st.n_shadow), "remote_shadows": remote_shadows(sim),
        "refreshed": int(getattr(sim.halo, "refreshed", st.n_shadow)),
        "memory_bytes": int(sim.memory_bytes()), "contacts": int(sim.n_contacts),
        "threads": numba.get_num_threads(), "build_seconds": t_build,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    ke = sum(sim.net.allgather(ke_local))            # rank order: deterministic per rank count
    fp = fingerprint(sim)
    ranks = comm.gather(rank, root=0)
    if comm.Get_rank() != 0:
        return None
    contacts = sum(r["contacts"] for r in ranks)
    return {"case": case, "ranks_n": comm.Get_size(), "n": n, "steps": steps, "wall": wall,
            "psps": n * steps / wall, "ke_trans": ke, "contacts": contacts,
            "fingerprint": f"{fp:016x}", "per_rank": ranks,
            "mpi": MPI.Get_library_version().splitlines()[0].strip()}


# ==========================================================================================
# orchestration
# ==========================================================================================
def snapshot_sources(base: str) -> str:
    """Copy parsim/ to base/parsim-bench-<digest>/parsim (once per digest); returns the dir to put
    on PYTHONPATH."""
    h = hashlib.sha1()
    src = REPO / "parsim"
    for path in sorted(src.rglob("*.py")):
        h.update(path.relative_to(src).as_posix().encode())
        h.update(path.read_bytes())
    dest = Path(base) / f"parsim-bench-{h.hexdigest()[:12]}"
    if not (dest / "parsim" / "__init__.py").exists():
        tmp = Path(tempfile.mkdtemp(dir=base, prefix="parsim-bench-tmp-"))
        shutil.copytree(src, tmp / "parsim", ignore=shutil.ignore_patterns("__pycache__"))
        try:
            tmp.rename(dest)
        except OSError:                      # made meanwhile by another run
            shutil.rmtree(tmp, ignore_errors=True)
    return str(dest)


def freeze_peer_inputs() -> Path:
    """Copy the peers' input scripts (``bench_dem.PEERS``) to a temporary directory, removed at
    exit, and point bench_dem there: edits to the scripts (or a ``git stash``) during the run
    cannot change them (a stash once made a 2-rank run read the untiled S1w cube)."""
    dest = Path(tempfile.mkdtemp(prefix="parsim-bench-peers-"))
    atexit.register(shutil.rmtree, dest, True)
    for f in list(dem.PEERS.glob("*.lammps")) + list(dem.PEERS.glob("*.liggghts")):
        shutil.copy(f, dest)
    dem.PEERS = dest
    return dest


class Launcher:
    def __init__(self, template: str, python: str, ranks_per_node: int, pythonpath: str | None):
        self.template = template
        self.python = python
        self.rpn = ranks_per_node
        self.pythonpath = pythonpath

    def env(self) -> dict:
        env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
               "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".numba_cache"))
        if self.pythonpath:
            env["PYTHONPATH"] = self.pythonpath + os.pathsep + env.get("PYTHONPATH", "")
        return env

    def command(self, ranks: int, case: dict) -> list[str]:
        nodes = max(1, math.ceil(ranks / self.rpn)) if self.rpn else 1
        head = shlex.split(self.template.format(n=ranks, nodes=nodes))
        return head + [self.python, "-m", "mpi4py", str(Path(__file__).resolve()), "--worker",
                       json.dumps(case, separators=(",", ":"))]

    def run(self, ranks: int, case: dict) -> dict:
        cmd = self.command(ranks, case)
        t0 = time.perf_counter()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=self.env(),
                               timeout=WORKER_TIMEOUT)
        except subprocess.TimeoutExpired:
            return {"error": f"timeout after {WORKER_TIMEOUT} s"}
        lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
        if r.returncode != 0 or not lines:
            return {"error": f"exit {r.returncode}: {(r.stderr or r.stdout)[-800:]}"}
        out = json.loads(lines[-1])
        out["launch_seconds"] = time.perf_counter() - t0
        return out

    def warm_up(self) -> None:
        """Compile every kernel in one process (once, not once per rank): a
        one-rank run of a small bed, then the halo kernels that only multi-rank runs use."""
        case = {"scenario": "S2b", "n_side": 20, "tiles": [1, 1, 1], "blocks": [1, 1, 1],
                "steps": 5}
        t0 = time.perf_counter()
        r = subprocess.run([self.python, str(Path(__file__).resolve()), "--compile",
                            json.dumps(case)], capture_output=True, text=True, env=self.env(),
                           timeout=WORKER_TIMEOUT)
        if r.returncode != 0:
            raise SystemExit(f"warm-up failed: {r.stderr[-2000:]}")
        print(f"kernels ready ({time.perf_counter() - t0:.0f} s)", flush=True)


def compile_kernels(case: dict) -> None:
    """Serial: compile what a run may call (:func:`parsim.warmup.compile_kernels`, the
    multi-rank halo kernels included), then run a small case (no MPI)."""
    from parsim import warmup

    warmup.compile_kernels()
    sim, _ = build(case, None)
    sim.run(case["steps"])


def _peer_on_ranks(tool: str, scenario: str, n_side: int, steps: int, warm: int, ranks: int,
                   extra: list[str]) -> dict:
    """bench_dem.run_peer on ``ranks`` ranks with the extra arguments ``extra``.

    bench_dem.run_peer starts ``mpirun -np 1``; otherwise its subprocess call is wrapped to
    change the rank count and append ``extra`` (the rest, including parsing the log, is its)."""
    if ranks == 1 and not extra:
        return dem.run_peer(tool, scenario, n_side, steps, warm)
    real = dem.subprocess

    class _Shim:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def run(cmd, **kw):
            cmd = list(cmd)
            cmd[cmd.index("-np") + 1] = str(ranks)
            return real.run(cmd + list(extra), **kw)

    dem.subprocess = _Shim()
    try:
        return dem.run_peer(tool, scenario, n_side, steps, warm)
    finally:
        dem.subprocess = real


def run_peer(tool: str, n_side: int, steps: int, ranks: int) -> dict:
    """Strong scaling: the peer's S2b on ``ranks`` ranks, split in x/y only (``-var pz 1``)."""
    return _peer_on_ranks(tool, "S2b", n_side, steps, 0, ranks,
                          ["-var", "pz", "1"] if ranks > 1 else [])


def peer_weak_args(n_side: int, tiles: list[int]) -> list[str]:
    """The peers' S1w input tiled ``tiles`` times per axis, one n^3 tile per rank: lattice
    extents ``nx ny nz`` and ``processors px py pz`` (none on one rank: the plain input)."""
    if list(tiles) == [1, 1, 1]:
        return []
    args = []
    for ax, t in zip("xyz", tiles):
        args += ["-var", f"n{ax}", str(t * n_side)]
    for ax, t in zip("xyz", tiles):
        args += ["-var", f"p{ax}", str(t)]
    return args


def run_peer_weak(tool: str, n_side: int, steps: int, warm: int, tiles: list[int]) -> dict:
    """Weak scaling: the peer's S1w on prod(tiles) ranks, the n^3 lattice tiled ``tiles`` times
    (its velocities are drawn per atom, so tiles differ; the work per rank is the same)."""
    ranks = math.prod(tiles)
    r = _peer_on_ranks(tool, "S1w", n_side, steps, warm, ranks, peer_weak_args(n_side, tiles))
    if "n" in r and r["n"] != ranks * n_side ** 3:
        return {"error": f"{tool}: {r['n']} atoms, expected {ranks * n_side ** 3}"}
    r["tiles"] = list(tiles)
    r["ranks_n"] = ranks
    return r


# ------------------------------------------------------------------------------------------
# other processes on the machine
# ------------------------------------------------------------------------------------------
def _cpu_busy_seconds() -> float:
    """CPU-seconds all processes of the machine have used so far (/proc/stat, all cores)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return float("nan")
    hz = os.sysconf("SC_CLK_TCK")
    return (v[0] + v[1] + v[2] + v[5] + v[6] + (v[7] if len(v) > 7 else 0)) / hz


def _children_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def foreign_load(seconds: float = 1.0) -> float:
    """Cores kept busy by other processes over the next ``seconds`` (we are idle meanwhile)."""
    b0, t0 = _cpu_busy_seconds(), time.perf_counter()
    time.sleep(seconds)
    return (_cpu_busy_seconds() - b0) / (time.perf_counter() - t0)


def wait_quiet(threshold: float, max_wait: float) -> dict:
    """Wait (up to ``max_wait`` s) until other processes use less than ``threshold`` cores."""
    t0 = time.perf_counter()
    load = foreign_load()
    while load > threshold and time.perf_counter() - t0 < max_wait:
        time.sleep(5.0)
        load = foreign_load()
    return {"foreign_cores_before": round(load, 3), "waited_s": round(time.perf_counter() - t0, 1)}


def measured(fn, *args, gate=None) -> dict:
    """``fn(*args)`` (a dict), with the cores other processes used meanwhile: machine CPU time
    minus the CPU time of our (reaped) subprocesses, per second of wall time."""
    pre = wait_quiet(*gate) if gate else {}
    b0, c0, t0 = _cpu_busy_seconds(), _children_seconds(), time.perf_counter()
    r = fn(*args)
    dt = time.perf_counter() - t0
    foreign = (_cpu_busy_seconds() - b0 - (_children_seconds() - c0)) / dt
    r.update(pre)
    r["foreign_cores_during"] = round(max(foreign, 0.0), 3)
    return r


# ------------------------------------------------------------------------------------------
def best(reps: list[dict], key: str = "wall") -> dict:
    ok = [r for r in reps if key in r]
    if not ok:
        return reps[-1] if reps else {"error": "not run"}
    b = dict(min(ok, key=lambda r: r[key]))
    vals = [r[key] for r in ok]
    b["repeats"] = len(ok)
    b["spread"] = {"min": min(vals), "median": statistics.median(vals), "max": max(vals)}
    return b


def per_step(r: dict) -> dict:
    """Per-step, per-rank breakdown of one parsim result (ms, bytes, counts)."""
    steps = r["steps"]
    rows = []
    for x in r["per_rank"]:
        tm = x["timers"]
        ht = x["halo_timers"] or {"pack": 0.0, "exchange": 0.0, "unpack": 0.0}
        compute = tm["neighbours"] + tm["contacts"] + tm["integration"]
        refresh = ht["pack"] + ht["exchange"] + ht["unpack"]
        rows.append({
            "rank": x["rank"],
            "step_ms": 1e3 * r["wall"] / steps,
            "compute_ms": 1e3 * compute / steps,
            "neighbours_ms": 1e3 * tm["neighbours"] / steps,
            "contacts_ms": 1e3 * tm["contacts"] / steps,
            "integration_ms": 1e3 * tm["integration"] / steps,
            "pack_unpack_ms": 1e3 * (ht["pack"] + ht["unpack"]) / steps,
            "exchange_ms": 1e3 * ht["exchange"] / steps,
            "other_comm_ms": 1e3 * (tm["communication"] - refresh) / steps,
            "checks_ms": 1e3 * tm["checks"] / steps,
            "rest_ms": 1e3 * (x["wall_rank"] - sum(tm.values())) / steps,
            "bytes_per_step": x["bytes_sent"] / steps,
            "messages_per_step": x["messages_sent"] / steps,
            "shadows_per_owned": x["shadows"] / max(x["owned"], 1),
            "remote_shadows_per_owned": x["remote_shadows"] / max(x["owned"], 1),
            "refreshed_per_owned": x.get("refreshed", x["shadows"]) / max(x["owned"], 1),
            "migrations_per_step": x["migrated"] / steps,
            "rebuilds": x["rebuilds"],
            "bytes_per_body": x["memory_bytes"] / max(x["owned"], 1),
            "owned": x["owned"],
            "max_rss_mib": x.get("max_rss_bytes", 0) / 2**20,
        })
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--weak", nargs="+", default=["S2b:20", "S2b:40", "S1w:20", "S1w:40"],
                    help="weak-scaling cases SCENARIO:N_SIDE (one rank's state: N_SIDE^3 spheres)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2], help="weak scaling rank counts")
    ap.add_argument("--layout", default="slab", choices=["slab", "xy", "xyz"])
    ap.add_argument("--strong-n", type=int, default=40, help="strong scaling: S2b bed_nN")
    ap.add_argument("--strong-ranks", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--peers", nargs="*", default=["lammps", "liggghts"])
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--weak-only", action="store_true", help="skip the strong-scaling part")
    ap.add_argument("--steps", type=int, default=1000, help="timed steps per run")
    ap.add_argument("--warm", type=int, default=2000, help="S1w untimed warm-up steps")
    ap.add_argument("--repeats", type=int, default=3, help="repeats per configuration (best reported)")
    ap.add_argument("--quick", action="store_true",
                    help="S2b 8,000 per rank only, strong scaling on bed_n20, 200 steps, 1 repeat")
    ap.add_argument("--quiet-below", type=float, default=0.25,
                    help="before each run wait until other processes use fewer cores than this")
    ap.add_argument("--max-wait", type=float, default=300.0, help="... but at most this many s")
    ap.add_argument("--no-wait", action="store_true", help="do not wait for a quiet machine")
    ap.add_argument("--launcher", default=None,
                    help="launcher template with {n} (ranks) and {nodes}; default: "
                         "'<venv>/mpiexec -n {n}'")
    ap.add_argument("--ranks-per-node", type=int, default=0, help="for {nodes} in --launcher")
    ap.add_argument("--no-snapshot", action="store_true", help="import this repository's parsim in place (or PYTHONPATH's), no frozen copy")
    ap.add_argument("--snapshot-dir", default=tempfile.gettempdir())
    ap.add_argument("--sources", default=None,
                    help="import parsim from this directory (e.g. the snapshot of an earlier run, "
                         "to add repeats to it with --reuse) instead of a new snapshot")
    ap.add_argument("--raw", default=None,
                    help="append every run's result to this JSON-lines file (default: "
                         "<out>/scaling_raw.jsonl for full runs)")
    ap.add_argument("--reuse", nargs="*", default=[],
                    help="JSON-lines files of earlier runs: their results for the same "
                         "configuration and the same parsim sources count as repeats")
    ap.add_argument("--out", default=None, help="output directory (default docs/benchmarks; "
                                               "--quick: a temporary directory)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--compile", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        res = worker(json.loads(a.worker))
        if res is not None:
            print(json.dumps(res), flush=True)
        return 0
    if a.compile:
        compile_kernels(json.loads(a.compile))
        return 0
    if a.quick:
        a.weak, a.strong_n, a.steps, a.warm, a.repeats = ["S2b:20"], 20, 200, 200, 1
        a.max_wait = min(a.max_wait, 10.0)
    if a.no_peers:
        a.peers = []
    missing = [t for t in a.peers if dem.peer_binary(t) is None]
    if missing:
        print(f"not installed, skipped: {', '.join(missing)}", flush=True)
        a.peers = [t for t in a.peers if t not in missing]
    if a.peers and a.repeats > 0:
        freeze_peer_inputs()
    out = Path(a.out) if a.out else (Path(tempfile.mkdtemp(prefix="bench-scaling-")) if a.quick
                                     else REPO / "docs" / "benchmarks")
    bindir = Path(sys.executable).parent
    template = a.launcher or (str(bindir / "mpiexec") + " -n {n}"
                              if (bindir / "mpiexec").exists() else "mpiexec -n {n}")
    pypath = a.sources or (None if a.no_snapshot else snapshot_sources(a.snapshot_dir))
    raw_path = Path(a.raw) if a.raw else (None if a.quick else out / "scaling_raw.jsonl")
    launcher = Launcher(template, sys.executable, a.ranks_per_node, pypath)
    print(f"parsim from {pypath or 'the installed package'}; launcher: {template}", flush=True)
    if a.repeats > 0:
        launcher.warm_up()

    # the parsim configurations: (label, ranks, case)
    configs = []
    for spec in a.weak:
        sc, n = spec.split(":")
        for p in a.ranks:
            blocks = blocks_for(p, a.layout, sc)
            case = {"scenario": sc, "n_side": int(n), "tiles": blocks, "blocks": blocks,
                    "steps": a.steps, "warm": a.warm if sc == "S1w" else 0}
            configs.append((f"weak {sc}:{n} P={p}", p, case))
    if not a.weak_only:
        for p in a.strong_ranks:
            case = {"scenario": "S2b", "n_side": a.strong_n, "tiles": [1, 1, 1],
                    "blocks": blocks_for(p, "slab", "S2b"), "steps": a.steps, "warm": 0}
            configs.append((f"strong S2b:{a.strong_n} P={p}", p, case))
    # the peers' weak configurations (S1w only): (tool, n_side, ranks, tiles)
    peer_weak = list({(tool, case["n_side"], p): (tool, case["n_side"], p, case["tiles"])
                      for tool in a.peers for label, p, case in configs
                      if label.startswith("weak") and case["scenario"] == "S1w"}.values())
    unique = {}
    for label, p, case in configs:             # weak P=1 of bed_n40 is strong P=1: run once
        unique.setdefault(json.dumps([p, case], sort_keys=True), (label, p, case))
    reps: dict[str, list] = {k: [] for k in unique}
    peer_reps: dict[tuple, list] = {}
    peer_weak_reps: dict[tuple, list] = {c[:3]: [] for c in peer_weak}
    sources = pypath or "installed"
    for f in a.reuse:                          # earlier repeats of the same configurations
        for line in Path(f).read_text().splitlines():
            x = json.loads(line)
            if x.get("sources") != sources:
                continue
            if x["kind"] == "parsim" and x["key"] in reps:
                reps[x["key"]].append(x["result"])
            elif x["kind"] == "peer" and x["n_side"] == a.strong_n and x["steps"] == a.steps:
                peer_reps.setdefault((x["tool"], x["ranks"]), []).append(x["result"])
            elif (x["kind"] == "peer_weak" and x["steps"] == a.steps and x["warm"] == a.warm
                  and (x["tool"], x["n_side"], x["ranks"]) in peer_weak_reps
                  and x["tiles"] == blocks_for(x["ranks"], a.layout, "S1w")):
                peer_weak_reps[(x["tool"], x["n_side"], x["ranks"])].append(x["result"])
    print(f"reused {sum(map(len, reps.values()))} parsim and "
          f"{sum(map(len, peer_reps.values())) + sum(map(len, peer_weak_reps.values()))} "
          "peer results", flush=True)

    def save(entry):
        if raw_path is not None:
            raw_path.parent.mkdir(parents=True, exist_ok=True)
            with open(raw_path, "a") as fh:
                fh.write(json.dumps({"sources": sources, **entry}, default=str) + "\n")
    gate = None if a.no_wait else (a.quiet_below, a.max_wait)
    t_start = time.time()
    for rep in range(a.repeats):
        for key, (label, p, case) in unique.items():
            print(f"[{time.time() - t_start:6.0f} s] repeat {rep + 1}/{a.repeats}: parsim {label}",
                  flush=True)
            r = measured(launcher.run, p, case, gate=gate)
            if "error" in r:
                print("   ", r["error"][-400:], flush=True)
            else:
                print(f"    {1e3 * r['wall'] / r['steps']:.3f} ms/step, "
                      f"{r['psps'] / 1e6:.2f} M particle-steps/s (other processes: "
                      f"{r['foreign_cores_during']:.2f} cores, waited {r.get('waited_s', 0)} s)",
                      flush=True)
            reps[key].append(r)
            save({"kind": "parsim", "key": key, "result": r})
        for tool, n, p, tiles in peer_weak:
            print(f"[{time.time() - t_start:6.0f} s] repeat {rep + 1}/{a.repeats}: {tool} "
                  f"weak S1w:{n} on {p} rank(s) (processors {'x'.join(map(str, tiles))})",
                  flush=True)
            r = measured(run_peer_weak, tool, n, a.steps, a.warm, tiles, gate=gate)
            if "error" in r:
                print("   ", r["error"][-300:], flush=True)
            else:
                print(f"    {1e3 * r['loop_time'] / r['steps']:.3f} ms/step (other processes: "
                      f"{r['foreign_cores_during']:.2f} cores)", flush=True)
            peer_weak_reps[(tool, n, p)].append(r)
            save({"kind": "peer_weak", "tool": tool, "scenario": "S1w", "n_side": n, "ranks": p,
                  "tiles": tiles, "steps": a.steps, "warm": a.warm, "result": r})
        if not a.weak_only:
            for tool in a.peers:
                for p in a.strong_ranks:
                    print(f"[{time.time() - t_start:6.0f} s] repeat {rep + 1}/{a.repeats}: {tool} "
                          f"S2b:{a.strong_n} on {p} rank(s)", flush=True)
                    r = measured(run_peer, tool, a.strong_n, a.steps, p, gate=gate)
                    if "error" in r:
                        print("   ", r["error"][-300:], flush=True)
                    else:
                        print(f"    {r['psps'] / 1e6:.2f} M particle-steps/s (other processes: "
                              f"{r['foreign_cores_during']:.2f} cores)", flush=True)
                    peer_reps.setdefault((tool, p), []).append(r)
                    save({"kind": "peer", "tool": tool, "ranks": p, "n_side": a.strong_n,
                          "steps": a.steps, "result": r})
    results = {"weak": [], "weak_peers": [], "strong": {"parsim": {}, "peers": {}}}
    bests = {k: best(v) for k, v in reps.items()}
    for label, p, case in configs:
        key = json.dumps([p, case], sort_keys=True)
        r = bests[key]
        if label.startswith("weak"):
            results["weak"].append({"label": label, "scenario": case["scenario"],
                                    "n_side": case["n_side"], "ranks": p, "result": r,
                                    "all_walls": [x.get("wall") for x in reps[key]]})
        else:
            results["strong"]["parsim"][str(p)] = r
            results["strong"]["parsim"][str(p)]["all_walls"] = [x.get("wall") for x in reps[key]]
    for (tool, p), v in peer_reps.items():
        b = best(v, "loop_time")
        b["all_loop_times"] = [x.get("loop_time") for x in v]
        results["strong"]["peers"].setdefault(tool, {})[str(p)] = b
    for tool, n, p, tiles in peer_weak:
        v = peer_weak_reps[(tool, n, p)]
        results["weak_peers"].append({"tool": tool, "scenario": "S1w", "n_side": n, "ranks": p,
                                      "tiles": tiles, "result": best(v, "loop_time"),
                                      "all_loop_times": [x.get("loop_time") for x in v]})
    info = machine_info(str(REPO))
    info["parsim_sources"] = pypath or "installed package"
    info["launcher"] = template
    mpis = {x["result"].get("mpi") for x in results["weak"]} | \
        {v.get("mpi") for v in results["strong"]["parsim"].values()}
    info["mpi"] = sorted(m for m in mpis if m)
    for tool, d in results["strong"]["peers"].items():
        for v in d.values():
            if "version" in v:
                info[tool] = v["version"]
                break
    for w in results["weak_peers"]:
        if "version" in w["result"]:
            info.setdefault(w["tool"], w["result"]["version"])
    try:
        import mpi4py

        info["versions"]["mpi4py"] = mpi4py.__version__
    except ImportError:
        pass
    info["wall_minutes"] = round((time.time() - t_start) / 60, 1)
    command = run_command()
    report(results, a, info, command, out)
    return 0


# ==========================================================================================
# report
# ==========================================================================================
def _f(x, fmt=".3f"):
    return "-" if x is None else format(x, fmt)


def weak_rows(results) -> tuple[list, list]:
    heads = ["case", "spheres/rank", "ranks", "blocks", "N total", "ms/step", "efficiency",
             "compute ms/rank", "compute 1/P", "comm+wait ms/rank", "Mps/s", "median ms/step",
             "repeats", "other procs (cores)", "KE/rank vs 1 rank"]
    rows = []
    base, base_comp = {}, {}
    for w in results["weak"]:
        r = w["result"]
        if "wall" not in r:
            rows.append([w["scenario"], f"{w['n_side'] ** 3:,}", str(w["ranks"]), "-", "-",
                         r.get("error", "?")[-40:]] + ["-"] * 9)
            continue
        t = r["wall"] / r["steps"]
        key = (w["scenario"], w["n_side"])
        if w["ranks"] == 1:
            base[key] = r
        b = base.get(key)
        eff = (b["wall"] / b["steps"]) / t if b else None
        w["efficiency"] = eff
        ke_rel = None
        if b:
            ke_rel = (r["ke_trans"] / w["ranks"] - b["ke_trans"]) / b["ke_trans"]
        ps = per_step(r)
        comp = statistics.mean(x["compute_ms"] for x in ps)
        w["compute_ms"] = comp
        comp1 = base_comp.setdefault(key, comp)
        rows.append([w["scenario"], f"{r['n'] // w['ranks']:,}", str(w["ranks"]),
                     "x".join(map(str, r["case"]["blocks"])), f"{r['n']:,}", f"{1e3 * t:.3f}",
                     f"{100 * eff:.1f} %" if eff else "-", f"{comp:.3f}",
                     f"{100 * comp1 / comp:.1f} %", f"{1e3 * t - comp:.3f}",
                     f"{r['psps'] / 1e6:.2f}",
                     f"{1e3 * r['spread']['median'] / r['steps']:.3f}", str(r["repeats"]),
                     _f(r.get("foreign_cores_during"), ".2f"), f"{ke_rel:+.1e}" if ke_rel is not None else "-"])
    return heads, rows


def _eff(t1, tp):
    return t1 / tp if t1 and tp else None


def _pct(e):
    return "-" if e is None else f"{100 * e:.1f} %"


def peer_weak_rows(results) -> tuple[list, list, list]:
    """The peers' weak-scaling table, and per S1w case and rank count > 1 parsim's efficiency
    against each peer's (best and median repeats); sets each entry's efficiencies (JSON)."""
    heads = ["code", "case", "spheres/rank", "ranks", "processors", "N total", "ms/step",
             "efficiency", "median ms/step", "median efficiency", "repeats",
             "other procs (cores)"]
    rows = []
    one = {(w["tool"], w["n_side"]): (w["result"]["loop_time"] / w["result"]["steps"],
                                      w["result"]["spread"]["median"] / w["result"]["steps"])
           for w in results["weak_peers"] if w["ranks"] == 1 and "loop_time" in w["result"]}
    for w in results["weak_peers"]:
        r = w["result"]
        key = (w["tool"], w["n_side"])
        if "loop_time" not in r:
            rows.append([w["tool"], f"S1w:{w['n_side']}", f"{w['n_side'] ** 3:,}",
                         str(w["ranks"]), "x".join(map(str, w["tiles"])), "-",
                         r.get("error", "?")[-40:]] + ["-"] * 5)
            continue
        t, tm = r["loop_time"] / r["steps"], r["spread"]["median"] / r["steps"]
        t1, tm1 = one.get(key, (None, None))
        w["ms_per_step"], w["median_ms_per_step"] = 1e3 * t, 1e3 * tm
        w["efficiency"], w["median_efficiency"] = _eff(t1, t), _eff(tm1, tm)
        rows.append([w["tool"], f"S1w:{w['n_side']}", f"{r['n'] // w['ranks']:,}", str(w["ranks"]),
                     "x".join(map(str, w["tiles"])), f"{r['n']:,}", f"{1e3 * t:.3f}",
                     _pct(w["efficiency"]), f"{1e3 * tm:.3f}", _pct(w["median_efficiency"]),
                     str(r["repeats"]), _f(r.get("foreign_cores_during"), ".2f")])
    # parsim's efficiencies (weak_rows sets the best one), medians from the spread
    s1 = [w for w in results["weak"] if w["scenario"] == "S1w" and "wall" in w["result"]]
    par1 = {w["n_side"]: w["result"]["spread"]["median"] / w["result"]["steps"]
            for w in s1 if w["ranks"] == 1}
    par = {}
    for w in s1:
        tm = w["result"]["spread"]["median"] / w["result"]["steps"]
        par[(w["n_side"], w["ranks"])] = (w.get("efficiency"), _eff(par1.get(w["n_side"]), tm))
    ratios = []
    for w in results["weak_peers"]:
        if w["ranks"] == 1:
            continue
        pe, pm = par.get((w["n_side"], w["ranks"]), (None, None))
        fe, fm = w.get("efficiency"), w.get("median_efficiency")
        ratios.append({"case": f"S1w:{w['n_side']}", "spheres_per_rank": w["n_side"] ** 3,
                       "ranks": w["ranks"], "peer": w["tool"], "parsim_efficiency": pe,
                       "peer_efficiency": fe, "ratio": pe / fe if pe and fe else None,
                       "parsim_median_efficiency": pm, "peer_median_efficiency": fm,
                       "median_ratio": pm / fm if pm and fm else None})
    results["weak_ratios"] = ratios
    lines = []
    for c in sorted({(x["case"], x["spheres_per_rank"], x["ranks"]) for x in ratios},
                    key=lambda c: (c[1], c[2])):
        xs = [x for x in ratios if (x["case"], x["spheres_per_rank"], x["ranks"]) == c]
        lines.append(
            f"{c[0]} ({c[1]:,} spheres/rank), {c[2]} ranks: parsim efficiency "
            f"{_pct(xs[0]['parsim_efficiency'])} (median {_pct(xs[0]['parsim_median_efficiency'])}); "
            + "; ".join(f"{x['peer']} {_pct(x['peer_efficiency'])} (median "
                        f"{_pct(x['peer_median_efficiency'])}), parsim / {x['peer']} = "
                        f"{_f(x['ratio'], '.2f')} (medians {_f(x['median_ratio'], '.2f')})"
                        for x in xs))
    return heads, rows, lines


SPLIT_HEADS = ["case", "ranks", "rank", "step ms", "compute ms", "(neigh / contacts / integr.)",
               "pack+unpack ms", "exchange ms", "allreduce + local images ms", "checks ms",
               "rest ms", "max RSS MiB"]
COMM_HEADS = ["case", "ranks", "rank", "owned", "bytes/step", "messages/step", "shadows/owned",
              "remote shadows/owned", "refreshed/owned", "migrations/step", "rebuilds",
              "bytes/body"]


def split_rows(label, r):
    rows, comm = [], []
    if "per_rank" not in r:
        return rows, comm
    for x in per_step(r):
        rows.append([label, str(r["ranks_n"]), str(x["rank"]), f"{x['step_ms']:.3f}",
                     f"{x['compute_ms']:.3f}",
                     f"{x['neighbours_ms']:.2f} / {x['contacts_ms']:.2f} / {x['integration_ms']:.2f}",
                     f"{x['pack_unpack_ms']:.4f}", f"{x['exchange_ms']:.4f}",
                     f"{x['other_comm_ms']:.4f}", f"{x['checks_ms']:.4f}", f"{x['rest_ms']:.4f}",
                     f"{x['max_rss_mib']:.0f}"])
        comm.append([label, str(r["ranks_n"]), str(x["rank"]), f"{x['owned']:,}",
                     f"{x['bytes_per_step']:,.0f}", f"{x['messages_per_step']:.3f}",
                     f"{x['shadows_per_owned']:.4f}", f"{x['remote_shadows_per_owned']:.4f}",
                     f"{x['refreshed_per_owned']:.4f}",
                     f"{x['migrations_per_step']:.3f}", str(x["rebuilds"]),
                     f"{x['bytes_per_body']:.0f}"])
    return rows, comm


def strong_rows(results, peers):
    heads = ["code", "ranks", "Mps/s", "speed-up", "parsim / code", "loop s", "median loop s",
             "repeats", "other procs (cores)", "KE at end", "KE rel. to parsim 1 rank", "contacts"]
    rows = []
    sp = results["strong"]["parsim"]
    ref = sp.get("1", {}).get("ke_trans")
    codes = [("parsim", sp)] + [(t, results["strong"]["peers"].get(t, {})) for t in peers]
    for name, d in codes:
        one = d.get("1", {})
        for p in sorted(d, key=int):
            v = d[p]
            ps = v.get("psps")
            if ps is None:
                rows.append([name, p, (v.get("error") or "?")[-50:]] + ["-"] * 9)
                continue
            loop = v.get("loop_time", v.get("wall"))
            spr = v.get("spread", {})
            p_ps = sp.get(p, {}).get("psps")
            ke = v.get("ke_trans")
            rows.append([name, p, f"{ps / 1e6:.2f}",
                         f"{ps / one['psps']:.2f}" if one.get("psps") else "-",
                         f"{p_ps / ps:.2f}" if p_ps else "-", f"{loop:.2f}",
                         f"{spr.get('median', float('nan')):.2f}", str(v.get("repeats", 1)),
                         _f(v.get("foreign_cores_during"), ".2f"), f"{ke:.8g}" if ke is not None else "-",
                         f"{(ke - ref) / ref:+.2e}" if ke is not None and ref else "-",
                         f"{v.get('contacts', float('nan')):.0f}"])
    return heads, rows


def report(results, a, info, command, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    wh, wr = weak_rows(results)
    print(text_table(wh, wr, "weak scaling (best of the repeats; efficiency = t(1 rank)/t(P ranks))"))
    ph, pr, plines = peer_weak_rows(results)
    if pr:
        print(text_table(ph, pr, "peers, weak scaling (S1w; the code's Loop time; best of the "
                                 "repeats)"))
        print("weak-scaling efficiency, parsim / peer:")
        for ln in plines:
            print("  " + ln)
    split, comm = [], []
    for w in results["weak"]:
        s, c = split_rows(f"weak {w['scenario']} {w['n_side'] ** 3:,}/rank", w["result"])
        split += s
        comm += c
    for p, r in sorted(results["strong"]["parsim"].items()):
        s, c = split_rows(f"strong S2b {a.strong_n ** 3:,}", r)
        split += s
        comm += c
    print(text_table(SPLIT_HEADS, split, "time per step and rank (ms)"))
    print(text_table(COMM_HEADS, comm, "communication and memory per step and rank"))
    sh, sr = [], []
    fps = {}
    if results["strong"]["parsim"]:
        sh, sr = strong_rows(results, a.peers)
        print(text_table(sh, sr, f"strong scaling, S2b {a.strong_n ** 3:,} spheres"))
        fps = {p: v.get("fingerprint") for p, v in results["strong"]["parsim"].items()}
        print("parsim state fingerprints (1 vs 2 ranks):", fps)
    (out / "scaling.json").write_text(json.dumps({"info": info, "command": command,
                                                  "args": vars(a), "results": results},
                                                 indent=1, default=str))
    same = len(set(fps.values())) == 1 if fps else None
    md = [
        "# Scaling over MPI ranks: weak and strong, parsim vs LIGGGHTS and LAMMPS",
        "",
        "Generated by `scripts/bench_scaling.py` (method in its docstring; scenarios and contact law",
        "in `scripts/peers/README.md` and `scripts/bench_dem.py`). One numba thread per rank",
        "(`NUMBA_NUM_THREADS=1`), parsim launched with MPICH's `mpiexec` from the venv, the peers",
        "with Open MPI's `mpirun`. Each configuration ran "
        f"{a.repeats} time(s), interleaved; tables show the fastest repeat (the median is given",
        "for the headline numbers). The timed loop excludes building the state, loading the",
        "kernels and the neighbour-list setup (as the peers' `Loop time`).",
        "",
        f"Command: `{command}`",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("git_diff",)),
        "",
        "<!-- notes -->",
        "",
        "## Weak scaling",
        "",
        f"Layout `{a.layout}`: the one-rank state tiled once per rank "
        + ("along x (blocks P x 1 x 1)." if a.layout == "slab" else "(blocks as in the table)."),
        "Efficiency = time per step on 1 rank / on P ranks. compute = neighbours + contacts +",
        "integration per rank (mean over ranks); compute 1/P = compute on 1 rank / on P ranks (below",
        "100 % when the same work runs slower because every core is busy: shared cache and memory",
        "bandwidth, other processes); comm+wait = step time - compute (shadow refresh, allreduces,",
        "waiting for the slower rank, checks). Last column: translational kinetic",
        "energy per rank after the run relative to the one-rank run (the tiles start identical",
        "and stay close; not bit-identical, because shifted positions round differently).",
        "",
        md_table(wh, wr),
        "",
    ]
    if pr:
        md += [
            "### Peers, weak scaling",
            "",
            "LAMMPS and LIGGGHTS on S1w, interleaved with parsim's runs (same warm-up and timed",
            "steps): on 1 rank the peers' `s1_gas` input with `-var n N`, on P ranks the same",
            "lattice tiled along the split axes (`-var nx P*N` ..., box P x 1 x 1 cubes for the",
            "slab layout) with `processors` set so that every rank owns one N^3 tile (the peers",
            "draw velocities per atom, so the tiles differ but the work per rank is the same).",
            "ms/step = the code's own `Loop time` / steps; efficiency = ms/step on 1 rank / on P",
            "ranks. parsim / peer = parsim's weak-scaling efficiency over the peer's: near 1, the",
            "machine limits the efficiency (both codes lose the same); below 1, parsim does.",
            "",
            md_table(ph, pr),
            "",
        ] + [f"- {ln}" for ln in plines] + [""]
    if sr:
        md += [
            f"## Strong scaling: S2b, {a.strong_n ** 3:,} spheres",
            "",
            "parsim blocks (2, 1, 1); peers `mpirun -np 2` with `processors * * 1` (`-var pz 1`).",
            "Mps/s = million particle-steps per second; speed-up relative to the same code on",
            "1 rank; `parsim / code` = parsim's rate over that code's at the same rank count.",
            "Kinetic energy: translational, after the timed steps from the peers' start state.",
            "",
            md_table(sh, sr),
            "",
            "parsim state fingerprint after the run (uid, pose, velocities; all ranks): "
            + ", ".join(f"{p} rank(s) `{v}`" for p, v in sorted(fps.items()))
            + (" - bit-identical." if same else " - DIFFERENT." if same is False else ""),
            "",
        ]
    md += [
        "## Time per step and rank",
        "",
        "compute = neighbours + contacts + integration (`sim.timers`; neighbours includes the",
        "rebuilds, i.e. also migration and shadow creation); pack+unpack and exchange (sending +",
        "waiting) are the per-step shadow refresh (`sim.halo.timers`); allreduce = the rest of",
        "`communication` (the local copies of shadows: periodic images, and on several ranks",
        "the copies along axes with one block; the allreduce of the largest displacement where a",
        "step needs it, which most steps on several ranks skip); checks include the per-step",
        "allreduce; rest = wall time of the rank not in any timer (Python step overhead, setup of",
        "a rebuild's check).",
        "",
        md_table(SPLIT_HEADS, split),
        "",
        "## Communication and memory per step and rank",
        "",
        "bytes and messages sent to neighbour ranks per step (`sim.net`: the shadow refresh every",
        "step plus shadow creation and migration at rebuilds, averaged over the run; the small",
        "count messages that precede a rebuild-time exchange are not counted, nor are collectives).",
        "shadows/owned: all shadow copies (on one rank these are the periodic images) per owned",
        "body; remote: received from another rank; refreshed: the shadows the per-step refresh",
        "writes (those some candidate pair reads, `Halo.prune`; results without the field count",
        "every shadow). bytes/body: `sim.memory_bytes()` (storage with shadows + neighbour list)",
        "per owned body.",
        "",
        md_table(COMM_HEADS, comm),
        "",
        "![scaling](scaling.png)",
        "",
    ]
    (out / "scaling.md").write_text("\n".join(md) + "\n")
    plot(results, a, out)
    print(f"wrote {out / 'scaling.md'}, scaling.json, scaling.png")


def plot(results, a, out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot (pip install -e '.[bench]')")
        return
    strong = bool(results["strong"]["parsim"])      # no third panel for --weak-only
    fig, axes = plt.subplots(1, 3 if strong else 2, figsize=(15 if strong else 10, 4.6))
    # 1: weak-scaling efficiency per case
    ax = axes[0]
    cases = sorted({(w["scenario"], w["n_side"]) for w in results["weak"]})
    for sc, n in cases:
        ws = [w for w in results["weak"] if (w["scenario"], w["n_side"]) == (sc, n)
              and w.get("efficiency")]
        if ws:
            ax.plot([w["ranks"] for w in ws], [100 * w["efficiency"] for w in ws], "o-",
                    label=f"{sc}, {n ** 3:,}/rank")
    for (tool, n), mk in zip(sorted({(w["tool"], w["n_side"]) for w in results["weak_peers"]}),
                             "s^Dvx+*<>"):
        ws = [w for w in results["weak_peers"] if (w["tool"], w["n_side"]) == (tool, n)
              and w.get("efficiency")]
        if ws:
            ax.plot([w["ranks"] for w in ws], [100 * w["efficiency"] for w in ws], mk + ":",
                    mfc="none", label=f"{tool} S1w, {n ** 3:,}/rank")
    ax.axhline(90, color="grey", ls="--", lw=0.8)
    ax.set_xlabel("MPI ranks")
    ax.set_ylabel("weak-scaling efficiency [%]")
    ax.set_ylim(0, 110)
    ax.set_xticks(sorted({w["ranks"] for w in results["weak"]}))
    ax.legend(fontsize=8)
    ax.set_title("weak scaling (best of repeats)")
    # 2: time split per rank, weak cases
    ax = axes[1]
    labels, parts = [], {k: [] for k in ("compute_ms", "pack_unpack_ms", "exchange_ms",
                                         "other_comm_ms", "checks_ms", "rest_ms")}
    for w in results["weak"]:
        r = w["result"]
        if "per_rank" not in r:
            continue
        for x in per_step(r):
            labels.append(f"{w['scenario']} {w['n_side'] ** 3 // 1000}k\nP={w['ranks']} r{x['rank']}")
            for k in parts:
                parts[k].append(x[k])
    bottom = np.zeros(len(labels))
    for k, v in parts.items():
        ax.bar(range(len(labels)), v, bottom=bottom, label=k.replace("_ms", ""))
        bottom += np.array(v)
    ax.set_xticks(range(len(labels)), labels, fontsize=6)
    ax.set_ylabel("ms per step")
    ax.set_yscale("log") if bottom.size and bottom.max() > 20 * max(bottom.min(), 1e-9) else None
    ax.legend(fontsize=7)
    ax.set_title("time per step and rank")
    if not strong:
        fig.tight_layout()
        fig.savefig(out / "scaling.png", dpi=110)
        plt.close(fig)
        return
    # 3: strong scaling, particle-steps/s
    ax = axes[2]
    codes = [("parsim", results["strong"]["parsim"])] + \
        [(t, results["strong"]["peers"].get(t, {})) for t in a.peers]
    ranks = sorted({int(p) for _, d in codes for p in d})
    wd = 0.8 / max(len(codes), 1)
    for i, (name, d) in enumerate(codes):
        vals = [(d.get(str(p), {}).get("psps") or 0) / 1e6 for p in ranks]
        ax.bar(np.arange(len(ranks)) + (i - (len(codes) - 1) / 2) * wd, vals, wd, label=name)
    ax.set_xticks(range(len(ranks)), [f"{p} rank(s)" for p in ranks])
    ax.set_ylabel("million particle-steps / s")
    ax.set_title(f"strong scaling, S2b {a.strong_n ** 3:,} spheres")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "scaling.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
