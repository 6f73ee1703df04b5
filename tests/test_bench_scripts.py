"""The benchmark scripts still run against the current parsim.

The benchmarks take minutes and their numbers live in docs/benchmarks; what runs here is the
smallest form of each script (seconds), so that code that reaches into parsim's internals
breaks in the suite, not when someone next measures (bench_contention's lockstep wrapper did,
2026-11-25). Nothing here looks at a timing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"


# The smallest run of each benchmark script: it must finish and write its report (the tables,
# the JSON numbers and the plot). The numbers are not looked at: timings belong to the
# benchmarks, and several scripts check their own results (bench_broadphase compares every
# structure's pairs, bench_dem the runs on 1 and 2 threads).
SMALLEST = {
    "bench_broadphase": (["--quick", "--only", "scenarios", "--quick-scale", "0.01", "--reps",
                          "1"], "broadphase"),
    # --lockstep: two serial simulations joined through a wrapper of Net.first_error_and_max
    "bench_contention": (["--cases", "S1w:4", "--repeats", "1", "--steps", "20", "--warm", "5",
                          "--lockstep"], "contention"),
    "bench_dem": (["--quick", "--peers"], "dem"),
    "bench_first_touch": (["--sizes", "1000", "--idle", "0", "0.1", "--repeats", "1",
                           "--touch-mib", "8"], "first_touch"),
    "bench_halo_exchange": (["--repeats", "1"], "halo_exchange"),
    "bench_hhg_neighbours": (["--sizes", "1000"], "hhg_neighbours"),
    "bench_latency": (["--gaps", "0", "30", "--iters", "50", "--repeats", "1"], "latency"),
    "bench_io": (["--quick", "--steps", "2", "--repeats", "1"], "io"),
    "bench_placement": (["--quick"], "placement"),
    "bench_rain": (["--steps", "401", "--repeats", "1"], "rain"),      # two pours
    "bench_scaling": (["--quick", "--no-peers", "--no-wait", "--no-snapshot"], "scaling"),
    "bench_setup": (["--sizes", "1e5", "--repeats", "1"], "setup"),    # 1 and 2 ranks
}


@pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpiexec next to the interpreter")
@pytest.mark.parametrize("script", sorted(SMALLEST))
def test_benchmark_script_runs_and_writes_its_report(script, tmp_path):
    args, report = SMALLEST[script]
    cache = os.path.abspath(os.environ.get("NUMBA_CACHE_DIR", REPO / ".numba_cache"))
    env = dict(os.environ, NUMBA_CACHE_DIR=cache,
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(REPO / "scripts" / f"{script}.py"), *args,
                        "--out", str(tmp_path)],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    text = (tmp_path / f"{report}.md").read_text()
    assert "| --- |" in text or "|---|" in text, f"{report}.md has no table"
    assert list(tmp_path.glob("*.png")), "no plot written"


def test_every_benchmark_script_is_listed():
    scripts = {p.stem for p in (REPO / "scripts").glob("bench_*.py")} - {"bench_common"}
    assert scripts == set(SMALLEST)


def test_peer_weak_variables_are_read_by_the_peer_scripts():
    """bench_scaling tiles the peers' S1w input with ``-var nx ... -var px ...``; LAMMPS and
    LIGGGHTS silently ignore a ``-var`` their script never reads (a 2-rank run would then time
    the untiled cube), so every variable passed must be an ``index`` variable the script uses."""
    import re

    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import bench_scaling
    finally:
        sys.path.remove(str(REPO / "scripts"))
    assert bench_scaling.peer_weak_args(12, [1, 1, 1]) == []     # one rank: the plain input
    args = bench_scaling.peer_weak_args(12, [2, 1, 1])
    names = dict(zip(args[1::3], args[2::3]))
    assert args[::3] == ["-var"] * len(names)
    assert names == {"nx": "24", "ny": "12", "nz": "12", "px": "2", "py": "1", "pz": "1"}
    for ext in ("lammps", "liggghts"):
        text = (REPO / "scripts" / "peers" / f"s1_gas.{ext}").read_text()
        for name in names:
            assert re.search(rf"^variable\s+{name}\s+index\s", text, re.M), (ext, name)
            assert "${" + name + "}" in text, (ext, name)
