"""Fixtures shared by the whole suite. Nothing here runs at import: MPI is initialised only by
tests that ask for ``comm`` (the MPI-marked ones, run under ``mpiexec``; see docs/development.md)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

#: what the suite imports: parsim's dependencies and the ``test`` extra's (pyproject.toml)
NEEDED = ("numpy", "numba", "h5py", "mpi4py", "pytest_mpi", "hypothesis", "scipy", "matplotlib")


def pytest_configure(config):
    """Stop at once, with the fix, in an interpreter without parsim's dependencies (e.g. the
    system ``python3``), instead of one import traceback per test module."""
    missing = [m for m in NEEDED if importlib.util.find_spec(m) is None]
    if missing:
        pytest.exit(
            f"{sys.executable} cannot run parsim's tests: it lacks {', '.join(missing)}. "
            "Install parsim with its test extra and run the suite with that interpreter "
            "(README, Quick start): python3 -m venv .venv && .venv/bin/pip install -e "
            "\".[mpich,test]\" && PYTHON=.venv/bin/python bash scripts/run_tests.sh",
            returncode=4)


@pytest.fixture
def rng():
    """A fresh, seeded ``numpy.random.Generator``: the same numbers in every test, on every
    rank."""
    import numpy as np

    return np.random.default_rng(20240531)


@pytest.fixture
def comm():
    """``MPI.COMM_WORLD`` for tests marked ``@pytest.mark.mpi``."""
    from mpi4py import MPI

    return MPI.COMM_WORLD
