"""The structures under test, how to build them, and shared test settings.

Every structure-generic test is parametrised over :data:`CONFIGS`. A configuration names the
class (resolved with ``getattr(parsim.broadphase, name)`` when the test runs, so a class that is
missing makes its tests fail rather than vanish) and its constructor arguments. The test ids
start with the class name, so ``-k BruteForce`` or ``-k HierarchicalHashGrid`` select one
structure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

STRUCTURES = ("BruteForce", "HierarchicalHashGrid", "LinkedCells", "Octree", "SweepAndPrune")


@dataclass(frozen=True)
class Config:
    name: str
    cls: str
    kwargs: dict = field(default_factory=dict)

    @property
    def is_hhg(self) -> bool:
        return self.cls == "HierarchicalHashGrid"

    def hhg_param(self, key: str):
        return {**HHG_DEFAULTS, **self.kwargs}[key]


# The thesis / waLBerla constants; every HHG config passes all of them explicitly.
HHG_DEFAULTS = dict(hierarchy_factor=2.0, initial_cells=16, min_grid_density=8,
                    activation_threshold=32, update_strategy="incremental")


def hhg(name: str, **kw) -> Config:
    return Config(f"HierarchicalHashGrid-{name}", "HierarchicalHashGrid", {**HHG_DEFAULTS, **kw})


CONFIGS = [
    Config("BruteForce", "BruteForce"),
    Config("LinkedCells", "LinkedCells"),
    Config("Octree", "Octree"),
    Config("SweepAndPrune", "SweepAndPrune"),
    # the thesis defaults: inactive (all-pairs) up to 32 bodies
    hhg("default"),
    # grids from the first body on
    hhg("eager", activation_threshold=0),
    hhg("eager-f3", activation_threshold=0, hierarchy_factor=3.0),
    hhg("eager-f1.5", activation_threshold=0, hierarchy_factor=1.5),
    hhg("eager-reinsert", activation_threshold=0, update_strategy="reinsert"),
    # tiny grids: activation after 8 bodies, 4^3 cells growing past 16 bodies per grid, so hash
    # wrap-around (far cells sharing a bucket) and grid growth happen all the time
    hhg("tiny", activation_threshold=8, initial_cells=4, min_grid_density=4),
]

CONFIG_PARAMS = [pytest.param(c, id=c.name) for c in CONFIGS]


def make(cfg: Config):
    import parsim.broadphase as pb

    cls = getattr(pb, cfg.cls)
    return cls(**cfg.kwargs)


def hyp_settings(max_examples: int, **kw) -> settings:
    """Reproducible hypothesis settings: derandomised, no example database, no deadline."""
    return settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        report_multiple_bugs=False,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                               HealthCheck.filter_too_much, HealthCheck.large_base_example],
        **kw,
    )


# --------------------------------------------------------------------------------------------
# HHG invariants (thesis sections 3.3-3.7)
# --------------------------------------------------------------------------------------------

def body_sizes(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Size of a body = length of the longest edge of its AABB (thesis 3.8)."""
    if lo.shape[0] == 0:
        return np.empty(0)
    return np.max(hi - lo, axis=1)


def grid_info(bp) -> dict:
    info = bp.grid_info()
    cs = np.asarray(info["cell_size"])
    dims = np.asarray(info["dims"])
    nb = np.asarray(info["n_bodies"])
    g = cs.shape[0]
    assert cs.dtype == np.float64 and cs.shape == (g,), f"cell_size {cs.dtype} {cs.shape}"
    assert dims.dtype == np.int64 and dims.shape == (g, 3), f"dims {dims.dtype} {dims.shape}"
    assert nb.dtype == np.int64 and nb.shape == (g,), f"n_bodies {nb.dtype} {nb.shape}"
    return {"cell_size": cs, "dims": dims, "n_bodies": nb}


