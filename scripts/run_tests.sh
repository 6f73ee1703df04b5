#!/usr/bin/env bash
# Run parsim's whole test suite: one serial pytest session, then the MPI-marked tests under
# `mpiexec -n 2`, `-n 4` and `-n 8` (oversubscribed on small machines). Exits non-zero if any session fails, hangs, or runs no test.
#
#   PYTHON=.venv/bin/python bash scripts/run_tests.sh     # what README's quick start and .ci/run do
#
# Environment:
#   PYTHON          interpreter with parsim and the `test` extra installed (default: python3)
#   MPIEXEC         MPI launcher (default: the mpiexec next to $PYTHON, else the one on PATH)
#   NUMBA_CACHE_DIR compiled-kernel cache (default: <repo>/.numba_cache)
#   MPI_TIMEOUT     seconds before an MPI session counts as hung and is killed (default: 600)
#   SERIAL_WORKERS  processes of the serial session (pytest-xdist; a number or auto; default: 2)
# Extra arguments are passed to every pytest session (e.g. `-k query`).
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo" || exit 1
PYTHON="${PYTHON:-python3}"
if ! command -v "$PYTHON" >/dev/null; then
    echo "run_tests.sh: no interpreter '$PYTHON' (set PYTHON)" >&2
    exit 1
fi
bindir="$("$PYTHON" -c 'import os, sys; print(os.path.dirname(sys.executable))')"
if [[ -z "${MPIEXEC:-}" ]]; then
    if [[ -x "$bindir/mpiexec" ]]; then MPIEXEC="$bindir/mpiexec"; else MPIEXEC="mpiexec"; fi
fi
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$repo/.numba_cache}"
export PYTHONUNBUFFERED=1            # rank logs survive an MPI_Abort
mpi_timeout="${MPI_TIMEOUT:-600}"
work="$(mktemp -d "${TMPDIR:-/tmp}/parsim-tests.XXXXXX")"
trap 'rm -rf "$work"' EXIT

declare -a names results times
total_passed=0
total_failed=0

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
script_start="$(now)"

record() {  # record NAME RESULT START
    names+=("$1"); results+=("$2"); times+=("$(elapsed "$3")")
}

# junit_counts FILE -> "tests failures errors skipped" (or nothing if the file is missing/bad)
junit_counts() {
    "$PYTHON" - "$1" <<'EOF' 2>/dev/null
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
print(*(sum(int(s.get(k, 0)) for s in suites) for k in ("tests", "failures", "errors", "skipped")))
EOF
}

# check_counts LABEL XML -> 0 if at least one test ran and none failed; adds to the totals
check_counts() {
    local counts tests failures errors skipped ran
    counts="$(junit_counts "$2")"
    if [[ -z "$counts" ]]; then
        echo "!! $1: no test report (aborted by another rank's failure, or crashed)"
        total_failed=$((total_failed + 1))
        return 1
    fi
    read -r tests failures errors skipped <<<"$counts"
    ran=$((tests - skipped))
    total_passed=$((total_passed + ran - failures - errors))
    total_failed=$((total_failed + failures + errors))
    if ((ran == 0)); then
        echo "!! $1: ran no test ($tests collected, $skipped skipped)"
        return 1
    fi
    ((failures + errors == 0))
}

banner() { printf '\n==== %s ====\n' "$*"; }

banner "environment"
"$PYTHON" - <<'EOF' || exit 1
import sys
import mpi4py, numba, numpy
print(f"python {sys.version.split()[0]} ({sys.executable}); numpy {numpy.__version__}, "
      f"numba {numba.__version__}, mpi4py {mpi4py.__version__}")
EOF
echo "mpiexec: $(command -v "$MPIEXEC" || echo "$MPIEXEC (not found)")"
echo "MPI library: $("$PYTHON" -m mpi4py --mpi-lib-version 2>&1 | head -n 1)"
echo "NUMBA_CACHE_DIR=$NUMBA_CACHE_DIR"

# ---- 1. serial session (also compiles and caches the kernels the serial tests use) ------------
# On SERIAL_WORKERS processes (pytest-xdist; default 2, the cores of the CI machine; 1: one
# process), whole test files to a worker (--dist loadfile: a file's module fixtures, such as the
# real SLURM's daemons, start once). The workers share the numba cache: parsim.numba_cache locks
# its index and data files, so two workers saving one kernel cannot corrupt it.
workers="${SERIAL_WORKERS:-2}"
if ! [[ "$workers" =~ ^[0-9]+$ || "$workers" == auto ]]; then
    echo "run_tests.sh: SERIAL_WORKERS must be a number of processes or 'auto', got '$workers'" >&2
    exit 1
fi
xdist=()
if [[ "$workers" == auto ]] || ((workers > 1)); then
    if "$PYTHON" -c "import xdist" 2>/dev/null; then
        xdist=(-n "$workers" --dist loadfile)
    else
        echo "(pytest-xdist is not installed: the serial session runs in one process)"
    fi
fi
banner "serial: pytest ${xdist[*]+${xdist[*]} }tests"
start="$(now)"
"$PYTHON" -m pytest ${xdist[@]+"${xdist[@]}"} tests --junitxml="$work/serial.xml" "$@"
rc=$?
if ((rc == 5)); then
    echo "!! serial: pytest collected no tests (exit 5)"
    total_failed=$((total_failed + 1))
    record "serial" "FAILED (no tests collected)" "$start"
elif check_counts "serial" "$work/serial.xml" && ((rc == 0)); then
    record "serial" "passed" "$start"
else
    record "serial" "FAILED (exit $rc)" "$start"
fi

