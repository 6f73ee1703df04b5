#!/bin/bash
# Run (or continue) a parsim config on a workstation with the venv's mpiexec:
#
#   NRANKS=2 bash jobs/workstation.sh configs/demo.toml [OUTDIR]
#
# Stop it with `kill -TERM <pid of a rank>` or Ctrl-C (SIGINT ends it without a checkpoint):
# the ranks write a checkpoint on SIGTERM/SIGUSR1, and running this script again continues from it.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
# shellcheck source=jobs/lib.sh
source jobs/lib.sh
config="${1:?usage: workstation.sh CONFIG [OUTDIR]}"
dir="${2:-output/$(basename "$config" .toml)}"
if [[ -z "${PARSIM_LAUNCH:-}" && -x .venv/bin/mpiexec ]]; then
    PARSIM_LAUNCH=".venv/bin/mpiexec -n ${NRANKS:-2}"
fi
export PARSIM_LAUNCH NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}" OMP_NUM_THREADS=1
parsim_step "$config" "$dir"
status="$(parsim_status "$dir")"
echo "parsim: $dir: $status"
[[ "$status" == done || "$status" == interrupted ]]
