"""parsim: an MPI-parallel, domain-decomposed rigid-body (granular DEM) simulator."""

__version__ = "0.1.0"

from .simulation import Simulation, SimulationError  # noqa: E402

__all__ = ["Simulation", "SimulationError", "__version__"]