# ---- 2. warm-up: compile the kernels the MPI tests use, on one process ------------------------
# One compile instead of one per rank (the cache itself is safe to share: parsim/numba_cache.py);
# after this, every rank only loads from the cache.
banner "warm-up: compile kernels on one process"
start="$(now)"
if "$PYTHON" - <<'EOF'
import numpy as np
import parsim.broadphase as broadphase
from parsim import demo, halo

halo.warm_up()
from parsim.warmup import compile_kernels   # the engine kernels the MPI tests use

compile_kernels()

rng = np.random.default_rng(0)
for name in ("HierarchicalHashGrid", "BruteForce"):
    bp = getattr(broadphase, name)()
    lo = rng.uniform(0.0, 10.0, size=(200, 3))
    hi = lo + rng.uniform(0.1, 2.0, size=(200, 3))
    ids = np.arange(200, dtype=np.int64)
    bp.add(ids, lo, hi)
    bp.update(ids, lo + 0.1, hi + 0.1)
    bp.pairs()
    bp.query_box(lo[0], hi[0])
    bp.remove(ids[::3])
    bp.pairs()
    demo.run_demo(None, 1000, 2, name, 0)
print("kernels compiled")
EOF
then
    record "warm-up" "passed" "$start"
    warm=1
else
    total_failed=$((total_failed + 1))
    record "warm-up" "FAILED" "$start"
    warm=0
fi

# ---- 3. MPI sessions ---------------------------------------------------------------------------
# Each rank runs `python -m mpi4py -m pytest --only-mpi -x`: an exception that escapes on one rank
# aborts the job, and -x makes a rank whose test failed exit at once, which (under -m mpi4py)
# calls MPI_Abort, so ranks waiting for it in a collective do not hang. Each rank has its own
# --basetemp, report and log; no cache provider. (pytest-mpi 0.6: `--with-mpi --only-mpi`
# together would run the serial tests too; `--only-mpi` alone runs the MPI tests only.)
# <files>: the test files that hold MPI-marked tests. Collecting the whole suite cost every rank
# ~10 s of the 8-rank session on 2 cores (2026-11-28), for ~1,470 tests it then skips.
mapfile -t mpi_files < <(grep -rl --include='test_*.py' -e '@pytest.mark.mpi' tests | sort)
# shellcheck disable=SC2016  # $vars in the rank command expand in each rank's shell
rank_cmd='r="${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-}}}"
if [[ -z "$r" ]]; then echo "cannot tell this process'"'"'s MPI rank" >&2; exit 3; fi
exec "$0" -m mpi4py -m pytest --only-mpi -x -p no:cacheprovider \
    --basetemp="$1/tmp-rank$r" --junitxml="$1/rank$r.xml" "${@:2}" >"$1/rank$r.log" 2>&1'

for n in 2 4 8; do
    name="mpi -n $n"
    banner "$name: $MPIEXEC -n $n python -m mpi4py -m pytest --only-mpi -x (${#mpi_files[@]} files)"
    start="$(now)"
    if ((warm == 0)); then
        echo "!! not run: the warm-up failed"
        total_failed=$((total_failed + 1))
        record "$name" "NOT RUN" "$start"
        continue
    fi
    dir="$work/mpi$n"
    mkdir -p "$dir"
    OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" \
    OMPI_MCA_rmaps_base_oversubscribe=1 \
        timeout -k 30 "$mpi_timeout" "$MPIEXEC" -n "$n" \
        bash -c "$rank_cmd" "$PYTHON" "$dir" "$@" "${mpi_files[@]}" </dev/null
    rc=$?
    ok=1
    ((rc == 0)) || ok=0
    for ((r = 0; r < n; r++)); do
        xml="$dir/rank$r.xml"
        if ((r == 0)); then
            echo "---- rank 0 ----"
            cat "$dir/rank0.log" 2>/dev/null; echo
            check_counts "$name rank 0" "$xml" || ok=0
            continue
        fi
        counts="$(junit_counts "$xml")"
        read -r tests failures errors skipped <<<"${counts:-0 0 0 0}"
        if [[ -n "$counts" ]] && ((failures + errors == 0 && tests > skipped)); then
            echo "---- rank $r: $(tail -n 1 "$dir/rank$r.log" 2>/dev/null)"
        else
            echo "---- rank $r (failed, aborted or ran no test): full log ----"
            cat "$dir/rank$r.log" 2>/dev/null; echo
            total_failed=$((total_failed + ${failures:-0} + ${errors:-0}))
            ok=0
        fi
    done
    if ((rc == 124 || rc == 137)); then
        echo "!! $name: timed out after ${mpi_timeout}s (a rank hung?) and was killed"
        total_failed=$((total_failed + 1))
        record "$name" "FAILED (timeout)" "$start"
    elif ((rc == 5)); then
        echo "!! $name: pytest collected no tests (exit 5)"
        total_failed=$((total_failed + 1))
        record "$name" "FAILED (no tests collected)" "$start"
    elif ((ok)); then
        record "$name" "passed" "$start"
    else
        record "$name" "FAILED (exit $rc)" "$start"
    fi
done

# ---- summary -----------------------------------------------------------------------------------
banner "summary"
echo "  (total $(elapsed "$script_start")s)"
status=0
for i in "${!names[@]}"; do
    printf '  %-10s %-28s %7ss\n' "${names[$i]}" "${results[$i]}" "${times[$i]}"
    [[ "${results[$i]}" == passed ]] || status=1
done
if ((status == 0 && total_failed > 0)); then status=1; fi
echo "(MPI sessions count rank 0's tests; every rank ran them)"
echo "tests: $total_passed passed, $total_failed failed"
exit "$status"