def suitable_grid(cell_sizes: np.ndarray, f: float, size: float, tol: float = 1e-12) -> list[int]:
    """Indices of grids suitable for a body of this size (cell/f <= size < cell).

    Normally one or none; two only if the size is within ``tol`` (relative) of a boundary,
    where float rounding of the cell sizes may legitimately decide either way.
    """
    out = []
    for g, c in enumerate(cell_sizes.tolist()):
        lo_b, hi_b = c / f, c
        if lo_b * (1 - tol) <= size < hi_b * (1 + tol):
            out.append(g)
    return out


def check_hhg_invariants(bp, cfg: Config, lo: np.ndarray, hi: np.ndarray,
                         max_finite_ever: int, max_total_ever: int) -> None:
    """Activation state and the grid hierarchy's shape against the thesis rules.

    ``lo``/``hi`` are the finite bodies held now; ``max_*_ever`` the largest finite / total
    (finite + infinite) body counts seen after any call so far.
    """
    thr = cfg.hhg_param("activation_threshold")
    f = cfg.hhg_param("hierarchy_factor")
    c_init = cfg.hhg_param("initial_cells")
    dens = cfg.hhg_param("min_grid_density")
    active = bp.active
    assert isinstance(active, (bool, np.bool_)), f"active is {type(active)}"
    if max_finite_ever > thr:
        assert active, (f"{max_finite_ever} finite bodies were held (> activation_threshold={thr}) "
                        "but the grids are not active")
    if max_total_ever <= thr:
        assert not active, (f"at most {max_total_ever} bodies were ever held "
                            f"(<= activation_threshold={thr}) but the grids are active")
    info = grid_info(bp)
    cs, dims, nb = info["cell_size"], info["dims"], info["n_bodies"]
    if not active:
        assert cs.size == 0, f"inactive HHG reports grids: {cs.tolist()}"
        return
    n = lo.shape[0]
    assert int(nb.sum()) == n, f"grids hold {int(nb.sum())} bodies ({nb.tolist()}), {n} finite bodies present"
    if cs.size == 0:
        return
    assert np.all(cs > 0) and np.all(np.isfinite(cs)), f"cell sizes {cs.tolist()}"
    assert np.all(np.diff(cs) > 0), f"cell sizes not strictly ascending: {cs.tolist()}"
    # c_k = c_0 * f^k: successive ratios are integer powers of f
    k = np.log(cs / cs[0]) / math.log(f)
    assert np.allclose(k, np.round(k), rtol=0, atol=1e-6), (
        f"cell sizes {cs.tolist()} are not c0 * {f}^k (log_f ratios {k.tolist()})")
    # dims: powers of two, initial_cells doubled some number of times, same on every axis
    assert np.all(dims >= c_init), f"dims {dims.tolist()} below initial_cells={c_init}"
    assert np.all((dims & (dims - 1)) == 0), f"dims {dims.tolist()} not powers of two"
    assert np.all(dims == dims[:, :1]), f"dims {dims.tolist()} differ between axes"
    # grid density: a grid grows (doubling every axis) once bodies > cells / min_grid_density
    cells = np.prod(dims, axis=1)
    assert np.all(nb * dens <= cells), (
        f"grid holds more than cells/min_grid_density bodies: n_bodies {nb.tolist()}, dims {dims.tolist()}")
    # every body of positive size sits in its suitable grid: count per size class
    sizes = body_sizes(lo, hi)
    n_zero = int(np.sum(sizes == 0))
    lower = np.zeros(cs.size, dtype=np.int64)
    upper = np.zeros(cs.size, dtype=np.int64)
    for s in sizes[sizes > 0].tolist():
        gs = suitable_grid(cs, f, s)
        assert gs, f"no grid is suitable for a body of size {s!r}: cell sizes {cs.tolist()} (f={f})"
        if len(gs) == 1:
            lower[gs[0]] += 1
        upper[gs] += 1
    upper += n_zero  # points: where they go is the implementation's choice
    assert np.all(lower <= nb) and np.all(nb <= upper), (
        f"bodies per grid {nb.tolist()} do not match the size classes cell/f <= size < cell "
        f"(expected between {lower.tolist()} and {upper.tolist()}; cell sizes {cs.tolist()}, f={f})")
