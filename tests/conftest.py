"""Fixtures shared by the whole suite. Nothing here runs at import: MPI is initialised only by
tests that ask for ``comm`` (the MPI-marked ones, run under ``mpiexec``; see docs/development.md)."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, seeded generator: the same numbers in every test, on every rank."""
    return np.random.default_rng(20240531)


@pytest.fixture
def comm():
    """``MPI.COMM_WORLD`` for tests marked ``@pytest.mark.mpi``."""
    from mpi4py import MPI

    return MPI.COMM_WORLD
