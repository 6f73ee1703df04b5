"""What the second core costs without any communication: one single-rank parsim run alone,
then two identical ones at the same time (independent processes, no MPI).

Weak scaling from 1 to 2 ranks on a 2-core machine measures the parallel code *and* the
machine: two processes share the memory bus and the last-level cache, and on a virtual machine
the host's other tenants. The ratio ``t(alone) / t(two at once)`` is the weak-scaling
efficiency that two ranks with no communication at all would reach: the ceiling of
``scripts/bench_scaling.py --weak`` on the same machine at the same time. The runs are
``scripts/bench_dem.py --worker`` (one numba thread each; the scenarios of that script, S1w at any
n per side, S2b at 20 and 40); each configuration runs ``--repeats`` times, alone and paired
alternately, and the best of each is reported (as bench_scaling does).

Two independent runs drift out of phase, so the memory-heavy part of one step (the integration
streams every body's arrays) often meets the other run's compute-heavy part (contacts). Ranks
of one MPI run cannot drift: they meet at the end of every step. ``--lockstep`` measures that
too: the same two single-rank runs in one ``mpiexec -n 2``, each with its own serial
simulation, joined by one 16-byte ``Allreduce`` per step (what a 2-rank run's end-of-step check
does) and nothing else, against ``mpiexec -n 1`` of the same program (the few collective
checks of building the state join the ranks too, outside the timed loop). Its ratio is the
ceiling of weak scaling with the ranks in step and no data exchanged.

    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/bench_contention.py \\
        --cases S1w:20 S1w:40 S1w:50 S2b:20 S2b:40 --repeats 2

Writes ``contention.md``, ``contention.json`` and ``contention.png`` to ``--out``
(default docs/benchmarks).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))
from bench_common import compile_first, machine_info, pyplot, run_command  # noqa: E402
from bench_common import text_table, write_report  # noqa: E402

DEM = REPO / "scripts" / "bench_dem.py"


def _cmd(scenario: str, n_side: int, steps: int, warm: int) -> list[str]:
    return [sys.executable, str(DEM), "--worker", scenario, str(n_side), str(steps), str(warm)]


def _env() -> dict:
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".numba_cache"))
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _ms_per_step(out: str) -> float:
    d = json.loads(out.strip().splitlines()[-1])
    return 1e3 * d["wall"] / d["steps"]


def run(scenario: str, n_side: int, steps: int, warm: int, copies: int) -> list[float]:
    """ms/step of each of ``copies`` identical runs started together."""
    procs = [subprocess.Popen(_cmd(scenario, n_side, steps, warm), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=_env())
             for _ in range(copies)]
    res = []
    for p in procs:
        out, err = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise RuntimeError(f"worker failed: {err[-800:]}")
        res.append(_ms_per_step(out))
    return res


def _mpiexec() -> str:
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else "mpiexec"


def run_lockstep(scenario: str, n_side: int, steps: int, warm: int, ranks: int) -> float:
    """ms/step of the slowest of ``ranks`` single-rank runs joined once per step."""
    cmd = [_mpiexec(), "-n", str(ranks), sys.executable, "-m", "mpi4py", __file__,
           "--lockstep-worker", scenario, str(n_side), str(steps), str(warm)]
    compile_first(sys.executable, _env(), ranks)
    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=3600)
    if p.returncode != 0:
        raise RuntimeError(f"lockstep worker failed: {p.stderr[-800:]}")
    return _ms_per_step(p.stdout)


def lockstep_worker(scenario: str, n_side: int, steps: int, warm: int) -> None:
    """Under mpiexec: bench_dem's worker on every rank, each with its own serial simulation
    whose end-of-step check also makes an Allreduce over all ranks (the only communication);
    rank 0 prints the result with the wall time of the slowest rank."""
    from mpi4py import MPI

    import bench_dem
    import parsim.simulation

    world = MPI.COMM_WORLD
    parsim.simulation.auto_comm = lambda: None      # every rank its own serial simulation
    build = bench_dem.build_parsim

    def joined(*args):
        sim = build(*args)
        check = sim.net.first_error_and_max
        pair, out = np.zeros(2), np.empty(2)

        def first_error_and_max(*args, **kwargs):      # whatever Net's signature is
            world.Allreduce(pair, out, op=MPI.MAX)
            return check(*args, **kwargs)
        sim.net.first_error_and_max = first_error_and_max
        return sim

    bench_dem.build_parsim = joined
    res = bench_dem.worker(scenario, n_side, steps, warm)
    res["wall"] = world.allreduce(res["wall"], op=MPI.MAX)
    if world.rank == 0:
        print(json.dumps(res))


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--lockstep-worker":
        sc, n, steps, warm = sys.argv[2], *map(int, sys.argv[3:])
        lockstep_worker(sc, n, steps, warm)
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=["S1w:20", "S1w:40", "S1w:50", "S2b:20",
                                                   "S2b:40"],
                    help="SCENARIO:n_per_side (S2b: 20 or 40)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps (default: S1w 2000 (1000 from 50 per side), S2b 300)")
    ap.add_argument("--warm", type=int, default=2000, help="S1w untimed warm-up steps")
    ap.add_argument("--lockstep", action="store_true",
                    help="also two runs joined once per step (mpiexec -n 2 vs -n 1)")
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    a = ap.parse_args()
    cases = []
    for c in a.cases:
        sc, n = c.split(":")
        n = int(n)
        steps = a.steps or (300 if sc == "S2b" else (1000 if n >= 50 else 2000))
        cases.append({"case": c, "scenario": sc, "n_side": n, "steps": steps,
                      "warm": a.warm if sc == "S1w" else 0, "alone": [], "paired": [],
                      "lock_alone": [], "lock_paired": []})
    for k in range(a.repeats):
        for c in cases:
            args = (c["scenario"], c["n_side"], c["steps"], c["warm"])
            alone = run(*args, copies=1)[0]
            paired = run(*args, copies=2)
            c["alone"].append(alone)
            c["paired"].append(paired)
            msg = (f"repeat {k + 1}/{a.repeats} {c['case']}: alone {alone:.3f} ms/step, "
                   f"two at once {paired[0]:.3f} / {paired[1]:.3f} ms/step")
            if a.lockstep:
                c["lock_alone"].append(run_lockstep(*args, ranks=1))
                c["lock_paired"].append(run_lockstep(*args, ranks=2))
                msg += (f"; lockstep alone {c['lock_alone'][-1]:.3f}, two in lockstep "
                        f"{c['lock_paired'][-1]:.3f} ms/step")
            print(msg, flush=True)
    heads = ["case", "bodies per run", "steps", "alone ms/step", "two at once ms/step (slower)",
             "ceiling = alone / two at once", "repeats"]
    if a.lockstep:
        heads[-1:-1] = ["lockstep: alone ms/step", "two in lockstep ms/step",
                        "lockstep ceiling"]
    rows = []
    for c in cases:
        best_alone = min(c["alone"])
        best_pair = min(max(p) for p in c["paired"])
        c["ceiling"] = best_alone / best_pair
        row = [c["case"], f"{c['n_side'] ** 3:,}", str(c["steps"]), f"{best_alone:.3f}",
               f"{best_pair:.3f}", f"{100 * c['ceiling']:.1f} %"]
        if a.lockstep:
            la, lp = min(c["lock_alone"]), min(c["lock_paired"])
            c["lockstep_ceiling"] = la / lp
            row += [f"{la:.3f}", f"{lp:.3f}", f"{100 * la / lp:.1f} %"]
        rows.append(row + [str(a.repeats)])
    print(text_table(heads, rows, "two independent single-rank runs at once (no MPI)"))
    info = machine_info(str(REPO))
    command = run_command()
    out = Path(a.out)
    write_report(out, "contention",
                 "The second core without communication: two single-rank runs at once",
                 "Generated by `scripts/bench_contention.py` (method in its docstring). The "
                 "ceiling is the weak-scaling efficiency (1 -> 2 ranks) that two ranks with no "
                 "communication at all would reach on this machine: best time alone / best time "
                 "of the slower of two identical runs started together; with `--lockstep`, "
                 "also the same runs joined by one Allreduce per step (see the docstring). "
                 "Compare with "
                 "`bench_scaling.py --weak` run at the same time ([scaling.md](scaling.md)).",
                 command, info, heads, rows, {"cases": cases})
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = np.arange(len(cases))
        w = 0.4 if a.lockstep else 0.8
        ax.bar(xs - (w / 2 if a.lockstep else 0), [100 * c["ceiling"] for c in cases], w,
               label="independent")
        if a.lockstep:
            ax.bar(xs + w / 2, [100 * c["lockstep_ceiling"] for c in cases], w,
                   label="in lockstep (1 Allreduce per step)")
        ax.axhline(90, color="grey", ls="--", lw=0.8, label="weak-scaling target 90 %")
        ax.set_xticks(range(len(cases)), [c["case"] for c in cases])
        ax.set_ylabel("alone / two at once (%)")
        ax.set_title("ceiling of 1 -> 2 rank weak scaling on this machine")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "contention.png", dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
