"""parsim's full DEM step side by side with LIGGGHTS and LAMMPS on the peers' scenarios.

Scenarios (``scripts/peers/README.md``; identical contact law: LAMMPS gran/hooke/history,
kn = 1e5, kt = 2/7 kn, gamma_n = 41.4314 1/s, gamma_t = gamma_n/2, mu = 0.5, dt = 1e-4, skin 0.1):

* S1w - colliding granular gas: n^3 spheres on a simple cubic lattice (spacing 1.25) in a fully
  periodic cube, velocities uniform in [-1, 1]^3 (each code its own random numbers), no gravity;
  ``--warm`` untimed steps, then ``--steps`` timed;
* S2b - the dense settled bed (``configs/data/bed_n20.npz`` / ``bed_n40.npz``, the peers' start
  state) on a floor plane under gravity, periodic in x and y; ``--steps`` timed steps. The peers
  read the bed from a LAMMPS data file written from the npz into the run's temporary directory
  (``write_lammps_data``). The translational kinetic energy at the end is compared between the
  codes.

The peers' input scripts are in ``scripts/peers/``; ``PARSIM_PEER_INPUTS=DIR`` reads the scripts
and ``bed_n*.npz`` from DIR instead.

Each code runs on one MPI rank; parsim with 1 numba thread (the like-for-like comparison) and with
all cores (``--threads``). Every parsim run is a fresh subprocess (the thread count is fixed when
numba starts); its kernels come from the numba cache (``NUMBA_CACHE_DIR``), and a short untimed run
precedes the timed steps so no compilation is timed. Reports particle-steps per second, the
ratio to each peer, parsim's time per phase and bytes per body. Writes ``docs/benchmarks/dem.md``,
``dem.json`` and ``dem.png``.

    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_dem.py            # full (~10 min)
    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_dem.py --quick    # smoke test
    # back-to-back rounds against LIGGGHTS, the gas, ratios per round and their median
    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_dem.py --pairs 3 \
        --scenarios S1w --peers liggghts

Peers: ``apt-get install -y --no-install-recommends liggghts lammps openmpi-bin``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
# the peers' input scripts and the settled beds (PARSIM_PEER_INPUTS=DIR: both from DIR)
_OVERRIDE = os.environ.get("PARSIM_PEER_INPUTS")
PEERS = Path(_OVERRIDE).resolve() if _OVERRIDE else REPO / "scripts" / "peers"
BEDS = Path(_OVERRIDE).resolve() if _OVERRIDE else REPO / "configs" / "data"
sys.path.insert(0, str(REPO / "scripts"))
from bench_common import machine_info, md_table, pyplot, text_table, write_report  # noqa: E402
from bench_common import run_command, use_repo  # noqa: E402

use_repo(REPO)  # measure this tree's parsim

KN, GN, MU, DT, SKIN = 1e5, 41.4314, 0.5, 1e-4, 0.1


# ------------------------------------------------------------------------------------------
# peers
# ------------------------------------------------------------------------------------------
def bed_npz(n_side: int) -> Path:
    """S2b's settled bed of n_side^3 spheres (parsim's start state, and the peers' via
    write_lammps_data)."""
    return BEDS / f"bed_n{n_side}.npz"


def write_lammps_data(npz_path, out_path) -> Path:
    """Write the bed in ``npz_path`` as the LAMMPS data file the peers read (``read_data``; atom
    style sphere in LAMMPS, granular in LIGGGHTS): header with the atom count, one atom type and
    the box; ``Atoms # sphere`` rows ``id type diameter density x y z ix iy iz``; ``Velocities``
    rows ``id vx vy vz wx wy wz``. Floats are written with repr(), so they read back as the same
    float64 values. Atoms in the npz's (uid) order; image flags 0 (the npz holds wrapped
    positions and no image flags; they do not enter the dynamics)."""
    out_path = Path(out_path)
    with np.load(npz_path) as f:
        uid, dia, rho = f["uid"].tolist(), f["diameter"].tolist(), f["density"].tolist()
        pos, vel, ang, box = (f["position"].tolist(), f["velocity"].tolist(),
                              f["angular_velocity"].tolist(), f["box"].tolist())
    lines = [f"LAMMPS data file written by scripts/bench_dem.py from {Path(npz_path).name}", "",
             f"{len(uid)} atoms", "1 atom types", ""]
    lines += [f"{lo!r} {hi!r} {ax}lo {ax}hi" for (lo, hi), ax in zip(box, "xyz")]
    lines += ["", "Atoms # sphere", ""]
    lines += [f"{i} 1 {d!r} {r!r} {x!r} {y!r} {z!r} 0 0 0"
              for i, d, r, (x, y, z) in zip(uid, dia, rho, pos)]
    lines += ["", "Velocities", ""]
    lines += [f"{i} {a!r} {b!r} {c!r} {u!r} {v!r} {w!r}"
              for i, (a, b, c), (u, v, w) in zip(uid, vel, ang)]
    out_path.write_text("\n".join(lines) + "\n")
    return out_path


def peer_binary(tool: str) -> str | None:
    return shutil.which({"lammps": "lmp", "liggghts": "liggghts"}[tool])


def run_peer(tool: str, scenario: str, n_side: int, steps: int, warm: int) -> dict:
    exe = peer_binary(tool)
    if exe is None:
        return {"error": f"{tool} not installed"}
    src = PEERS / ({"S1w": "s1_gas", "S2b": "s2b_bed"}[scenario] + (".lammps" if tool == "lammps" else ".liggghts"))
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(src, tmp)
        args = ["-in", src.name, "-var", "steps", str(steps)]
        if scenario == "S1w":
            args += ["-var", "n", str(n_side), "-var", "warm", str(warm)]
        else:
            data = write_lammps_data(bed_npz(n_side), Path(tmp) / f"bed_n{n_side}.data")
            args += ["-var", "data", data.name]
        mpirun = ["mpirun", "-np", "1"]
        if os.geteuid() == 0:
            mpirun += ["--allow-run-as-root", "--oversubscribe"]
        t0 = time.perf_counter()
        r = subprocess.run(mpirun + [exe] + args, cwd=tmp, capture_output=True, text=True,
                           timeout=3600, env={**os.environ, "OMP_NUM_THREADS": "1"})
        wall = time.perf_counter() - t0
    out = r.stdout
    loops = re.findall(r"Loop time of ([0-9.eE+-]+) on \d+ procs for (\d+) steps with (\d+) atoms", out)
    if r.returncode != 0 or not loops:
        return {"error": f"{tool} failed (exit {r.returncode}): {(r.stderr or out)[-400:]}"}
    loop_time, nsteps, natoms = float(loops[-1][0]), int(loops[-1][1]), int(loops[-1][2])
    # thermo rows "step atoms ke c_ncon": the last one is the end of the timed run
    rows = re.findall(r"^\s*(\d+)\s+(\d+)\s+([0-9.eE+-]+)\s+([0-9.eE+-]+)\s*$", out, re.M)
    ke = float(rows[-1][2]) if rows else float("nan")
    contacts = float(rows[-1][3]) if rows else float("nan")
    version = re.search(r"(LAMMPS|LIGGGHTS)[^\n]*\(([^)]*)\)", out)
    return {"loop_time": loop_time, "steps": nsteps, "n": natoms,
            "psps": natoms * nsteps / loop_time, "ke_trans": ke, "contacts": contacts,
            "wall": wall, "version": version.group(0) if version else tool}


# ------------------------------------------------------------------------------------------
# parsim (runs in a subprocess: --worker)
# ------------------------------------------------------------------------------------------
def build_parsim(scenario: str, n_side: int):
    import parsim

    if scenario == "S1w":
        L = 1.25 * n_side
        sim = parsim.Simulation(dt=DT, domain=((0, 0, 0), (L, L, L)), periodic=(True,) * 3,
                                skin=SKIN)
        m = sim.add_material("grain", density=1.0, stiffness=KN, damping=GN, friction=MU)
        g = np.stack(np.meshgrid(*[np.arange(n_side)] * 3, indexing="ij"), -1).reshape(-1, 3)
        rng = np.random.default_rng(15485863)
        sim.add_spheres((g + 0.5) * 1.25, np.full(len(g), 0.5), m,
                        velocities=rng.uniform(-1, 1, (len(g), 3)))
        return sim
    with np.load(bed_npz(n_side)) as f:
        pos, vel, ang, dia, box = (f["position"], f["velocity"], f["angular_velocity"],
                                   f["diameter"], f["box"])
    sim = parsim.Simulation(dt=DT, gravity=(0, 0, -9.81), domain=(box[:, 0], box[:, 1]),
                            periodic=(True, True, False), skin=SKIN)
    m = sim.add_material("grain", density=1.0, stiffness=KN, damping=GN, friction=MU)
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    sim.add_spheres(pos, 0.5 * dia, m, velocities=vel, angular_velocities=ang)
    return sim


def worker(scenario: str, n_side: int, steps: int, warm: int) -> dict:
    import numba

    sim = build_parsim(scenario, n_side)
    n = int(np.count_nonzero(sim.st.shape[: sim.st.n_owned] == 0))
    if scenario == "S1w":
        sim.run(warm)
    else:
        # load the kernels on a throw-away copy so the timed run starts from the peers' state;
        # its extra rebuild loads the kernels that only a rebuild after steps uses (without it
        # the first S2b process spent ~0.15 s per rebuild loading them inside the timed loop;
        # until 2026-11-23 21:40 UTC the copy's rebuild skipped the state check that precedes
        # every rebuild in step(), so a cold cache compiled check_state in the timed loop)
        warm = build_parsim(scenario, n_side)
        warm.run(3)
        warm._check(warm.step_count + 1)  # as a rebuild inside step() does (check_state)
        warm._rebuild()
        warm.run(2)
        # the setup (first neighbour list, forces of the start state) outside the timed loop,
        # as the peers' "Loop time" (before 2026-11-23 19:00 UTC it was inside)
        sim._setup()
    for k in sim.timers:
        sim.timers[k] = 0.0
    b0 = sim.nl.builds if sim.nl is not None else 0
    t0 = time.perf_counter()
    sim.run(steps)
    wall = time.perf_counter() - t0
    s = sim.state()
    sph = s["shape"] == 0
    ke_t = float(0.5 * np.sum(s["mass"][sph] * np.sum(s["velocity"][sph] ** 2, axis=1)))
    return {"n": n, "steps": steps, "wall": wall, "psps": n * steps / wall,
            "timers": dict(sim.timers), "rebuilds": sim.nl.builds - b0,
            "bytes_per_body": sim.memory_bytes() / n, "ke_trans": ke_t,
            "contacts": sim.n_contacts, "threads": numba.get_num_threads(),
            "pairs_in_key_order": bool(sim.nl.key_order)}


def run_parsim(scenario: str, n_side: int, steps: int, warm: int, threads: int) -> dict:
    env = {**os.environ, "NUMBA_NUM_THREADS": str(threads)}
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".numba_cache"))
    r = subprocess.run([sys.executable, __file__, "--worker", scenario, str(n_side), str(steps),
                        str(warm)], capture_output=True, text=True, env=env, timeout=7200)
    if r.returncode != 0:
        return {"error": r.stderr[-800:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[20, 40], help="n per side: 20 -> 8,000, 40 -> 64,000")
    ap.add_argument("--scenarios", nargs="+", default=["S1w", "S2b"])
    ap.add_argument("--peers", nargs="*", default=["lammps", "liggghts"])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default S1w 2000, S2b 1000)")
    ap.add_argument("--warm", type=int, default=10000, help="S1w untimed warm-up steps")
    ap.add_argument("--quick", action="store_true", help="sizes 20, 300 steps, 500 warm-up")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    ap.add_argument("--pairs", type=int, default=0, metavar="K",
                    help="instead of one run per code: K alternating rounds of (each peer, parsim "
                         "with 1 thread) per case, ratios per round and their median "
                         "(dem_pairs.md/.json/.png); the host's load changes from minute to "
                         "minute, and a ratio of back-to-back runs is steadier than one run")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        sc, n, st, w = a.worker
        print(json.dumps(worker(sc, int(n), int(st), int(w))))
        return 0
    if a.quick:
        a.sizes, a.warm = [20], 500
    if a.pairs:
        return alternate(a)
    threads = sorted(set(a.threads))
    results = []
    for sc in a.scenarios:
        for n in a.sizes:
            steps = a.steps or (300 if a.quick else (2000 if sc == "S1w" else 1000))
            row = {"scenario": sc, "n_side": n, "steps": steps, "warm": a.warm if sc == "S1w" else 0}
            for tool in a.peers:
                print(f"{sc} n={n ** 3}: {tool} ...", flush=True)
                row[tool] = run_peer(tool, sc, n, steps, row["warm"])
            for t in threads:
                print(f"{sc} n={n ** 3}: parsim, {t} thread(s) ...", flush=True)
                row[f"parsim_{t}"] = run_parsim(sc, n, steps, row["warm"], t)
            results.append(row)
    info = machine_info(str(REPO))
    for tool in a.peers:
        for r in results:
            if "version" in r.get(tool, {}):
                info[tool] = r[tool]["version"]
                break
    command = run_command()
    report(results, a.peers, threads, info, command, Path(a.out))
    return 0


def alternate(a) -> int:
    """``--pairs K``: per case K rounds of (each peer, parsim 1 thread), back to back."""
    command = run_command()
    cases = []
    for sc in a.scenarios:
        for n in a.sizes:
            steps = a.steps or (300 if a.quick else (2000 if sc == "S1w" else 1000))
            warm = a.warm if sc == "S1w" else 0
            rounds = []
            for k in range(a.pairs):
                r = {}
                for tool in a.peers:
                    r[tool] = run_peer(tool, sc, n, steps, warm)
                r["parsim_1"] = run_parsim(sc, n, steps, warm, 1)
                line = "  ".join(f"{c} {(_psps(r[c]) or 0) / 1e6:.2f}" for c in r)
                print(f"{sc} n={n ** 3} round {k + 1}/{a.pairs}: {line} M particle-steps/s",
                      flush=True)
                rounds.append(r)
            cases.append({"scenario": sc, "n_side": n, "steps": steps, "warm": warm,
                          "rounds": rounds})
    info = machine_info(str(REPO))
    heads = ["scenario", "N", "peer", "rounds", "parsim / peer per round", "median", "min",
             "max", "rounds >= 1"]
    rows = []
    for c in cases:
        for p in a.peers:
            rat = [_psps(r["parsim_1"]) / _psps(r[p]) for r in c["rounds"]
                   if _psps(r["parsim_1"]) and _psps(r[p])]
            c.setdefault("ratios", {})[p] = rat
            if rat:
                rows.append([c["scenario"], f"{c['n_side'] ** 3:,}", p, str(len(rat)),
                             " ".join(f"{x:.2f}" for x in rat), f"{np.median(rat):.2f}",
                             f"{min(rat):.2f}", f"{max(rat):.2f}",
                             f"{sum(x >= 1.0 for x in rat)}/{len(rat)}"])
    print(text_table(heads, rows, "parsim (1 thread) / peer, back-to-back rounds"))
    out = Path(a.out)
    write_report(out, "dem_pairs", "DEM step, back-to-back rounds: parsim (1 thread) / peer",
                 "Generated by `scripts/bench_dem.py --pairs K`: per case K rounds, each one run "
                 "of every peer and then one of parsim with one numba thread (each a fresh "
                 "process, as in the main table of [dem.md](dem.md)); the ratio of a round "
                 "compares runs minutes apart at most, the median over rounds is the headline.",
                 command, info, heads, rows, {"cases": cases})
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(7, 4))
        labels = []
        for i, row in enumerate(rows):
            vals = [float(x) for x in row[4].split()]
            ax.plot([i] * len(vals), vals, "o", alpha=0.6)
            ax.plot([i - 0.25, i + 0.25], [float(row[5])] * 2, "k-")
            labels.append(f"{row[0]} {row[1]}\nvs {row[2]}")
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(rows)), labels)
        ax.set_ylabel("parsim / peer (particle-steps/s)")
        ax.set_title("back-to-back rounds (dots) and median (bar)")
        fig.tight_layout()
        fig.savefig(out / "dem_pairs.png", dpi=120)
    return 0


def _psps(d):
    return d.get("psps") if isinstance(d, dict) else None


def report(results, peers, threads, info, command, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    heads = ["scenario", "N", "steps"] + [f"{p} Mps/s" for p in peers] + \
        [f"parsim {t}T Mps/s" for t in threads] + \
        [f"parsim {t}T / {p}" for t in threads for p in peers]
    rows = []
    for r in results:
        row = [r["scenario"], f"{r['n_side'] ** 3:,}", str(r["steps"])]
        for p in peers:
            v = _psps(r[p])
            row.append(f"{v / 1e6:.2f}" if v else r[p].get("error", "?")[:30])
        for t in threads:
            v = _psps(r[f"parsim_{t}"])
            row.append(f"{v / 1e6:.2f}" if v else r[f"parsim_{t}"].get("error", "?")[-60:])
        for t in threads:
            for p in peers:
                a, b = _psps(r[f"parsim_{t}"]), _psps(r[p])
                row.append(f"{a / b:.2f}" if a and b else "-")
        rows.append(row)
    phase_heads = ["scenario", "N", "threads", "neighbours ms/step", "contacts ms/step",
                   "integration ms/step", "checks ms/step", "rebuilds", "bytes/body"]
    phase_rows = []
    ke_heads = ["scenario", "N", "code", "translational KE at end", "rel. diff. to parsim 1T",
                "contacts"]
    ke_rows = []
    for r in results:
        for t in threads:
            d = r[f"parsim_{t}"]
            if "timers" not in d:
                continue
            tm = {k: 1e3 * v / d["steps"] for k, v in d["timers"].items()}
            phase_rows.append([r["scenario"], f"{d['n']:,}", str(t),
                               f"{tm['neighbours']:.3f}", f"{tm['contacts']:.3f}",
                               f"{tm['integration']:.3f}", f"{tm['checks']:.3f}",
                               str(d["rebuilds"]), f"{d['bytes_per_body']:.0f}"])
        if r["scenario"] == "S2b":
            ref = r[f"parsim_{threads[0]}"].get("ke_trans")
            for code in [f"parsim_{t}" for t in threads] + list(peers):
                d = r[code]
                if "ke_trans" in d:
                    rel = (d["ke_trans"] - ref) / ref if ref else float("nan")
                    ke_rows.append([r["scenario"], f"{r['n_side'] ** 3:,}", code,
                                    f"{d['ke_trans']:.8g}", f"{rel:+.2e}", f"{d['contacts']:.0f}"])
    txt = text_table(heads, rows, "million particle-steps per second (one MPI rank each)")
    print(txt)
    print(text_table(phase_heads, phase_rows, "parsim time split"))
    if ke_rows:
        print(text_table(ke_heads, ke_rows, "S2b: kinetic energy after the run"))
    (out / "dem.json").write_text(json.dumps({"info": info, "command": command,
                                               "results": results}, indent=1, default=str))
    md = [
        "# DEM step: parsim vs LIGGGHTS and LAMMPS",
        "",
        "Generated by `scripts/bench_dem.py` (scenarios, law and method in its docstring and in",
        "`scripts/peers/README.md`). Every code on one MPI rank; parsim also with all cores as numba",
        "threads. Shared machines are noisy (repeats differ by up to ~30 %); the ratios come from the",
        "same run.",
        "",
        f"Command: `{command}`",
        "",
        "Machine: " + ", ".join(f"{k} {v}" for k, v in info.items() if k not in ("git_diff",)),
        "",
        "## Particle-steps per second (millions)",
        "",
        md_table(heads, rows),
        "",
        "## parsim: time per phase and memory",
        "",
        md_table(phase_heads, phase_rows),
        "",
    ]
    if ke_rows:
        md += ["## S2b: translational kinetic energy after the run (shared start state)", "",
               md_table(ke_heads, ke_rows), ""]
    (out / "dem.md").write_text("\n".join(md) + "\n")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        labels = [f"{r['scenario']}\n{r['n_side'] ** 3:,}" for r in results]
        codes = list(peers) + [f"parsim_{t}" for t in threads]
        x = np.arange(len(results))
        w = 0.8 / len(codes)
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for i, c in enumerate(codes):
            vals = [(_psps(r[c]) or 0) / 1e6 for r in results]
            name = c.replace("parsim_", "parsim ") + (" thread(s)" if c.startswith("parsim") else "")
            ax.bar(x + (i - (len(codes) - 1) / 2) * w, vals, w, label=name)
        ax.set_xticks(x, labels)
        ax.set_ylabel("million particle-steps / s")
        ax.set_title("DEM step, one MPI rank")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "dem.png", dpi=120)
    except ImportError:
        print("matplotlib missing: no plot (pip install -e '.[bench]')")


if __name__ == "__main__":
    sys.exit(main())
