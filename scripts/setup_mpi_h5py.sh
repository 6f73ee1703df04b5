#!/usr/bin/env bash
# A second environment with h5py built for MPI, so that the shared-file snapshot writer
# (parsim/output_shared.py: one HDF5 file, collective writes) is tested next to the per-rank one.
#
#   bash scripts/setup_mpi_h5py.sh          # as root on Debian/Ubuntu; .ci/run calls it
#
# PyPI's h5py is serial, so this uses Debian's python3-h5py-mpi (HDF5 and mpi4py built for
# Open MPI) with Debian's Python, in `.venv-mpih5` (system site packages visible), plus numba
# from PyPI (pinned to a version that works with Debian 12's numpy 1.24) and parsim itself.
# tests/test_shared_output.py uses it when present and says how to get it when not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    echo "setup_mpi_h5py.sh: needs root and apt-get (Debian's python3-h5py-mpi)" >&2
    exit 1
fi
pkgs=(python3-h5py-mpi python3-mpi4py python3-venv openmpi-bin)
if ! dpkg -s "${pkgs[@]}" >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1 ||
        { apt-get update -qq >/dev/null && apt-get install -y --no-install-recommends "${pkgs[@]}" >/dev/null; }
fi
/usr/bin/python3 -m venv --system-site-packages .venv-mpih5
.venv-mpih5/bin/pip install -q "numba==0.60.*" "numpy<2"
.venv-mpih5/bin/pip install -q --no-deps -e .
H5PY_ALWAYS_USE_MPI=1 .venv-mpih5/bin/python -c \
    "import h5py; assert h5py.get_config().mpi, 'h5py is not built for MPI'; print('h5py', h5py.__version__, 'with MPI')"
