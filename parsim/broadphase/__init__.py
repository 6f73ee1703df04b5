"""Broad-phase collision detection: which AABBs overlap, which bodies a box, sphere or ray meets.

All structures share one interface (:class:`~parsim.broadphase.base.BroadPhase`), so the engine
and the benchmarks can swap them:

* :class:`HierarchicalHashGrid` -- the pe/waLBerla hierarchical hash grid (HHG), the default;
* :class:`LinkedCells`, :class:`Octree`, :class:`SweepAndPrune` -- the structures the seeds compare;
* :class:`BruteForce` -- all pairs, the reference every other one is tested against.
"""

from importlib import import_module

from .base import BroadPhase, BroadPhaseError

_LAZY = {
    "BruteForce": ".brute_force",
    "HierarchicalHashGrid": ".hashgrids",
    "LinkedCells": ".linked_cells",
    "Octree": ".octree",
    "SweepAndPrune": ".sweep_and_prune",
}

__all__ = ["BroadPhase", "BroadPhaseError", *_LAZY]


def __getattr__(name):
    # Lazy so that importing the package does not load (or compile) every structure's kernels.
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
