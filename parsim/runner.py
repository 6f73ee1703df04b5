"""``parsim run CONFIG``: build the simulation from a TOML config, step it, write snapshots.

Runs on any number of ranks (``mpiexec -n N python -m mpi4py -m parsim run CONFIG``); every rank
reads the config and makes the same calls, and the results do not depend on N.

Progress lines (rank 0) every ``[output] progress_every`` steps: step, simulated time, steps/s,
bodies, contacts, ETA. On a :class:`parsim.SimulationError` (non-finite state, outflow) the
current state is written as a snapshot with status "failed" before the error is reported.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .config import ConfigError, load, pour
from .output import SnapshotWriter
from .simulation import SimulationError


def _say(sim, text: str, stream) -> None:
    if sim is None or sim.net.rank == 0:
        print(text, file=stream, flush=True)


def timing_table(sim) -> str:
    """Per-phase seconds over the ranks (min / mean / max; collective)."""
    phases = dict(sim.timers)
    for k, v in sim.halo.timers.items():
        phases[f"  refresh {k}"] = v
    rows = sim.net.allgather(phases)
    lines = [f"{'phase':<22s} {'min [s]':>9s} {'mean [s]':>9s} {'max [s]':>9s}"]
    for k in phases:
        v = [r[k] for r in rows]
        lines.append(f"{k:<22s} {min(v):9.2f} {sum(v) / len(v):9.2f} {max(v):9.2f}")
    return "\n".join(lines)


def _prepare_ranks(net) -> None:
    """One numba thread per rank (unless NUMBA_NUM_THREADS says otherwise), and kernels compiled
    by rank 0 alone before the others load them (concurrent cold-cache compiles crash numba)."""
    import os

    import numba

    if "NUMBA_NUM_THREADS" not in os.environ:
        numba.set_num_threads(1)
    if net.rank == 0:
        from .warmup import compile_kernels

        compile_kernels()
    net.barrier()


def run_config(config: str, output: str | None = None, steps: int | None = None,
               stream=sys.stdout) -> int:
    from .comm import Net, auto_comm

    net = Net(auto_comm())
    if net.size > 1:
        _prepare_ranks(net)
    cfg, err = None, None
    try:
        cfg = load(config, steps)
    except ConfigError as e:
        err = f"parsim run: {e}"
    err = net.first_error(err)
    if err is not None:
        if net.rank == 0:
            print(err, file=sys.stderr, flush=True)
        return 2
    out = Path(output) if output else Path("output") / Path(config).stem
    sim = cfg.sim
    writer = SnapshotWriter(out, cfg.text, cfg.path, sim)
    n_total = sim.count_bodies()
    _say(sim, f"parsim run {config}: {n_total} bodies, {cfg.steps} steps of {sim.dt:g} s, "
         f"{net.size} rank(s) as blocks {list(sim.dec.dims)}, output {writer.path}", stream)
    t0 = time.perf_counter()
    last_t, last_step = t0, 0
    try:
        writer.write(sim)
        for k in range(cfg.steps):
            for rain in cfg.rains:
                if rain.remaining and sim.step_count % rain.every == 0 and sim.step_count:
                    pour(sim, rain)
            sim.step()
            s = sim.step_count
            if s % cfg.output_every == 0 or k == cfg.steps - 1:
                writer.write(sim)
            if s % cfg.progress_every == 0 or k == cfg.steps - 1:
                now = time.perf_counter()
                rate = (s - last_step) / max(now - last_t, 1e-9)
                eta = (cfg.steps - k - 1) / rate if rate > 0 else float("inf")
                n_total = sim.count_bodies()
                contacts = net.isum(sim.n_contacts)
                _say(sim, f"step {s:>9d}/{cfg.steps}  t = {sim.time:.5g} s  {rate:9.1f} steps/s  "
                     f"{n_total} bodies  {contacts} contacts  ETA {eta:7.1f} s", stream)
                last_t, last_step = now, s
    except SimulationError as e:      # raised alike on every rank (the checks are collective)
        writer.write(sim, status="failed")
        writer.close()
        if net.rank == 0:
            print(f"parsim run: stopped: {e}\nthe state at the failure is in {writer.path} "
                  f"(step {sim.step_count}, status 'failed')", file=sys.stderr, flush=True)
        return 1
    writer.close()
    wall = net.max(time.perf_counter() - t0)
    deleted = net.isum(sim.deleted)
    table = timing_table(sim)
    _say(sim, f"done: {cfg.steps} steps in {wall:.1f} s "
         f"({n_total * cfg.steps / max(wall, 1e-9):.3g} particle-steps/s on {net.size} rank(s)); "
         f"{deleted} bodies deleted by outflow; snapshots in {writer.path}\n{table}", stream)
    return 0
