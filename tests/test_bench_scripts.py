"""The parts of the benchmark scripts that reach into parsim's internals still fit them.

The benchmarks themselves take minutes and are not run here (their numbers live in
docs/benchmarks); what is run is the smallest case of code that would otherwise only break when
someone measures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"


@pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpiexec next to the interpreter")
def test_contention_lockstep_worker_runs_on_two_ranks():
    """`bench_contention.py --lockstep` joins two serial simulations by wrapping
    `Net.first_error_and_max` with one Allreduce per step. When that method gained an argument
    (2026-11-25, the key that picks the lowest uid's error) the wrapper kept the old signature
    and every lockstep run died with a TypeError at its first step. A tiny run of the worker on
    2 ranks must finish and print its result line."""
    from parsim import halo

    halo.warm_up()           # the ranks below then only load kernels from the cache
    cache = os.path.abspath(os.environ.get("NUMBA_CACHE_DIR", REPO / ".numba_cache"))
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1", NUMBA_CACHE_DIR=cache,
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = REPO / "scripts" / "bench_contention.py"
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "mpi4py", str(script),
                        "--lockstep-worker", "S1w", "4", "20", "5"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    assert result["n"] == 4 ** 3 and result["steps"] == 20 and result["wall"] > 0.0
