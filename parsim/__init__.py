"""parsim: an MPI-parallel, domain-decomposed rigid-body (granular DEM) simulator."""

__version__ = "0.1.0"
