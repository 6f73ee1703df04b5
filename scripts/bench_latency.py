#!/usr/bin/env python3
"""How long two ranks take to meet, after both have arrived, as a function of the work between
two meetings.

A 2-rank step of the weak-scaling gas meets the other rank twice (the shadow refresh and the
end-of-step check), each time after 100-150 us of work. ``scripts/step_segments.py`` shows that
on the 2026-11-28 host each meeting lasted 15-20 us *after the later rank had arrived*, while
MPICH's 16-byte ``Sendrecv`` takes about 4 us when called back to back. This script measures
that latency alone, with no parsim in the loop: two ranks repeat

    work for ``gap`` us (a numba loop on a few kB, the same on both ranks);
    t_arrive = perf_counter(); meet; t_exit = perf_counter()

and report ``max over ranks of t_exit - max over ranks of t_arrive``: how long the meeting
takes once both are there (the wait for a late rank is not in it). Both ranks read the same
clock (``CLOCK_MONOTONIC`` of one machine), so the script is for two ranks on one node. The
ways to meet:

``Sendrecv 16 B``    MPI ``Sendrecv`` of 16 bytes with the other rank (parsim's 2-rank check)
``Sendrecv 10 kB``   the same with 10 kB each way (the 8,000-per-rank gas's refresh message)
``shared flag``      no MPI: each rank writes its iteration number into a shared-memory page
                     and spins until the other's number is there (what the hardware and the
                     operating system allow at best)

The gaps run in a shuffled order over ``--repeats`` rounds; the table gives the median, p10 and
p90 over all iterations of a (gap, method), and the plot the medians against the gap.

    .venv/bin/python scripts/bench_latency.py                     # ~1 min
    .venv/bin/python scripts/bench_latency.py --gaps 0 30 130 1000 --repeats 5

Writes ``latency.md``, ``.json`` and ``.png`` to ``--out`` (default docs/benchmarks).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts"))

METHODS = ("Sendrecv 16 B", "Sendrecv 10 kB", "shared flag")
PAYLOAD = {"Sendrecv 16 B": 2, "Sendrecv 10 kB": 1280}       # float64 each way


def _spin_kernel():
    from numba import njit

    @njit(cache=False)
    def spin(a, reps):
        """``reps`` passes of a dependent multiply-add over ``a`` (a few kB: no memory
        traffic), so that the time is ``reps`` x a constant."""
        s = 0.0
        for _ in range(reps):
            for i in range(a.size):
                a[i] = a[i] * 1.0000001 + 1e-9
                s += a[i]
        return s

    return spin


def _worker(gaps, iters, repeats, seed) -> None:
    from multiprocessing import shared_memory

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size != 2:
        raise SystemExit("bench_latency: run the worker on exactly 2 ranks")
    peer = 1 - rank
    spin = _spin_kernel()
    a = np.ones(256)
    spin(a, 1)
    # calibrate: passes per microsecond, the same on both ranks (the slower rank's figure)
    t0 = time.perf_counter()
    spin(a, 20000)
    per_us = 20000 / (1e6 * (time.perf_counter() - t0))
    per_us = comm.allreduce(per_us, op=MPI.MIN)
    name = comm.bcast(shared_memory.SharedMemory(create=True, size=4096).name if rank == 0
                      else None, root=0)
    shm = shared_memory.SharedMemory(name=name)
    flags = np.ndarray((2,), dtype=np.int64, buffer=shm.buf)
    comm.Barrier()
    if rank == 0:
        flags[:] = 0
    comm.Barrier()
    bufs = {m: (np.full(k, float(rank)), np.empty(k)) for m, k in PAYLOAD.items()}
    ticket = [0]

    def meet(method):
        if method == "shared flag":
            ticket[0] += 1
            k = ticket[0]
            flags[rank] = k
            while flags[peer] < k:
                pass
            return
        out, inb = bufs[method]
        comm.Sendrecv([out, MPI.DOUBLE], peer, 7, [inb, MPI.DOUBLE], peer, 7)

    rng = np.random.default_rng(seed)
    samples = {(g, m): [] for g in gaps for m in METHODS}
    for _ in range(repeats):
        order = [(g, m) for g in gaps for m in METHODS]
        order = [order[i] for i in rng.permutation(len(order))]
        for g, m in order:
            reps = int(round(g * per_us))
            n = iters if g < 300 else max(iters // 4, 50)
            arrive, leave = np.empty(n), np.empty(n)
            comm.Barrier()
            for i in range(5):                      # the first meetings of a method: not timed
                meet(m)
            for i in range(n):
                if reps:
                    spin(a, reps)
                arrive[i] = time.perf_counter()
                meet(m)
                leave[i] = time.perf_counter()
            both = comm.gather((arrive, leave), root=0)
            if rank == 0:
                (a0, l0), (a1, l1) = both
                samples[(g, m)].extend((1e6 * (np.maximum(l0, l1) - np.maximum(a0, a1))).tolist())
        if rank == 0:
            ok = (bufs["Sendrecv 16 B"][1] == 1.0).all() and (bufs["Sendrecv 10 kB"][1] == 1.0).all()
            if not ok:
                raise SystemExit("bench_latency: wrong data received")
    comm.Barrier()
    shm.close()
    if rank == 0:
        shm.unlink()
        rows = []
        for (g, m), v in samples.items():
            v = np.array(v)
            rows.append({"gap_us": g, "method": m, "n": int(v.size),
                         "median_us": float(np.median(v)), "p10_us": float(np.percentile(v, 10)),
                         "p90_us": float(np.percentile(v, 90))})
        print("RESULT " + json.dumps({"rows": rows, "passes_per_us": per_us}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gaps", type=float, nargs="+", default=[0, 10, 30, 130, 300, 1000],
                    help="work between two meetings, us")
    ap.add_argument("--iters", type=int, default=1000, help="meetings per (gap, method, round)")
    ap.add_argument("--repeats", type=int, default=3, help="rounds over all (gap, method)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(REPO / "docs" / "benchmarks"))
    ap.add_argument("--stem", default="latency")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(a.gaps, a.iters, a.repeats, a.seed)
        return

    from bench_common import machine_info, pyplot, text_table, write_report

    mpiexec = Path(sys.executable).parent / "mpiexec"
    cmd = [str(mpiexec if mpiexec.exists() else "mpiexec"), "-n", "2", sys.executable,
           __file__, "--worker", "--gaps", *map(str, a.gaps), "--iters", str(a.iters),
           "--repeats", str(a.repeats), "--seed", str(a.seed)]
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("NUMBA_CACHE_DIR", str(REPO / ".numba_cache"))
    info = machine_info(str(REPO))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if r.returncode != 0:
        raise SystemExit(f"bench_latency: the 2-rank worker failed:\n{r.stdout[-2000:]}"
                         f"\n{r.stderr[-2000:]}")
    res = json.loads(next(x for x in r.stdout.splitlines() if x.startswith("RESULT "))[7:])
    rows = res["rows"]
    heads = ["gap (us)", "method", "meetings", "median (us)", "p10 (us)", "p90 (us)"]
    table = [[f"{x['gap_us']:g}", x["method"], str(x["n"]), f"{x['median_us']:.1f}",
              f"{x['p10_us']:.1f}", f"{x['p90_us']:.1f}"]
             for x in sorted(rows, key=lambda x: (x["gap_us"], METHODS.index(x["method"])))]
    print(text_table(heads, table, "time from the later rank's arrival to the last exit"))
    command = (".venv/bin/python scripts/bench_latency.py " + " ".join(sys.argv[1:])).strip()
    intro = ("Generated by `scripts/bench_latency.py` (method in its docstring): two ranks work "
             "for `gap` us, then meet; the time from the later rank's arrival to the later "
             "exit, over every meeting.")
    write_report(a.out, a.stem, "How long two ranks take to meet, against the work between "
                 "meetings", intro, command, info, heads, table, {"rows": rows})
    plt = pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for m in METHODS:
            pts = sorted((x["gap_us"], x["median_us"]) for x in rows if x["method"] == m)
            ax.plot([max(g, 1.0) for g, _ in pts], [y for _, y in pts], "o-", label=m)
        ax.set_xscale("log")
        ax.set_xlabel("work between two meetings (us; 0 drawn at 1)")
        ax.set_ylabel("median time after the later arrival (us)")
        ax.set_title("Meeting latency of two ranks on one node")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(Path(a.out) / f"{a.stem}.png", dpi=110)


if __name__ == "__main__":
    main()
