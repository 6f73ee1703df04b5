"""``parsim run CONFIG``: build the simulation from a TOML config, step it, write snapshots.

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


def _mpi_size() -> int:
    """Ranks of the job (1 without MPI). Reads the launcher's environment, so a serial run
    does not initialise MPI."""
    import os

    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
        if var in os.environ:
            return int(os.environ[var])
    return 1


def run_config(config: str, output: str | None = None, steps: int | None = None,
               stream=sys.stdout) -> int:
    if _mpi_size() > 1:
        print("parsim run: the engine runs on one rank so far (the domain decomposition is "
              "issue 4); launch with `mpiexec -n 1` or without mpiexec", file=sys.stderr)
        return 2
    try:
        cfg = load(config, steps)
    except ConfigError as e:
        print(f"parsim run: {e}", file=sys.stderr)
        return 2
    out = Path(output) if output else Path("output") / Path(config).stem
    sim = cfg.sim
    writer = SnapshotWriter(out, cfg.text, cfg.path, sim)
    print(f"parsim run {config}: {sim.n_bodies} bodies, {cfg.steps} steps of {sim.dt:g} s, "
          f"output {writer.path}", file=stream, flush=True)
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
                print(f"step {s:>9d}/{cfg.steps}  t = {sim.time:.5g} s  {rate:9.1f} steps/s  "
                      f"{sim.n_bodies} bodies  {sim.n_contacts} contacts  ETA {eta:7.1f} s",
                      file=stream, flush=True)
                last_t, last_step = now, s
    except SimulationError as e:
        writer.write(sim, status="failed")
        writer.close()
        print(f"parsim run: stopped: {e}\nthe state at the failure is in {writer.path} "
              f"(step {sim.step_count}, status 'failed')", file=sys.stderr)
        return 1
    writer.close()
    wall = time.perf_counter() - t0
    tm = sim.timers
    split = ", ".join(f"{k} {v:.2f} s" for k, v in tm.items())
    print(f"done: {cfg.steps} steps in {wall:.1f} s "
          f"({sim.n_bodies * cfg.steps / max(wall, 1e-9):.3g} particle-steps/s); {split}; "
          f"{sim.deleted} bodies deleted by outflow; snapshots in {writer.path}",
          file=stream, flush=True)
    return 0
