#!/bin/bash
# Run (or continue) a parsim config on a workstation with the venv's mpiexec:
#
#   NRANKS=2 bash jobs/workstation.sh configs/demo.toml [OUTDIR]
#
# Stop it with Ctrl-C or `kill -TERM <pid of a rank>`: the ranks write a checkpoint (on
# SIGINT, SIGTERM or SIGUSR1; a second Ctrl-C stops at once without one), and running this
# script again continues from it. CONFIG and OUTDIR are relative to the current directory
# (OUTDIR default: output/<config name> under the repository).
set -uo pipefail
config="${1:?usage: workstation.sh CONFIG [OUTDIR]}"
[[ "$config" == /* ]] || config="$PWD/$config"
[[ -z "${2:-}" || "$2" == /* ]] && dir="${2:-}" || dir="$PWD/$2"
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=jobs/lib.sh
source jobs/lib.sh
dir="${dir:-output/$(basename "$config" .toml)}"
if [[ -z "${PARSIM_LAUNCH:-}" && -x .venv/bin/mpiexec ]]; then
    PARSIM_LAUNCH=".venv/bin/mpiexec -n ${NRANKS:-2}"
fi
export PARSIM_LAUNCH NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}" OMP_NUM_THREADS=1
parsim_step "$config" "$dir"
status="$(parsim_status "$dir")"
echo "parsim: $dir: $status"
[[ "$status" == done || "$status" == interrupted ]]
