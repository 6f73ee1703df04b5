"""Where a step's time goes on each rank, between its two meeting points with the other ranks.

Runs bench_scaling's weak-scaling gas (S1w: ``n_side``^3 spheres per rank, tiled once per rank
along x) and timestamps every call of the shadow refresh and of the end-of-step check, the two
places where a rank may wait for another. Prints, per rank, the mean / median / p10 / p90 in
microseconds of:

* joint pass: from the end of a check to the next refresh (the joint second + first half of two
  steps, and Python);
* forces: from the end of a refresh to the next check (the contact phase);
* refresh: the shadow refresh (local copies on one rank; pack, exchange and unpack on several,
  waiting for the neighbour included);
* check: the end-of-step check (its reduction waits for the slowest rank).

Compare one rank with two: the segments that grow are work running slower, the meeting points
that grow are waiting. The runs here turn speculation off (``sim.speculate = False``): with it,
on grids of a few blocks the check rides on the next refresh and a step has one meeting point.
Steps with a rebuild are not counted (they refresh nothing).

On several ranks a second table splits each meeting point (the ranks' n-th refresh, the n-th
check) into the wait for the last rank to arrive and what follows that arrival (the message's
latency, and for the refresh the unpacking and local copies after it), from ``perf_counter``
stamps that all ranks of one machine read from the same clock (``CLOCK_MONOTONIC``); across
nodes the split is meaningless. For the refresh on more than two ranks "the last rank" is the
last of all, not of the neighbours::

    NUMBA_CACHE_DIR=.numba_cache .venv/bin/python scripts/step_segments.py
    NUMBA_CACHE_DIR=.numba_cache .venv/bin/mpiexec -n 2 .venv/bin/python scripts/step_segments.py

Results of 2026-11-28 are in docs/benchmarks/scaling.md (update of 06:25-07:00 UTC).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

importlib.import_module("parsim")   # first: it sets MPICH's defaults before mpi4py loads
import bench_scaling  # noqa: E402

REFRESH, CHECK = 0, 1


def segments(events: np.ndarray) -> dict:
    """Durations in us of the four segments from (kind, start, end) rows in call order."""
    kind, t0, t1 = events[:, 0], events[:, 1], events[:, 2]
    a, b = slice(None, -1), slice(1, None)
    after_refresh = (kind[a] == REFRESH) & (kind[b] == CHECK)
    after_check = (kind[a] == CHECK) & (kind[b] == REFRESH)
    return {
        "joint pass": 1e6 * (t0[b] - t1[a])[after_check],
        "forces": 1e6 * (t0[b] - t1[a])[after_refresh],
        "refresh": 1e6 * (t1 - t0)[kind == REFRESH],
        "check": 1e6 * (t1 - t0)[kind == CHECK],
    }


def meetings(per_rank: list[np.ndarray]) -> dict:
    """For each meeting kind, (wait, after) in us per rank: ``wait`` from the rank's arrival to
    the last rank's arrival at the same (n-th) meeting, ``after`` from that arrival to the
    rank's exit. ``per_rank``: each rank's (kind, start, end) rows in call order."""
    out = {}
    for kind, name in ((REFRESH, "refresh"), (CHECK, "check")):
        rows = [e[e[:, 0] == kind] for e in per_rank]
        m = min(r.shape[0] for r in rows)
        if m == 0:
            continue
        last = np.max([r[:m, 1] for r in rows], axis=0)
        out[name] = [(1e6 * (last - r[:m, 1]), 1e6 * (r[:m, 2] - last)) for r in rows]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-side", type=int, default=20, help="spheres per rank: n_side^3")
    ap.add_argument("--warm", type=int, default=2000, help="untimed steps first")
    ap.add_argument("--steps", type=int, default=3000, help="timed steps")
    a = ap.parse_args()

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    p = comm.Get_size()
    case = {"scenario": "S1w", "n_side": a.n_side, "tiles": [p, 1, 1], "blocks": [p, 1, 1]}
    sim, n = bench_scaling.build(case, comm)
    # the two meeting points of a step: without speculation, which lets small grids carry the
    # check on the next refresh (one meeting, see parsim.Simulation._speculates)
    sim.speculate = False
    sim.run(a.warm)
    events = np.zeros((2 * a.steps + 16, 3))
    count = [0]

    def stamped(name, kind):
        inner = getattr(sim, name)

        def call(*args, **kwargs):
            t = time.perf_counter()
            out = inner(*args, **kwargs)
            i = count[0]
            if i < events.shape[0]:
                events[i] = (kind, t, time.perf_counter())
                count[0] = i + 1
            return out
        setattr(sim, name, call)

    stamped("_refresh_shadows", REFRESH)
    stamped("_check", CHECK)
    comm.Barrier()
    t0 = time.perf_counter()
    sim.run(a.steps)
    wall = time.perf_counter() - t0
    stamps = comm.gather(events[: count[0]], root=0)     # every rank's, for both tables
    if comm.Get_rank():
        return
    print(f"S1w, {n:,} spheres on {p} rank(s) ({a.n_side}^3 per rank), {a.steps} steps after "
          f"{a.warm}: {1e3 * wall / a.steps:.3f} ms/step")
    print(f"{'rank':>4}  {'segment':<11} {'steps':>6} {'mean':>7} {'median':>7} {'p10':>7} "
          f"{'p90':>7}  (us)")
    for r, seg in enumerate(segments(e) for e in stamps):
        for name, d in seg.items():
            if d.size == 0:
                print(f"{r:>4}  {name:<11} {0:>6}")
                continue
            print(f"{r:>4}  {name:<11} {d.size:>6} {d.mean():7.1f} {np.median(d):7.1f} "
                  f"{np.percentile(d, 10):7.1f} {np.percentile(d, 90):7.1f}")
    if p == 1:
        return
    print("meeting points: wait = until the last rank arrives, after = from then to the exit")
    print(f"{'rank':>4}  {'meeting':<8} {'wait mean':>9} {'median':>7} {'after mean':>10} "
          f"{'median':>7} {'p10':>7} {'p90':>7}  (us)")
    for name, per in meetings(stamps).items():
        for r, (wait, after) in enumerate(per):
            print(f"{r:>4}  {name:<8} {wait.mean():9.1f} {np.median(wait):7.1f} "
                  f"{after.mean():10.1f} {np.median(after):7.1f} {np.percentile(after, 10):7.1f} "
                  f"{np.percentile(after, 90):7.1f}")


if __name__ == "__main__":
    main()
