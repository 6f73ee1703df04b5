"""parsim: an MPI-parallel, domain-decomposed rigid-body (granular DEM) simulator."""

__version__ = "0.1.0"


def _isolate_numba_cache() -> None:
    """Put compiled kernels under NUMBA_CACHE_DIR/parsim-<digest of parsim's sources>.

    numba checks only the source file of the cached function itself, not the kernels it inlines
    from other modules: after editing one of those, a stale kernel would be loaded (we saw
    segfaults). Keying the cache by a digest of all sources makes every edit a cold cache.
    """
    import hashlib
    import os
    from pathlib import Path

    import numba

    base = numba.config.CACHE_DIR
    if not base or os.path.basename(base).startswith("parsim-"):
        return
    h = hashlib.sha1()
    for path in sorted(Path(__file__).parent.rglob("*.py")):
        h.update(path.read_bytes())
    numba.config.CACHE_DIR = os.path.join(base, "parsim-" + h.hexdigest()[:12])


_isolate_numba_cache()

from . import numba_cache  # noqa: E402

numba_cache.install()   # processes sharing the kernel cache save and load it under a lock

from .simulation import OverlapWarning, Simulation, SimulationError  # noqa: E402

__all__ = ["OverlapWarning", "Simulation", "SimulationError", "__version__"]
