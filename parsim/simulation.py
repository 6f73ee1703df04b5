"""``parsim.Simulation``: the scripting API and the time step of the DEM engine on one rank.

The step (velocity Verlet):

1. half kick, drift and rotate every owned body (:mod:`parsim.integrator`);
2. refresh the shadow copies from their owners; rebuild the neighbour list if a body moved more
   than half the skin (:mod:`parsim.neighbours`); at a rebuild, bodies that left this rank's
   block migrate to their new owners and the shadow copies are made anew (:mod:`parsim.halo`);
3. contact forces per pair in the pair's canonical frame, then per body in partner-key order
   (:mod:`parsim.contacts`), plus gravity;
4. second half kick; check for non-finite state and outflow.

Owned bodies occupy storage slots ``0..n_owned-1``, shadow copies follow
(:mod:`parsim.bodies`); on one rank the shadows are the periodic images.

On several MPI ranks the API is collective: every rank makes the same calls, each body is kept by
the rank whose block holds its centre, infinite planes by every rank. Forces are summed per body
in partner-key order from exact copies, so the state does not depend on the number of ranks.
"""

from __future__ import annotations

import math
import os
import time
import warnings

import numba
import numpy as np

from . import contacts, global_bodies
from . import integrator as I
from .bodies import FIXED, GLOBAL, INFINITE, MAX_UID, REPLICATED, BodyStorage
from .comm import Net, auto_comm
from .decomposition import Decomposition, default_blocks
from .halo import Halo
from .contacts import accumulate, finish_sums, sphere_pair_forces
from .contacts_general import deepest_overlaps, general_pair_forces, scratch
from .parallel import pick, threaded
from .materials import (Material, collision_time, make_material, override_row, pair_table,
                        unknown_parameters)
from .neighbours import NeighbourList
from .shapes import BOX, CAPSULE, PLANE, SHAPE_NAMES, SPHERE, bounding_radius

#: largest allowed time step as a fraction of the smallest collision time
DT_FRACTION = 0.1
PHASES = ("neighbours", "contacts", "integration", "communication", "checks")


class OverlapWarning(UserWarning):
    """Bodies overlap deeply at the start of a simulation (usually an input mistake)."""


class SimulationError(RuntimeError):
    """The run cannot go on (non-finite state, a body left the domain, bad setup)."""


class BlocksTooNarrow(ValueError):
    """A body added with a uid (by one rank alone) is larger than the blocks allow; ``what``
    names it and the limit, the message adds the API's ways out (callers with other ways out,
    such as configs, use ``what``)."""

    def __init__(self, what: str):
        self.what = what
        super().__init__(f"{what}; use fewer blocks along the cut axes (or fewer ranks), or add "
                         "such big bodies by a collective call without uids, which makes them "
                         "global bodies")


def _fmt(v) -> str:
    return "(" + ", ".join(f"{float(x):.6g}" for x in v) + ")"


def _flag(value, name: str) -> bool:
    """``value`` as a bool; only True/False (numpy's too) are: "false" would be True."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _count(value, name: str, low: int) -> int:
    """``value`` as an int >= ``low``; a bool, a fraction or a non-number is refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        if not (isinstance(value, (float, np.floating)) and float(value).is_integer()):
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    if int(value) < low:
        raise ValueError(f"{name} must be >= {low}, got {value!r}")
    return int(value)


def _vec3(value, name: str) -> np.ndarray:
    a = np.asarray(value, dtype=np.float64)
    if a.shape != (3,) or not np.isfinite(a).all():
        raise ValueError(f"{name} must be 3 finite numbers, got {value!r}")
    return a


def _array(value, name: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be numbers (a number, a row or an array), got "
                         f"{value!r}") from None


def _rows(value, n: int, name: str, default=None, width: int = 3) -> np.ndarray:
    """``value`` as float64[n, width] (one row broadcast to all bodies, or n rows)."""
    if value is None:
        value = default
    a = _array(value, name)
    if a.ndim == 1 and a.shape[0] == width:
        a = np.broadcast_to(a, (n, width))
    if a.shape != (n, width):
        raise ValueError(f"{name} must be {width} numbers per body: one row for all or one row "
                         f"per body (shape ({n}, {width})), got shape {a.shape}")
    if not np.isfinite(a).all():
        bad = int(np.flatnonzero(~np.isfinite(a).all(axis=1))[0])
        raise ValueError(f"{name}[{bad}] is not finite: {a[bad]!r}")
    return np.ascontiguousarray(a)


def _centers(value, name: str) -> np.ndarray:
    """Centres as float64[n, 3] (one row: one body)."""
    a = _array(value, name)
    if a.ndim == 1 and a.shape[0] == 3:
        a = a[None, :]
    elif a.size == 0:
        a = a.reshape(0, 3)
    if a.ndim != 2 or a.shape[1] != 3:
        raise ValueError(f"{name} must be rows of 3 coordinates (shape (n, 3)), got shape "
                         f"{a.shape}")
    return a


def _sizes(value, n: int, name: str) -> np.ndarray:
    """A size per body as float64[n]: one number for all, or n numbers."""
    a = _array(value, name)
    if a.ndim == 0 or a.shape == (1,):
        return np.full(n, float(a.reshape(-1)[0]))
    if a.shape != (n,):
        raise ValueError(f"{name} must be one number for all bodies or one per body ({n}), got "
                         f"shape {a.shape}")
    return a.copy()


class Simulation:
    """A DEM simulation of rigid spheres, boxes, capsules and planes.

    Parameters
    ----------
    dt : float
        Time step [s].
    gravity : 3 floats
        Acceleration of gravity [m/s^2].
    domain : ((xlo, ylo, zlo), (xhi, yhi, zhi)) or None
        Simulation box. Needed for periodic axes and for outflow on walled axes; ``None`` means
        unbounded space.
    periodic : 3 bools
        Periodic boundary per axis (needs ``domain``).
    skin : float or None
        Neighbour-list skin. ``None``: 0.1 x the smallest body diameter. ``0`` detects contacts
        from scratch every step.
    outflow : "error" | "delete"
        What happens to a body whose centre leaves the domain on a non-periodic axis: stop the
        run with :class:`SimulationError`, or delete it (counted in ``deleted``).
    allow_large_dt : bool
        Skip the stability guard (dt <= 0.1 x the smallest collision time).
    blocks : 3 ints or None
        Blocks per axis of the domain decomposition; their product is the number of ranks.
        ``None``: the rank count factored as ``MPI_Dims_create`` does, the largest count on the
        longest axis, the axis of gravity last (:func:`parsim.decomposition.default_blocks`).
    comm : mpi4py communicator, None or "auto"
        ``"auto"`` (default): ``MPI.COMM_WORLD`` when launched on several ranks, else serial (MPI
        is not initialised). ``None``: serial.
        On several ranks each rank runs its kernels on one numba thread unless
        ``NUMBA_NUM_THREADS`` is set.
    check_ownership : bool
        Debug mode: every step, check that the set of owned uids over all ranks is unchanged
        and every uid has exactly one owner (an allgather of all uids: for tests).
    """

    def __init__(self, dt: float, gravity=(0.0, 0.0, 0.0), domain=None,
                 periodic=(False, False, False), skin: float | None = None,
                 outflow: str = "error", allow_large_dt: bool = False, broadphase=None,
                 blocks=None, comm="auto", check_ownership: bool = False):
        self.dt = dt
        self.gravity = _vec3(gravity, "gravity")
        if isinstance(periodic, (bool, np.bool_)):
            periodic = (periodic,) * 3            # True: every axis
        try:
            per = tuple(_flag(p, "periodic") for p in periodic)
        except (TypeError, ValueError):
            raise ValueError(f"periodic must be True, False or 3 of them (one per axis), got "
                             f"{periodic!r}") from None
        if len(per) != 3:
            raise ValueError(f"periodic must be 3 booleans, got {periodic!r}")
        self.periodic = np.array(per)
        if domain is None:
            if any(per):
                raise ValueError("periodic boundaries need a domain=((xlo, ylo, zlo), (xhi, yhi, zhi))")
            self.lo = np.full(3, -np.inf)
            self.hi = np.full(3, np.inf)
        else:
            try:
                lo, hi = domain
            except (TypeError, ValueError):
                raise ValueError("domain must be ((xlo, ylo, zlo), (xhi, yhi, zhi)), got "
                                 f"{domain!r}") from None
            self.lo = _vec3(lo, "domain lower corner")
            self.hi = _vec3(hi, "domain upper corner")
            if not (self.hi > self.lo).all():
                raise ValueError(f"domain: upper corner {tuple(map(float, self.hi))} must exceed the lower "
                                 f"corner {tuple(map(float, self.lo))} on every axis")
            with np.errstate(over="ignore"):
                bad = ~np.isfinite(self.hi - self.lo)   # (the corners are finite)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"domain: along {'xyz'[i]} from {float(self.lo[i])} to "
                                 f"{float(self.hi[i])} the length is not a finite float64; use "
                                 "smaller coordinates")
        self.walled = ~self.periodic & np.isfinite(self.lo)
        self.box = np.where(self.periodic, self.hi - self.lo, 0.0)
        if skin is not None:
            skin = float(skin)
            if not (math.isfinite(skin) and skin >= 0):
                raise ValueError(f"skin must be a number >= 0, got {skin!r}")
        self._skin_arg = skin
        if outflow not in ("error", "delete"):
            raise ValueError(f"outflow must be 'error' or 'delete', got {outflow!r}")
        self.outflow = outflow
        self.allow_large_dt = _flag(allow_large_dt, "allow_large_dt")
        self.net = Net(auto_comm() if isinstance(comm, str) and comm == "auto" else comm)
        if blocks is None:
            if self.net.size > 1 and not np.isfinite(self.hi - self.lo).all():
                raise ValueError(f"a run on {self.net.size} ranks needs a finite domain to cut "
                                 "into blocks: pass domain=((xlo, ylo, zlo), (xhi, yhi, zhi))")
            blocks = default_blocks(self.net.size, self.lo, self.hi, self.periodic, self.gravity)
        try:
            dims = tuple(int(b) for b in blocks)
        except (TypeError, ValueError):
            raise ValueError(f"blocks must be 3 positive integers, got {blocks!r}") from None
        if len(dims) != 3 or min(dims) < 1 or dims[0] * dims[1] * dims[2] != self.net.size:
            raise ValueError(f"blocks = {list(blocks)} must be 3 positive integers whose product "
                             f"is the number of MPI ranks ({self.net.size})")
        self.dec = Decomposition(dims, self.net.rank, self.lo, self.hi, self.periodic)
        if self.net.size > 1 and "NUMBA_NUM_THREADS" not in os.environ:
            numba.set_num_threads(1)      # one thread per rank unless asked otherwise
        self.halo = Halo(self.net, self.dec)
        cut = [d for d in range(3) if dims[d] > 1]
        #: bodies with a larger bounding radius are *global*: kept and integrated by every rank,
        #: their forces assembled over all ranks (a quarter of the narrowest cut block width)
        self.global_radius = (min((self.hi[d] - self.lo[d]) / dims[d] for d in cut) / 4.0
                              if cut else math.inf)
        self.check_ownership = bool(check_ownership)
        self._expected_uids = None
        self.st = BodyStorage()
        self.materials: list[Material] = []
        self._overrides: dict = {}
        self._table = None
        self._broadphase = broadphase
        self.nl: NeighbourList | None = None
        self.step_count = 0
        self.time = 0.0
        self.deleted = 0
        #: this rank's owned bodies summed over the steps taken (replicated bodies, i.e. planes
        #: and global bodies, counted on rank 0 only): the work done, for rates
        self.body_steps = 0
        self.n_contacts = 0
        self._in_play = np.empty(0, dtype=np.int64)  # scratch: pairs in play (sparse lists)
        self._prefilter = None  # list the pairs in play first: None = when sparse (tests force it)
        self._gaps = True       # the listing skips pairs by their gap (tests turn it off)
        self._keep_rows = True  # the sparse sums keep gravity-only rows (tests turn it off)
        self.timers = {p: 0.0 for p in PHASES}
        self._next_uid = 0
        self._ready = False
        self._scratch = None                         # per-thread narrow-phase buffers
        #: order of the candidate pairs: "auto", "key" or "slot" (same results, speed only;
        #: see NeighbourList.rebuild)
        self.pair_order = "auto"
        #: steps between two spatial sorts of the owned bodies (at the first neighbour-list
        #: rebuild that many steps after the last sort; 0: at every rebuild). Speed only, as
        #: LAMMPS's ``atom_modify sort`` (default 1000 steps): see _sort_owned
        self.sort_interval = 1000
        self._sorted_at = None                       # step of the last sort
        self._all_spheres = None                     # see _fusable
        self._im_max = None                          # see _largest_inv_mass
        self._iso_ii = None                          # see _iso_inv_inertia
        self._gravity_screen = None                  # see _screen_loads
        self._has_global = False                     # any global body (same on every rank)
        self._restored = None                        # springs loaded from a checkpoint
        self._restart_exact = False                  # next setup continues a checkpoint
        #: whether steps on several ranks may carry their end-of-step check on the next
        #: step's refresh (see :meth:`_speculates`); off, every step reduces its check. Set it
        #: alike on every rank (it decides which messages a step exchanges)
        self.speculate = True
        self._snap = None                            # the state a replay starts from
        #: steps whose check rode on the next refresh (speculation), and replays
        self.speculated = 0
        self.replays = 0
        self._replaying = False
        self._restored_skin = None                   # the skin in use at the checkpoint

    # ---- materials ---------------------------------------------------------------------------
    @property
    def dt(self) -> float:
        """The time step [s]. Setting it (collectively) between runs is checked by the
        stability guard again at the next run."""
        return self._dt

    @dt.setter
    def dt(self, value) -> None:
        try:
            dt = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"dt must be a positive number, got {value!r}") from None
        if isinstance(value, (bool, np.bool_)) or not (math.isfinite(dt) and dt > 0):
            raise ValueError(f"dt must be a positive finite number, got {value!r}")
        self._dt = dt
        self._dt_checked = False

    def add_material(self, name: str, density: float, **params) -> Material:
        """Add a material: ``density`` plus either ``restitution`` and ``collision_time`` or
        ``stiffness`` and ``damping``; optional ``friction``, ``rolling_friction``,
        ``tangential_stiffness_ratio``, ``tangential_damping_ratio`` (see :mod:`parsim.materials`)."""
        if any(m.name == name for m in self.materials):
            raise ValueError(f"material {name!r} exists already")
        unknown_parameters(name, params)
        m = make_material(name, len(self.materials), density, **params)
        self.materials.append(m)
        self._table = None
        return m

    def set_interaction(self, a, b, **params) -> None:
        """Contact parameters of the pair of materials a, b (overrides the mixing rules).
        What ``params`` leaves out keeps the pair's mixed value: the normal law as a whole
        (stiffness and damping, or restitution and collision_time), friction, rolling friction,
        the tangential ratios and the model. Materials that do not mix (different models or
        forms) need the normal law here."""
        ma, mb = self._material(a), self._material(b)
        self._overrides[(min(ma.index, mb.index), max(ma.index, mb.index))] = \
            override_row(ma, mb, params)
        self._table = None
        self._dt_checked = False

    def _material(self, m) -> Material:
        if isinstance(m, Material) and m.index < len(self.materials) and \
                self.materials[m.index] is m:
            return m
        if isinstance(m, str):
            for mat in self.materials:
                if mat.name == m:
                    return mat
        names = [x.name for x in self.materials] or "none yet; call add_material first"
        raise ValueError(f"unknown material {m!r}; known materials: {names}")

    @property
    def table(self) -> np.ndarray:
        if self._table is None:
            self._table = pair_table(self.materials, self._overrides)
        return self._table

    # ---- bodies ------------------------------------------------------------------------------
    @property
    def next_uid(self) -> int:
        """The first uid of the next collective add: one past every uid given so far."""
        return self._next_uid

    def _add(self, shape: int, params: np.ndarray, centers, orientations, velocities,
             angular_velocities, material, fixed: bool, uids=None,
             shared_global: bool = False) -> np.ndarray:
        """``shared_global``: with ``uids``, bodies larger than the blocks allow are accepted
        (the caller passes them identically on every rank; the file generator does)."""
        if uids is None:
            if self.net.size > 1:
                self._same_on_every_rank(shape, params, centers, orientations, velocities,
                                         angular_velocities, material, fixed)
            return self._add_bodies(shape, params, centers, orientations, velocities,
                                    angular_velocities, material, fixed, None)
        # rank-local: every rank calls, each with its own bodies; errors are agreed on first
        # so that a bad body on one rank raises the same error on all of them
        err = None
        try:
            values = self._add_bodies(shape, params, centers, orientations, velocities,
                                      angular_velocities, material, fixed, uids, shared_global)
        except BlocksTooNarrow as e:          # keeps its kind: callers offer other ways out
            err = (True, e.what)
        except ValueError as e:
            err = (False, str(e))
        if self.net.max(0.0 if err is None else 1.0) > 0.0:      # the lowest rank's error
            r, (narrow, text) = next((r, x) for r, x in enumerate(self.net.allgather(err))
                                     if x is not None)
            text += f" [rank {r}]" if r else ""
            raise BlocksTooNarrow(text) if narrow else ValueError(text)
        given = np.asarray(uids, dtype=np.int64).reshape(-1)
        top = np.array([self._next_uid if given.size == 0
                        else max(self._next_uid, int(given.max()) + 1)], dtype=np.int64)
        self._next_uid = int(self.net.allreduce_array(top, "max")[0])
        self.st.append_owned(values)
        return values["uid"].copy()

    def _same_on_every_rank(self, shape, *args) -> None:
        """Collective: raise the same ValueError on every rank unless all ranks passed the same
        arguments to a collective add (different ones, e.g. from unseeded random numbers, lost
        or duplicated bodies silently). Compares a digest of the arguments."""
        import hashlib

        h = hashlib.blake2b(digest_size=16)
        for a in args:
            if isinstance(a, Material):
                a = a.name
            try:
                arr = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
                h.update(repr(arr.shape).encode() + arr.tobytes())
            except (TypeError, ValueError):
                h.update(repr(a).encode())
        digests = self.net.allgather(h.hexdigest())
        odd = [r for r, d in enumerate(digests) if d != digests[0]]
        if odd:
            raise ValueError(
                f"a collective add_{SHAPE_NAMES[shape]}(s) got different arguments on ranks "
                f"{odd[:8]} than on rank 0: every rank must make the same call with the same "
                "bodies (seed random numbers alike on every rank, e.g. "
                "np.random.default_rng(seed)), or pass uids for a rank-local add")

    def _add_bodies(self, shape, params, centers, orientations, velocities, angular_velocities,
                    material, fixed, uids, shared_global=False):
        mat = self._material(material)
        name = SHAPE_NAMES[shape]
        fixed = _flag(fixed, f"{name} fixed")
        centers = _rows(centers, params.shape[0], f"{name} centers")
        n = centers.shape[0]
        if shape != PLANE:
            k = {SPHERE: 1, BOX: 3, CAPSULE: 2}[shape]
            bad = ~(np.isfinite(params[:, :k]) & (params[:, :k] > 0)).all(axis=1)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(f"{name} {i}: sizes must be finite and > 0, got {params[i, :k]!r}")
        q = _rows(orientations, n, f"{name} orientations (quaternions w, x, y, z)",
                  (1.0, 0.0, 0.0, 0.0), width=4)
        norm = np.linalg.norm(q, axis=1)
        if (norm < 1e-12).any():
            raise ValueError(f"{name} orientation {int(np.argmin(norm))} is a zero quaternion")
        q = q / norm[:, None]
        v = _rows(velocities, n, f"{name} velocities", (0.0, 0.0, 0.0))
        w = _rows(angular_velocities, n, f"{name} angular_velocities", (0.0, 0.0, 0.0))
        if shape != PLANE:
            out = (self.walled & ((centers < self.lo) | (centers >= self.hi))).any(axis=1)
            if out.any():
                i = int(np.flatnonzero(out)[0])
                raise ValueError(f"{name} {i} at {tuple(map(float, centers[i]))} lies outside the domain "
                                 f"[{tuple(map(float, self.lo))}, {tuple(map(float, self.hi))}) on a non-periodic axis")
        if uids is None and self._next_uid + n > MAX_UID:
            raise ValueError("too many bodies: uids exhausted")
        with np.errstate(over="ignore", under="ignore"):
            mass, inertia = _mass_properties(shape, params, mat.density)
        if shape != PLANE:
            # the integrator divides by both: they must be normal float64 numbers whose
            # inverses are finite too (a radius of 1e-300 gave a mass of 0, 1e300 an infinite one)
            tiny = 1.0 / np.finfo(np.float64).max
            ok = (np.isfinite(mass) & (mass >= tiny)
                  & (np.isfinite(inertia) & (inertia >= tiny)).all(axis=1))
            if not ok.all():
                i = int(np.flatnonzero(~ok)[0])
                raise ValueError(
                    f"{name} {i}: sizes {params[i, :k].tolist()} with the density "
                    f"{mat.density!r} of material '{mat.name}' give a mass {float(mass[i])!r} and "
                    f"moments of inertia {inertia[i].tolist()} that float64 cannot invert; use "
                    "units in which sizes and densities are nearer 1 (e.g. mm, g)")
        flags = np.zeros(n, dtype=np.uint8)
        if fixed or shape == PLANE:
            flags |= FIXED
        if shape == PLANE:
            flags |= INFINITE
        rb = bounding_radius(np.full(n, shape), params)
        if shape != PLANE and self.net.size > 1:
            flags[rb > self.global_radius] |= GLOBAL
        movable = (flags & FIXED) == 0
        if uids is None:
            uid = np.arange(self._next_uid, self._next_uid + n, dtype=np.int64)
            self._next_uid += n
        else:
            uid = np.asarray(uids, dtype=np.int64).reshape(-1)
            if uid.shape[0] != n:
                raise ValueError(f"{name} uids: one per body ({n}), got {uid.shape[0]}")
            if n and (uid.min() < self._next_uid or uid.max() > MAX_UID):
                raise ValueError(f"{name} uids must lie in [{self._next_uid}, {MAX_UID}] (the "
                                 f"uids in use end below {self._next_uid}), got "
                                 f"[{uid.min()}, {uid.max()}]")
            if n > 1 and (np.diff(np.sort(uid)) == 0).any():
                raise ValueError(f"{name} uids must be unique")
            if (flags & GLOBAL).any() and not shared_global:
                i = int(np.flatnonzero(flags & GLOBAL)[0])
                raise BlocksTooNarrow(
                    f"{name} uid {uid[i]} (bounding radius {rb[i]:.4g}) is larger than the "
                    f"blocks {list(self.dec.dims)} allow for a body added by one rank alone "
                    f"({self.global_radius:.4g}, a quarter of the narrowest block)")
        self._clear_shadows()
        wraps = np.zeros((n, 3), dtype=np.int32)
        if self.periodic.any():
            box = np.where(self.periodic, self.hi - self.lo, 1.0)
            k = np.floor((centers - self.lo) / box) * self.periodic
            centers = centers - k * box
            wraps[:] = k.astype(np.int32)
        with np.errstate(divide="ignore"):
            inv_mass = np.where(movable, 1.0 / mass, 0.0)
            inv_inertia = np.where(movable[:, None], 1.0 / inertia, 0.0)
        values = dict(
            uid=uid, shape=np.full(n, shape, np.int8), flags=flags,
            material=np.full(n, mat.index, np.int32), params=params, mass=mass,
            inv_mass=inv_mass, inertia=inertia, inv_inertia=inv_inertia,
            bounding_radius=rb, position=centers,
            orientation=q, velocity=np.where(movable[:, None], v, 0.0),
            angular_velocity=np.where(movable[:, None], w, 0.0), ref_position=centers,
            ref_orientation=q, wraps=wraps)
        if self.net.size > 1 and shape != PLANE:      # planes are kept by every rank
            mine = self.dec.owns(centers) | ((flags & GLOBAL) != 0)
            values = {k: np.ascontiguousarray(np.broadcast_to(a, (n,) + np.shape(a)[1:])[mine])
                      for k, a in values.items()}
        self._expected_uids = None
        self._ready = False
        self._restart_exact = False       # a setup after adding bodies evaluates forces anew
        if uids is not None:
            return values
        self.st.append_owned(values)
        return uid

    def add_spheres(self, centers, radii, material, velocities=None, angular_velocities=None,
                    fixed: bool = False, uids=None) -> np.ndarray:
        """Add n spheres (centers float[n, 3], radii float[n]); returns their uids.

        Collective: by default every rank passes the same n bodies, which get the next n uids,
        and each rank keeps those in its block. With ``uids`` (int64[n], unique, not below
        :attr:`next_uid`) the call is *rank-local*: each rank passes bodies of its own choosing
        (typically those in or near its block), each is kept by the rank whose block holds its
        centre, the others drop it; that rank must be among those passing it, and a body passed
        by several ranks must be passed identically.
        Afterwards :attr:`next_uid` is one past the largest uid given on any rank. This is how
        a large run is built without any rank holding every body (the config's lattice
        generator does it); bodies larger than a block allows must be added collectively."""
        c = _centers(centers, "sphere centers")
        params = np.zeros((c.shape[0], 3))
        params[:, 0] = _sizes(radii, c.shape[0], "sphere radii")
        return self._add(SPHERE, params, c, None, velocities, angular_velocities,
                         material, fixed, uids)

    def add_sphere(self, center, radius, material, velocity=(0, 0, 0),
                   angular_velocity=(0, 0, 0), fixed: bool = False) -> int:
        """Add one sphere; returns its uid."""
        return int(self.add_spheres([center], [radius], material, [velocity],
                                    [angular_velocity], fixed)[0])

    def add_boxes(self, centers, half_extents, material, orientations=None, velocities=None,
                  angular_velocities=None, fixed: bool = False, uids=None) -> np.ndarray:
        """Add n boxes (half_extents float[n, 3] along the body axes); returns their uids
        (``uids``: a rank-local call, see :meth:`add_spheres`)."""
        c = _centers(centers, "box centers")
        he = _rows(half_extents, c.shape[0], "box half_extents")
        return self._add(BOX, he.copy(), c, orientations, velocities,
                         angular_velocities, material, fixed, uids)

    def add_box(self, center, half_extents, orientation=(1, 0, 0, 0), material=None,
                velocity=(0, 0, 0), angular_velocity=(0, 0, 0), fixed: bool = False) -> int:
        """Add one box (cuboid) of the given half extents; returns its uid."""
        return int(self.add_boxes([center], [half_extents], material, [orientation],
                                  [velocity], [angular_velocity], fixed)[0])

    def add_capsules(self, centers, radii, lengths, material, orientations=None,
                     velocities=None, angular_velocities=None, fixed: bool = False,
                     uids=None) -> np.ndarray:
        """Add n capsules: a cylinder of ``length`` (along the body x axis) and ``radius`` with
        hemispherical caps; returns their uids (``uids``: a rank-local call, see
        :meth:`add_spheres`)."""
        c = _centers(centers, "capsule centers")
        n = c.shape[0]
        r, ln = _sizes(radii, n, "capsule radii"), _sizes(lengths, n, "capsule lengths")
        params = np.zeros((n, 3))
        params[:, 0] = r
        params[:, 1] = 0.5 * ln
        if not (ln > 0).all():
            raise ValueError(f"capsule lengths must be > 0, got {ln[~(ln > 0)][:1]}")
        return self._add(CAPSULE, params, c, orientations, velocities,
                         angular_velocities, material, fixed, uids)

    def add_capsule(self, center, radius, length, orientation=(1, 0, 0, 0), material=None,
                    velocity=(0, 0, 0), angular_velocity=(0, 0, 0), fixed: bool = False) -> int:
        """Add one capsule (cylinder ``length`` + two hemispheres of ``radius``); its uid."""
        return int(self.add_capsules([center], [radius], [length], material, [orientation],
                                     [velocity], [angular_velocity], fixed)[0])

    def add_plane(self, point, normal, material) -> int:
        """Add a fixed infinite plane through ``point``; the solid lies behind ``normal``."""
        p = _vec3(point, "plane point")
        nrm = _vec3(normal, "plane normal")
        ln = float(np.linalg.norm(nrm))
        if ln < 1e-12:
            raise ValueError(f"plane normal must be non-zero, got {normal!r}")
        params = (nrm / ln)[None, :]
        return int(self._add(PLANE, params, [p], None, None, None, material, True)[0])

    # ---- state -------------------------------------------------------------------------------
    @property
    def n_bodies(self) -> int:
        """Bodies this rank owns (planes, kept by every rank, included)."""
        return self.st.n_owned

    def count_contacts(self) -> int:
        """Collective: touching contact points over all ranks at the last force evaluation, each
        physical contact once (a contact across a rank border or periodic seam is evaluated on
        both sides; :meth:`NeighbourList.contact_halves`)."""
        if not self._ready:
            return 0
        return self.net.isum(self.nl.contact_halves(self.st, self.net.rank == 0)) // 2

    def count_bodies(self) -> int:
        """Collective: bodies over all ranks (each plane counted once)."""
        st = self.st
        planes = int(np.count_nonzero(st.flags[: st.n_owned] & REPLICATED))
        return self.net.isum(st.n_owned - planes) + planes

    STATE_FIELDS = ("uid", "shape", "params", "position", "orientation", "velocity",
                    "angular_velocity", "mass", "material", "flags", "wraps")

    def state(self, gather: bool = False, local: bool = False) -> dict | None:
        """Owned bodies (planes included), sorted by uid: uid, shape, params, position,
        orientation, velocity, angular_velocity, mass, material, flags, wraps (copies).

        ``gather=True`` (collective): every body of every rank, sorted by uid, on rank 0 (None on
        the others); for tests and small runs, not for production output. ``local=True``: this
        rank's share of the whole, the replicated bodies (planes, global bodies) on rank 0 only
        (what parallel output writes)."""
        st = self.st
        no = st.n_owned
        names = self.STATE_FIELDS
        if local and self.net.rank != 0:
            keep = np.flatnonzero((st.flags[:no] & REPLICATED) == 0)
            order = keep[np.argsort(st.uid[keep], kind="stable")]
            return {k: getattr(st, k)[order].copy() for k in names}
        if not gather or self.net.size == 1:
            order = np.argsort(st.uid[:no], kind="stable")
            return {k: getattr(st, k)[:no][order].copy() for k in names}
        keep = np.arange(no)
        if self.net.rank != 0:
            keep = np.flatnonzero((st.flags[:no] & REPLICATED) == 0)
        parts = self.net.gather({k: getattr(st, k)[keep] for k in names})
        if parts is None:
            return None
        out = {k: np.concatenate([p[k] for p in parts]) for k in names}
        order = np.argsort(out["uid"], kind="stable")
        return {k: v[order] for k, v in out.items()}

    def kinetic_energy(self) -> float:
        """Translational + rotational kinetic energy of the movable bodies (collective). The
        bodies' energies are summed exactly and rounded once (:meth:`Net.exact_sum`), so the
        value does not depend on the number of ranks or the order of the bodies."""
        st = self.st
        flags = st.flags
        if self.net.rank != 0:            # replicated bodies count on rank 0 only
            flags = flags.copy()
            flags[(flags & REPLICATED) != 0] |= FIXED
        return self.net.exact_sum(I.kinetic_energies(
            st.n_owned, flags, st.mass, st.inertia, st.orientation, st.velocity,
            st.angular_velocity))

    def memory_bytes(self) -> int:
        return self.st.nbytes + (self.nl.nbytes if self.nl is not None else 0)

    # ---- setup -------------------------------------------------------------------------------
    @property
    def skin(self) -> float:
        """Neighbour-list skin (collective when it is the default, 0.1 x smallest diameter)."""
        if self._skin_arg is not None:
            return self._skin_arg
        st = self.st
        finite = st.shape[: st.n_owned] != PLANE
        r = float(np.min(st.bounding_radius[: st.n_owned][finite])) if finite.any() else np.inf
        r = self.net.min(r)
        return 0.2 * r if np.isfinite(r) else 0.0

    def bodies_near(self, lo, hi):
        """Collective: (uid, position, bounding_radius) of the finite bodies of all ranks whose
        centre lies in the box [lo, hi], sorted by uid (for placing new bodies)."""
        st = self.st
        no = st.n_owned
        p = st.position[:no]
        rep = (st.flags[:no] & (INFINITE if self.net.rank == 0 else REPLICATED)) != 0
        sel = np.flatnonzero(~rep
                             & (p >= np.asarray(lo)).all(axis=1) & (p <= np.asarray(hi)).all(axis=1))
        parts = self.net.allgather((st.uid[sel], p[sel], st.bounding_radius[sel]))
        uid = np.concatenate([x[0] for x in parts])
        order = np.argsort(uid, kind="stable")
        return (uid[order], np.ascontiguousarray(np.concatenate([x[1] for x in parts])[order]),
                np.ascontiguousarray(np.concatenate([x[2] for x in parts])[order]))

    def largest_radius(self) -> float:
        """Collective: the largest bounding radius of a finite body (0 if none)."""
        return self.net.max(self._local_radius(include_global=True))

    def _local_radius(self, include_global: bool) -> float:
        """This rank's largest bounding radius of a finite body (without the global ones
        unless ``include_global``)."""
        st = self.st
        finite = st.shape[: st.n_owned] != PLANE
        if not include_global:
            finite &= (st.flags[: st.n_owned] & GLOBAL) == 0
        return float(np.max(st.bounding_radius[: st.n_owned][finite])) if finite.any() else 0.0

    def _halo_needs(self) -> tuple[float, bool]:
        """Collective, one reduction: the largest bounding radius of the finite non-global
        bodies (it sets the halo of the shadow copies) and whether any rank owns a movable
        non-sphere (then the shadows' orientations are refreshed every step)."""
        st = self.st
        no = st.n_owned
        turning = bool(np.any(((st.flags[:no] & FIXED) == 0) & (st.shape[:no] != SPHERE)))
        both = self.net.allreduce_array(
            np.array([self._local_radius(False), 1.0 if turning else 0.0]), "max")
        return float(both[0]), bool(both[1] > 0.0)

    def smallest_collision_time(self) -> tuple[float, str]:
        """Smallest normal collision time over the material pairs present, with the smallest
        masses of each material (walls: the body's own mass)."""
        st = self.st
        no = st.n_owned
        movable = (st.flags[:no] & FIXED) == 0
        mats = st.material[:no]
        best, where = math.inf, ""
        nm = len(self.materials)
        lows = np.full(nm, np.inf)
        has_fixed = np.zeros(nm)
        for k in np.unique(mats[movable]):
            lows[k] = float(st.mass[:no][movable & (mats == k)].min())
        for k in np.unique(mats[~movable]):
            has_fixed[k] = 1.0
        lows = self.net.allreduce_array(lows, "min")
        has_fixed = self.net.allreduce_array(has_fixed, "max")
        m_min = {k: float(lows[k]) for k in range(nm) if np.isfinite(lows[k])}
        fixed_mats = {k for k in range(nm) if has_fixed[k] > 0}
        table = self.table
        for a, ma in m_min.items():
            for b, mb in m_min.items():
                tc = collision_time(table[a, b], ma * mb / (ma + mb))
                if tc < best:
                    best, where = tc, f"{self.materials[a].name}/{self.materials[b].name}"
            for b in fixed_mats:
                tc = collision_time(table[a, b], ma)
                if tc < best:
                    best, where = tc, f"{self.materials[a].name}/{self.materials[b].name} (wall)"
        return best, where

    def _setup(self) -> None:
        first = self.step_count == 0 and not self._restart_exact
        self._check_dt()
        self._setup_lists()
        if first:
            msg = self._start_overlap()         # collective
            if msg is not None and self.net.rank == 0:
                warnings.warn(msg, OverlapWarning, stacklevel=4)

    #: a start with bodies overlapping by more than this fraction of the smaller radius warns
    OVERLAP_WARNING = 0.05

    def _start_overlap(self) -> str | None:
        """Collective: a message if two bodies (or a body and a plane) overlap by more than
        :data:`OVERLAP_WARNING` of the smaller one's size (the radius of a sphere or capsule, a
        box's smallest half-extent; their contact force would throw them apart; usually a
        mistake in the input), else None. Sphere pairs use the neighbour list's gaps of the
        setup; pairs with a box or a capsule, the narrow phase's deepest contact point."""
        st, nl = self.st, self.nl
        worst = (0.0, -1, -1, False)
        if nl is not None and nl.gap.size:
            pa, pb = nl.pa[: nl.gap.size], nl.pb[: nl.gap.size]
            ok = np.isfinite(nl.gap) & (st.shape[pa] == SPHERE)
            ra = st.params[pa, 0]
            rb = np.where(st.shape[pb] == PLANE, ra, st.params[pb, 0])
            ratio = np.where(ok, -nl.gap / np.minimum(ra, rb), 0.0)
            if ratio.size and ratio.max() > self.OVERLAP_WARNING:
                k = int(np.argmax(ratio))
                worst = (float(ratio[k]), int(st.uid[pa[k]]), int(st.uid[pb[k]]), False)
        if nl is not None and nl.general_idx.size:
            sel = nl.general_idx
            ratio = np.empty(sel.size)
            self._deepest_overlaps(nl, ratio)
            k = int(np.argmax(ratio))
            if ratio[k] > max(worst[0], self.OVERLAP_WARNING):
                a, b = nl.pa[sel[k]], nl.pb[sel[k]]
                boxed = bool(st.shape[a] == BOX or st.shape[b] == BOX)
                worst = (float(ratio[k]), int(st.uid[a]), int(st.uid[b]), boxed)
        worst = max(self.net.allgather(worst))
        if worst[0] <= self.OVERLAP_WARNING:
            return None
        size = "size (a box's smallest half-extent)" if worst[3] else "radius"
        u, v = sorted(worst[1:3])
        return (f"bodies overlap at the start, up to {100 * worst[0]:.3g} % of the smaller "
                f"{size} (uids {u} and {v}); their contact forces will push them "
                "apart hard. Check the input positions and sizes")

    def _check_dt(self) -> None:
        """Refuse a time step above :data:`DT_FRACTION` x the smallest collision time."""
        if not self.allow_large_dt:
            tc, where = self.smallest_collision_time()
            # 1e-9 relative slack: the collision time is recomputed from stiffness and damping,
            # so dt = 0.1 x the configured collision time can come out 1 ulp above the limit
            # (configs/sand_and_rocks.toml was refused that way until 2026-11-24)
            if self.dt > DT_FRACTION * tc * (1.0 + 1e-9):
                raise SimulationError(
                    f"dt = {self.dt:g} s exceeds {DT_FRACTION} x the smallest collision time "
                    f"{tc:.6g} s (materials {where}); use dt <= {DT_FRACTION * tc:.6g} s, stiffer "
                    "-> smaller dt, or pass allow_large_dt=True")
        self._dt_checked = True

    def _setup_lists(self) -> None:
        # a restart continues with the skin of the checkpoint: the default one (0.2 x the
        # smallest radius at the last setup) may differ from that of the bodies left now
        skin = self.skin if self._restored_skin is None else self._restored_skin
        self._restored_skin = None
        if self.nl is None:
            self.nl = NeighbourList(skin, self._broadphase)
        self.nl.skin = skin
        if self._restored is not None:
            self.nl.import_history(self._restored)
            self._restored = None
        if self._restart_exact:
            # a restart: the checkpoint holds the forces of its last step and the springs
            self._restart_exact = False
            self._rebuild(restart=True)
        else:
            self._sorted_at = None      # bodies added since the last sort: sort them in now
            self._rebuild()
            # as LAMMPS, setup evaluates forces without advancing the springs (a re-setup after
            # inserting bodies must not advance them twice in one step)
            self._forces(update=False)
        self._ready = True

    # ---- periodic images (the serial shadows) ---------------------------------------------------
    def _clear_shadows(self) -> None:
        self.st.clear_shadows()
        self.halo.reset()

    def _wrap(self) -> None:
        """Move owned bodies back into the box on periodic axes (counted in ``wraps``)."""
        if not self.periodic.any():
            return
        st = self.st
        box = np.where(self.periodic, self.hi - self.lo, 1.0)
        I.wrap_periodic(st.n_owned, st.position, st.wraps, self.lo, box, self.periodic)

    def _check_halo(self, rmax: float, skin: float) -> None:
        """Periodic axes must be longer than twice the halo (one image of a body near a body),
        the global bodies included: on one rank they are ordinary bodies, and the same scene
        must be refused on any number of ranks (every rank holds every global body, so all
        decide alike); blocks must be wider than the halo of the other bodies (``rmax``; shadows
        travel one block per sweep)."""
        st = self.st
        no = st.n_owned
        big = ((st.flags[:no] & GLOBAL) != 0) & (st.shape[:no] != PLANE)
        rper = max(rmax, float(st.bounding_radius[:no][big].max())) if big.any() else rmax
        need = 2.0 * (2.0 * rper + skin)
        for d in np.flatnonzero(self.periodic):
            if self.box[d] <= need:
                raise SimulationError(
                    f"periodic axis {'xyz'[d]}: the box length {self.box[d]:g} must exceed "
                    f"2 x (largest body diameter + skin) = 2 x ({2.0 * rper:g} + {skin:g}) = "
                    f"{need:g}; enlarge the domain"
                    + (" or reduce the skin" if skin > 2.0 * rper else ""))
        # bodies wider than a quarter of the narrowest block are global, so the diameter of the
        # others is at most half a block: only a large skin makes the halo wider than a block
        width = (self.hi - self.lo) / np.array(self.dec.dims)
        halo = 2.0 * rmax + skin
        for d in range(3):
            if self.dec.dims[d] > 1 and not width[d] > halo * (1 + 1e-9):
                raise SimulationError(
                    f"blocks along {'xyz'[d]} are {width[d]:g} wide, thinner than the halo "
                    f"(largest body diameter + skin = {2.0 * rmax:g} + {skin:g} = {halo:g}): "
                    f"set a skin below {width[d] - 2.0 * rmax:g} (skin in [simulation], or "
                    f"Simulation(skin=...)), or use fewer blocks along {'xyz'[d]} "
                    f"(blocks = {list(self.dec.dims)}) or fewer ranks")

    def _refresh_shadows(self) -> None:
        self.halo.refresh(self.st)

    def _rebuild(self, restart: bool = False) -> None:
        """Migrate, make the shadows, rebuild the neighbour list. ``restart``: the first build
        after loading a checkpoint, which must not change the trajectory: no wrapping (that
        happens at the regular rebuilds), reference poses kept, candidates enlarged by the full
        skin (bodies moved up to half of it since the reference poses)."""
        self._clear_shadows()
        self._all_spheres = None
        self._im_max = None
        self._iso_ii = None
        self._gravity_screen = None
        st = self.st
        if self.outflow == "delete" and self.walled.any() and not restart:
            out = np.zeros(st.n_owned, dtype=np.bool_)
            k = I.outside(st.n_owned, st.flags, st.position, self.lo, self.hi, self.walled, out)
            if k:
                gone = np.flatnonzero(out)
                # a body kept by every rank (a global body) is deleted on every rank and
                # counted on rank 0 only, so that the ranks' counts sum to the serial count
                # (until 2026-11-25 each rank counted it: found by a rank-count fuzzer)
                rep = int(np.count_nonzero(st.flags[gone] & REPLICATED))
                self.deleted += gone.size - (rep if self.net.rank else 0)
                st.remove_owned(gone)
            if self.check_ownership and self.net.isum(k):
                self._expected_uids = None
        if not restart:
            self._wrap()
        if self.net.size > 1:
            err = self.halo.migrate(st, self.nl)
            if err is not None:
                raise SimulationError(err)
        rmax, turning = self._halo_needs()
        if not restart and (self._sorted_at is None
                            or self.step_count - self._sorted_at >= self.sort_interval):
            self._sort_owned(rmax)
            self._sorted_at = self.step_count
        skin = self.nl.skin
        self._check_halo(rmax, skin)
        reach = rmax + skin * (2.0 if restart else 1.0) + 1e-9 * (1.0 + float(np.abs(self.box).max()))
        self.halo.build(st, reach, turning)
        if self.pair_order not in ("auto", "key", "slot"):
            raise ValueError(f"pair_order must be 'auto', 'key' or 'slot', got "
                             f"{self.pair_order!r}")
        key_order = None if self.pair_order == "auto" else self.pair_order == "key"
        if restart:
            self.nl.rebuild(st, self.box, margin=skin, keep_refs=True, key_order=key_order)
        else:
            self.nl.rebuild(st, self.box, key_order=key_order)
        # collective: every rank, whatever its shadows; not with a zero skin (a rebuild every
        # step: the masks would cost more than they save)
        if self.halo.pruning and skin > 0.0:
            needed = np.zeros(st.n, dtype=np.bool_)
            needed[self.nl.pa] = True
            needed[self.nl.pb] = True
            self.halo.prune(needed)
        self._has_global = bool((st.flags[: st.n_owned] & GLOBAL).any())

    def _sort_owned(self, rmax: float) -> None:
        """Reorder the owned bodies by the cell (edge 4 x the largest radius, z, then y, then x)
        of their centre, so that bodies near in space are near in memory: the pair and sum
        kernels then read neighbouring rows (as LAMMPS's atom sorting). Replicated bodies
        (planes, global bodies) go to the front, in their order, and do not enter the cells.
        Changes no result: forces are summed by partner key, not by slot. Runs at the first
        rebuild at least :attr:`sort_interval` steps after the last sort: bodies move less than
        half the skin between rebuilds, so the order decays slowly, and a sort costs about as
        much as the rest of a rebuild (2 ms of 13 on the 8,000-sphere gas)."""
        st = self.st
        n = st.n_owned
        if n < 2 or not math.isfinite(rmax) or rmax <= 0.0:
            return
        local = (st.flags[:n] & REPLICATED) == 0
        every = bool(local.all())
        pos = st.position[:n] if every else st.position[:n][local]   # one copy at most
        if not local.any() or not np.isfinite(pos).all():
            return                      # nothing to sort, or the state check reports a body
        cell = 4.0 * rmax
        lo = pos.min(axis=0)
        dims = np.floor((pos.max(axis=0) - lo) / cell) + 1.0
        if float(dims[0]) * float(dims[1]) * float(dims[2]) >= 2.0**62:
            return
        c = np.floor((pos - lo) / cell).astype(np.int64)
        key = np.full(n, -1, dtype=np.int64)
        key[local] = c[:, 0] + int(dims[0]) * (c[:, 1] + int(dims[1]) * c[:, 2])
        order = np.argsort(key, kind="stable")
        if (order != np.arange(n)).any():
            st.permute_owned(order)
            self.nl.forget_order()

    # ---- the step ----------------------------------------------------------------------------
    def _forces(self, update: bool = True, moved: float = math.inf) -> None:
        """Pair forces and per-body sums. ``moved``: the largest distance any body (on any
        rank) has moved since the reference poses of the neighbour list, if known (it lets the
        sparse listing skip pairs too far apart to touch)."""
        st, nl = self.st, self.nl
        n_simple = nl.simple_idx.size
        every = n_simple == nl.n_pairs
        # one serial sweep sums too when every pair is a sphere pair (canonical: the pairs are
        # in key order); otherwise the pair kernels write rows and accumulate sums them
        summed = every and nl.key_order and not threaded(n_simple)
        no = st.n_owned
        if summed:
            st.force[:no] = 0.0
            st.torque[:no] = 0.0
        sel, n_sel, sel_every = nl.simple_idx, n_simple, every
        # a large rank: the builds of the sparse path that ask for rows ahead (contacts.AHEAD)
        far = st.n >= contacts.FAR_ROWS
        sparse = 8 * self.n_contacts < n_simple if self._prefilter is None else self._prefilter
        if sparse and n_simple:
            # sparse (a gas; the count is the last step's): first list the pairs in play with a
            # bare distance test, then run the force kernel on them only (same bits). Also
            # with several threads (since 2026-11-29): the serial listing and a kernel on the
            # few pairs it keeps beat the threaded kernel on every candidate (2 threads, gas
            # after 2,000 steps: 64,000 spheres 1.01-1.15 -> 0.84-0.90 ms per step, 125,000
            # 2.11-3.40 -> 2.09-2.40 ms)
            if self._in_play.shape[0] < n_simple:
                self._in_play = np.empty(max(n_simple, 2 * self._in_play.shape[0]), np.int64)
            sel = self._in_play
            lim = 2.0 * moved * (1.0 + 1e-9) + nl.hair if self._gaps else math.inf
            listing = contacts._in_play_far if far else contacts.sphere_pairs_in_play
            n_sel = listing(
                n_simple, every, nl.simple_idx, nl.pa, nl.pb, nl.hist, st.shape, st.params,
                st.position, st.image, self.box, nl.live, nl.touching, nl.gap, lim, sel)
            sel_every = False
        if threaded(n_sel):
            kernel = sphere_pair_forces[1]
        elif not sel_every and far:
            # a selection of a large rank's list (the pairs in play, or the sphere pairs of a
            # mixed list), scattered over it: the build that asks for rows ahead (125,000-sphere
            # gas, 0.50 -> 0.31 ms with the caches flushed; no gain measured on a whole list,
            # the dense bed)
            kernel = contacts._pair_forces_far
        else:
            kernel = sphere_pair_forces[0]
        self.n_contacts = kernel(
            sel, n_sel, sel_every, nl.pa, nl.pb, nl.hist, st.shape, st.params,
            st.flags, st.material, st.mass, st.position, st.velocity, st.angular_velocity,
            st.image, self.table, self.box, self.dt, nl.shear, nl.touching, nl.pout, nl.live,
            update, summed, no, st.force, st.torque,
            not summed or self._has_global)
        if nl.general_idx.size:
            self.n_contacts += self._general_forces(nl, update)
        if summed:
            finish_sums(no, st.flags, st.mass, self.gravity, st.force, st.torque)
            nl.n_listed[0] = -1      # no rows kept (see accumulate)
        else:
            dense = 8 * self.n_contacts >= nl.n_pairs
            if not dense and far:
                # asks for the rows of bodies ahead; with threads too: its listed pass is
                # serial in every build
                kernel = contacts._accumulate_far
            elif threaded(no):
                kernel = accumulate[1]
            else:
                kernel = accumulate[0]
            kernel(no, nl.ptr, nl.entry, nl.live, dense, nl.touched, nl.pout, st.flags, st.mass,
                   self.gravity, st.force, st.torque, self._keep_rows and not self._has_global,
                   nl.kept_gravity, nl.pa, nl.pb, nl.listed, nl.n_listed)
        if self._has_global:
            global_bodies.assemble(st, nl, self.net, self.gravity)

    def _general_forces(self, nl, update: bool) -> int:
        """Pair forces of the pairs that need the full narrow phase (``nl.general_idx``: a box
        or a capsule in them), written to ``nl``'s rows; returns how many touch."""
        st = self.st
        threads = numba.config.NUMBA_NUM_THREADS
        if self._scratch is None or self._scratch[0].shape[0] != threads:
            self._scratch = scratch(threads)
        return pick(general_pair_forces, nl.general_idx.size)(
            nl.general_idx, nl.pa, nl.pb, nl.hist, st.shape, st.params, st.flags,
            st.material, st.mass, st.position, st.orientation, st.velocity,
            st.angular_velocity, st.image, self.table, self.box, self.dt,
            st.bounding_radius, nl.shear, nl.touching, nl.pout, nl.live, update,
            *self._scratch)

    def _deepest_overlaps(self, nl, ratio: np.ndarray) -> None:
        """Overlap of each pair of ``nl.general_idx`` relative to its smaller body, into
        ``ratio`` (the overlap warning at the start of a run)."""
        st = self.st
        deepest_overlaps(nl.general_idx, nl.pa, nl.pb, st.shape, st.params, st.position,
                         st.orientation, st.image, self.box, st.bounding_radius, ratio)

    def _first_half(self, no: int) -> float:
        """The first half step of the first ``no`` bodies (kick, drift, turn); returns the
        largest distance a body has moved from its reference pose."""
        st = self.st
        return pick(I.first_half, no)(
            no, self.dt, st.flags, st.shape, st.inv_mass, st.inertia, st.inv_inertia,
            self._iso_inv_inertia(), st.bounding_radius, st.position, st.orientation, st.velocity,
            st.angular_velocity, st.force, st.torque, st.ref_position,
            st.ref_orientation)

    def _compile_rotating_kernels(self) -> None:
        """Compile (or load from the cache) the kernels of rotating bodies without stepping:
        the general pair forces, the overlap check's narrow phase and the integrator's two
        halves, each called on nothing (no pair, no body) with this simulation's arrays, so
        with the types a run passes. :func:`parsim.warmup.compile_helper_part` calls it in a
        second process while the first compiles the rest; about 45 % of a cold
        compile."""
        self._first_half(0)          # in the order a run needs them
        self._second_half(0)
        nl = NeighbourList(1.0)
        self._general_forces(nl, True)
        self._deepest_overlaps(nl, np.empty(0))

    def step(self) -> None:
        """Advance one time step."""
        self._advance(1)

    def _largest_inv_mass(self) -> float:
        """Largest inverse mass of an owned movable body; cached like :meth:`_fusable`."""
        if self._im_max is None:
            st = self.st
            no = st.n_owned
            im = st.inv_mass[:no][(st.flags[:no] & FIXED) == 0]
            self._im_max = float(im.max()) if im.size else 0.0
        return self._im_max

    def _iso_inv_inertia(self) -> np.ndarray:
        """The owned bodies' first inverse principal moments as one contiguous array, an input
        of the integrator's kernels; cached like :meth:`_fusable`."""
        if self._iso_ii is None:
            st = self.st
            self._iso_ii = np.ascontiguousarray(st.inv_inertia[: st.n_owned, 0])
        return self._iso_ii

    def _screen_loads(self, no: int) -> tuple[int, float]:
        """:func:`parsim.integrator.screen_loads` of the owned bodies' force and torque, or an
        upper bound of its largest component with the same verdict: when the step's sparse
        sums kept the rows of the bodies without a live pair (``nl.n_listed[0] >= 0``; they hold
        ``0.0 + m g``, zero torque), only the rows they wrote (``nl.listed[0]``) are read, and
        the kept rows count by a screen of ``m g`` over the movable bodies (cached until the
        next rebuild or a change of gravity). The full pass read 6 MB per step at 125,000
        bodies for a few thousand changed rows. Code that changes force rows after the sums
        must set ``nl.n_listed[0] = -1`` (as the sums do when told not to keep rows)."""
        st, nl = self.st, self.nl
        m = int(nl.n_listed[0])
        if m < 0:
            return I.screen_loads(no, st.force, st.torque)
        g = (float(self.gravity[0]), float(self.gravity[1]), float(self.gravity[2]))
        if self._gravity_screen is None or self._gravity_screen[0] != g:
            movable = (st.flags[:no] & FIXED) == 0
            with np.errstate(over="ignore", invalid="ignore"):
                rows = 0.0 + st.mass[:no][movable, None] * self.gravity
            bad = int(np.count_nonzero(~np.isfinite(rows)))
            self._gravity_screen = (g, bad, float(np.abs(rows).max()) if rows.size else 0.0)
        _, gbad, gmax = self._gravity_screen
        bad, fmax = I.screen_rows(nl.listed[0], m, st.force, st.torque)
        return int(bad) + gbad, max(float(fmax), gmax)

    def _fusable(self) -> bool:
        """Whether no owned movable body is a non-sphere (then :func:`parsim.integrator.
        both_halves` may join a step's second half to the next step's first half). Cached
        until the owned bodies change (rebuild, setup)."""
        if self._all_spheres is None:
            st = self.st
            no = st.n_owned
            self._all_spheres = not bool(np.any(((st.flags[:no] & FIXED) == 0)
                                                & (st.shape[:no] != SPHERE)))
        return self._all_spheres

    def _advance(self, n: int) -> None:
        """Advance ``n`` time steps (velocity Verlet: half kick and drift, forces, half kick).

        Between two steps of the same call nothing looks at the state, so when every owned
        movable body is a sphere the second half of a step and the first half of the next run
        as one pass over the arrays (:func:`parsim.integrator.both_halves`, same bits). The
        step's end-of-step check must still come before that pass (an error stops the run with
        the state at the end of the failing step), and it does, without reading the state
        again: the pass checks the centres and velocities it writes (cheaply: a count), the
        forces are checked by a pass over force and torque only, and a step whose inputs all
        pass cannot fail the check (a kick from finite values that overflows to infinity is
        found one step later, at the drift). A step with anything suspect, the first step of a
        call, the last one and the step of a rebuild take the separate halves and the exact
        check. The collectives do not depend on this per-rank choice.

        On several ranks the check's reduction also carries each rank's bound of the
        displacement the next drift will give (:func:`parsim.integrator.drift_bound`, from the
        largest speed and acceleration, found by the passes above). When the largest bound is
        below half the skin, no rank can need a rebuild, and the next step uses it instead of
        reducing the displacement: one reduction per step instead of two. The bound can only
        enlarge the listing of the sparse force pass, which changes no bit. A rank of at least
        :data:`parsim.integrator.BOUND_ONLY_MIN` bodies (alone too) also bounds, and while
        every rank's bound is below half the skin its joint pass leaves out the displacement,
        which the next step does not need; its next bound then starts from this bound instead
        of the exact value (125,000-sphere gas: 984 of 995 joint passes, the same rebuilds)."""
        if n <= 0:
            return
        if not self._ready:
            self._setup()
        elif not self._dt_checked:      # dt or a pair's contact law changed since the setup
            self._check_dt()
        st, nl = self.st, self.nl
        tm = self.timers
        walls = self._checked_walls()
        moved = None        # of this step's first half when the joint pass did it
        checked = False     # this step's drifted state passed the cheap check
        speed = math.inf    # largest speed of a movable body in this step's drift
        ahead = math.inf    # every rank's bound of the next drift's displacement
        # a large rank's joint pass skips the displacement when the bound says no rebuild can
        # be due (it reads 24 bytes per body less); small ranks keep it exact (their arrays stay
        # in the caches, and an exact start keeps the bound, and the reductions it saves, tight)
        bound_only = st.n_owned >= I.BOUND_ONLY_MIN
        bounded = self.net.size > 1 or bound_only
        slack = self._round_slack() if bounded else math.inf
        # replicated bodies (on every rank) count once in body_steps: on rank 0
        rep = int(np.count_nonzero(st.flags[: st.n_owned] & REPLICATED)) if self.net.rank else 0
        # the end-of-step check rides on the next step's refresh (see _speculates)
        spec = self._speculates(n)
        if spec:
            self._snapshot()
        failed = False      # (spec) this rank's state failed the check at the last step's end
        for k in range(n):
            no = st.n_owned
            self.body_steps += no - rep
            t0 = time.perf_counter()
            if moved is None and not failed:
                moved = self._first_half(no)
                checked = False
                if k + 1 < n:
                    bad, speed = I.count_unchecked(no, st.flags, st.position, st.velocity,
                                                   st.angular_velocity, self.lo, self.hi, walls)
                    checked = bad == 0
            t1 = time.perf_counter()
            mine = moved
            if spec:
                # the refresh carries every rank's verdict on the last step's end and its
                # displacement (a NaN counts as inf), and brings back the largest of each
                flags = self.halo.flags
                flags[0] = 1.0 if failed else 0.0
                flags[1] = 0.0 if failed else (moved if moved == moved else math.inf)
                self._refresh_shadows()
                if flags[0] != 0.0:
                    self._replay()                # raises the error of the failing rank
                moved = float(flags[1])
            elif ahead < 0.5 * nl.skin:
                moved = ahead     # every rank's bound is below half the skin: no reduction
            else:
                moved = self.net.max(moved if math.isfinite(moved) else math.inf)
            rebuilt = False
            if moved > 0.5 * nl.skin or nl.skin == 0.0 or not math.isfinite(moved):
                tc = time.perf_counter()
                try:
                    self._check(self.step_count + 1)
                    self._rebuild()
                except SimulationError:
                    # the state is partway through the failing step: count it, so that the
                    # snapshot of the failure does not replace that of the step before
                    # (until 2026-11-24 a failure here was written over the step-N snapshot)
                    self.step_count += 1
                    self.time += self.dt
                    raise
                moved = 0.0           # the rebuild took the current poses as reference
                checked = False       # bodies may have arrived, been wrapped or deleted
                rebuilt = True
            else:
                if not spec:
                    self._refresh_shadows()
                tc = time.perf_counter()
            t2 = time.perf_counter()
            self._forces(moved=moved)
            t3 = time.perf_counter()
            no = st.n_owned
            join = False
            bound = math.inf
            if checked and k + 1 < n and self._fusable():
                bad, fmax = self._screen_loads(no)
                join = bad == 0
                if join and bounded and not spec:
                    accel = I.SQRT3_UP * fmax * self._largest_inv_mass()
                    bound = I.drift_bound(mine, speed, accel, self.dt, slack)
            if join:
                found = (-1, 0)       # finite inputs inside the domain: the check passes
            else:
                # the second kick also checks the new state (one pass instead of two)
                found = self._second_half()
            self.step_count += 1
            self.time += self.dt
            t4 = time.perf_counter()
            if spec and k + 1 < n:
                # no reduction: the next step's refresh carries the verdict; until then this
                # rank holds a state to restart from (taken again after each rebuild, so that a
                # replay never crosses one)
                failed = found[0] >= 0
                self.speculated += 1
                if rebuilt:
                    self._snapshot()
            else:
                try:
                    ahead = self._check(self.step_count, found, bound)
                except SimulationError:
                    if join:          # another rank failed: end this step here too
                        self._second_half()
                    raise
            t5 = time.perf_counter()
            if join:
                # every rank's bound below half the skin: the next step takes it as the
                # displacement (see the top of the loop), and this rank's own bound bounds its
                # displacement (the next step's ``mine``) without computing it
                track = not (bound_only and ahead < 0.5 * nl.skin)
                moved, bad, odd, speed = pick(I.both_halves, no)(
                    no, self.dt, st.flags, st.shape, st.inv_mass, self._iso_inv_inertia(),
                    st.position, st.orientation, st.velocity, st.angular_velocity, st.force,
                    st.torque, st.ref_position, self.lo, self.hi, walls, track)
                if odd:
                    raise RuntimeError("parsim: both_halves met a movable non-sphere")
                if not track:
                    moved = bound
                checked = bad == 0
            else:
                moved = None
            t6 = time.perf_counter()
            tm["integration"] += (t1 - t0) + (t4 - t3) + (t6 - t5)
            tm["neighbours"] += t2 - tc
            tm["communication"] += tc - t1
            tm["contacts"] += t3 - t2
            tm["checks"] += t5 - t4

    def _speculates(self, n: int) -> bool:
        """Collective: whether the ``n`` steps of this call carry each step's end-of-step check
        on the next step's shadow refresh instead of a reduction of their own (one message
        exchange per step instead of two).

        A rank then goes on into the next step before it knows the other ranks' verdict. When
        one failed, every rank learns it at the next refresh and :meth:`_replay` starts again
        from a state kept for the purpose: so the error is raised at the failing step, with its
        state, on every rank, as without speculation. That needs the refresh of the kernels
        (:mod:`parsim.native_mpi`), whose messages carry the verdict; every rank within one
        block of every other (at most two blocks along each axis, or three along a periodic
        one), so that the three sweeps reach all ranks; ranks below
        :data:`parsim.integrator.BOUND_ONLY_MIN` bodies (a large rank's joint pass uses the
        reduced bound before it starts, and its check costs little against its step); the
        ownership check off (it reduces every step anyway). The last step of a call keeps its
        reduction."""
        if (n < 2 or self.net.size == 1 or self.net.native is None or not self.speculate
                or self._replaying or self.check_ownership or self.halo._native is None):
            return False
        dims, per = self.dec.dims, self.dec.periodic
        if any(dims[d] > 3 or (dims[d] == 3 and not per[d]) for d in range(3)):
            return False
        return self.net.max(float(self.st.n_owned)) < I.BOUND_ONLY_MIN

    #: the fields a step changes (the others change only at rebuilds)
    _STEPPED = ("position", "velocity", "angular_velocity", "orientation", "force", "torque")

    def _snapshot(self) -> None:
        """Keep this rank's state at the end of a step for :meth:`_replay`: the fields of the
        owned bodies a step changes (copies, 23 us for 8,000 bodies against 290 us for every
        field), and the touching contacts' springs."""
        st = self.st
        no = st.n_owned
        self._snap = (self.step_count, self.time, self.body_steps, st.uid[:no].copy(),
                      [getattr(st, f)[:no].copy() for f in self._STEPPED],
                      self.nl.export_touching())

    def _replay(self) -> None:
        """Collective: a rank failed the check at the end of step ``step_count`` (the others
        went on into the next step). Every rank puts back its :meth:`_snapshot` (no rebuild came
        since: the same bodies in the same slots), restarts from it as from a checkpoint
        (bit-identical), and runs again to that step, each step with its own check, which
        raises the error there with the state of that step."""
        failed_at = self.step_count
        step, t, body_steps, uids, fields, springs = self._snap
        st = self.st
        no = st.n_owned
        if no != uids.size or not np.array_equal(st.uid[:no], uids):
            raise RuntimeError("parsim: the bodies changed since the state kept for a replay "
                               "(a bug in parsim; please report it)")
        self._clear_shadows()
        for f, a in zip(self._STEPPED, fields):
            getattr(st, f)[:no] = a
        self.step_count, self.time, self.body_steps = step, t, body_steps
        self._restored_skin = self.nl.skin
        self.nl = None                  # a new list, with the springs kept (as a restart)
        self._restored = springs
        self._restart_exact = True
        self._ready = False
        self._replaying = True
        self.replays += 1
        try:
            self._check(step)           # a snapshot after a rebuild is of an unchecked step
            self._advance(failed_at - step)
        finally:
            self._replaying = False
        raise RuntimeError(f"parsim: a rank failed the check at step {failed_at}, but the run "
                           f"again from step {step} did not (a bug in parsim; please report it)")

    def _second_half(self, no: int | None = None):
        """The second half step (kick, with the check of the new state) of the first ``no``
        bodies (default: the owned ones); returns :func:`parsim.integrator.second_half`'s
        finding."""
        st = self.st
        no = st.n_owned if no is None else no
        return pick(I.second_half, no)(
            no, self.dt, st.flags, st.shape, st.inv_mass, st.inertia, st.inv_inertia,
            self._iso_inv_inertia(), st.orientation, st.velocity, st.angular_velocity, st.force,
            st.torque, st.position, self.lo, self.hi, self._checked_walls())

    def _check(self, step: int, found=None, bound: float = math.inf) -> float:
        """Collective: raise the same SimulationError on every rank if any rank has a body with a
        non-finite state or (outflow "error") outside the domain. ``found``: this rank's
        (index, cause) of :func:`parsim.integrator.check_state`, if already known. Returns the
        largest ``bound`` over the ranks (carried by the same reduction)."""
        msg, key = self._check_local(step, found)
        if self.check_ownership:      # collective (an allgather): every rank must take part
            owners = self._ownership_error(step)
            if msg is None and owners is not None:
                msg, key = owners, MAX_UID + 1
        # several ranks with a bad body: the message of the lowest uid, as in a serial run
        msg, bound = self.net.first_error_and_max(msg, bound, key)
        if msg is not None:
            raise SimulationError(msg)
        return bound

    def _round_slack(self) -> float:
        """Rounding allowance of :func:`parsim.integrator.drift_bound`: 1e-15 x the largest
        coordinate a centre can have between two rebuilds (infinite in an unbounded domain,
        which turns the bound off)."""
        span = float(np.max(np.abs(np.concatenate([self.lo, self.hi]))))
        return 1e-15 * (1.0 + span + self.nl.skin)

    def _ownership_error(self, step: int) -> str | None:
        st = self.st
        no = st.n_owned
        uids = st.uid[:no][(st.flags[:no] & REPLICATED) == 0]
        everyone = np.sort(self.net.allgather_int64(uids))
        if self._expected_uids is None:
            self._expected_uids = everyone
        exp = self._expected_uids
        if everyone.size == exp.size and (everyone == exp).all():
            return None
        dup = everyone[1:][everyone[1:] == everyone[:-1]]
        lost = np.setdiff1d(exp, everyone)
        new = np.setdiff1d(everyone, exp)
        return (f"ownership check failed at step {step}: {everyone.size} owned bodies, expected "
                f"{exp.size}; uids with two owners {dup[:10].tolist()}, lost {lost[:10].tolist()},"
                f" unexpected {new[:10].tolist()}")

    def _checked_walls(self) -> np.ndarray:
        """Axes on which a centre outside the domain is an error (none under outflow
        "delete", where such bodies are removed at the next rebuild)."""
        return self.walled if self.outflow == "error" else np.zeros(3, dtype=np.bool_)

    def _check_local(self, step: int, found=None) -> tuple[str | None, int]:
        """(message, uid) for this rank's owned body with the lowest uid that fails the state
        check, else (None, 0)."""
        st = self.st
        if found is None:
            found = I.check_state(st.n_owned, st.flags, st.position, st.velocity,
                                  st.angular_velocity, self.lo, self.hi, self._checked_walls())
        i, cause = found
        if i >= 0:
            i, cause = self._lowest_bad()
            uid = int(st.uid[i])
            if cause == 1:
                what = (f"non-finite state (position {_fmt(st.position[i])}, velocity "
                        f"{_fmt(st.velocity[i])}, angular velocity {_fmt(st.angular_velocity[i])})"
                        "; the time step is probably too large for the contact stiffness")
            else:
                what = (f"its centre {_fmt(st.position[i])} left the domain "
                        f"[{_fmt(self.lo)}, {_fmt(self.hi)})")
                wall = self._plane_passed(i)
                if wall is None:
                    what += " (outflow = 'error'; use outflow = 'delete' to remove such bodies)"
                else:
                    what += (f" through the plane uid {int(st.uid[wall])} (point "
                             f"{_fmt(st.position[wall])}, normal {_fmt(st.params[wall, :3])}) at"
                             f" speed {float(np.linalg.norm(st.velocity[i])):.6g}: the body's "
                             "overlap with the plane grew beyond its size, i.e. the contact is "
                             "too soft for the body's speed or load; use a stiffer material "
                             "(a larger stiffness or a shorter collision_time, with a dt to "
                             "match) or lower speeds")
            return f"body uid {uid} at step {step}: {what}", uid
        return None, 0

    def _lowest_bad(self) -> tuple[int, int]:
        """(slot, cause) of the owned body with the lowest uid among those that fail the state
        check (as :func:`parsim.integrator.check_state`: 1 non-finite, 2 outside the domain),
        so that the error names the same body on any number of ranks (the kernels stop at the
        first slot, and slot order depends on the blocks). Runs only on an error."""
        st = self.st
        n = st.n_owned
        pos, vel, w = st.position[:n], st.velocity[:n], st.angular_velocity[:n]
        bad_value = ~(np.isfinite(pos) & np.isfinite(vel) & np.isfinite(w)).all(axis=1)
        walls = self._checked_walls()
        with np.errstate(invalid="ignore"):
            out = (walls & ((pos < self.lo) | (pos >= self.hi))).any(axis=1)
        out &= ((st.flags[:n] & FIXED) == 0) & ~bad_value
        bad = np.flatnonzero(bad_value | out)
        i = int(bad[np.argmin(st.uid[bad])])
        return i, 1 if bad_value[i] else 2

    def _plane_passed(self, i: int) -> int | None:
        """Slot of a plane whose solid side holds the centre of owned body ``i`` (the body
        went through it), or None."""
        st = self.st
        planes = np.flatnonzero(st.shape[: st.n_owned] == PLANE)
        if planes.size == 0:
            return None
        behind = ((st.position[i] - st.position[planes]) * st.params[planes, :3]).sum(axis=1)
        k = int(np.argmin(behind))
        return int(planes[k]) if behind[k] < 0.0 else None

    def run(self, steps: int, callback=None, every: int = 0) -> None:
        """Advance ``steps`` time steps; ``callback(sim)`` is called after every step whose
        number (``step_count``) is a multiple of ``every`` (an integer >= 1, required with a
        callback and only with one)."""
        steps = _count(steps, "steps", 0)
        if callback is None:
            if every:
                raise ValueError(f"every = {every!r} without a callback does nothing; pass "
                                 "callback=f (called as f(sim)) or leave every out")
            self._advance(steps)
            return
        if not callable(callback):
            raise ValueError(f"callback must be callable as callback(sim), got {callback!r}")
        every = _count(every, "every (the steps between two callback calls)", 1)
        end = self.step_count + steps
        while self.step_count < end:
            # to the next multiple of ``every`` (as one step at a time would call it)
            self._advance(min(end, (self.step_count // every + 1) * every) - self.step_count)
            if self.step_count % every == 0:
                callback(self)


def _mass_properties(shape: int, params: np.ndarray, density: float):
    """Vectorised mass and principal moments of n bodies of one shape."""
    n = params.shape[0]
    if shape == PLANE:
        return np.zeros(n), np.zeros((n, 3))
    if shape == SPHERE:
        r = params[:, 0]
        m = density * 4.0 / 3.0 * math.pi * r**3
        return m, np.repeat((0.4 * m * r * r)[:, None], 3, axis=1)
    if shape == BOX:
        a, b, c = params[:, 0], params[:, 1], params[:, 2]
        m = density * 8.0 * a * b * c
        return m, np.stack([b * b + c * c, a * a + c * c, a * a + b * b], axis=1) * (m / 3.0)[:, None]
    r, h = params[:, 0], params[:, 1]
    m_cyl = density * math.pi * r * r * 2.0 * h
    m_sph = density * 4.0 / 3.0 * math.pi * r**3
    axial = m_cyl * r * r / 2.0 + m_sph * 0.4 * r * r
    transverse = (m_cyl * ((2.0 * h) ** 2 / 12.0 + r * r / 4.0)
                  + m_sph * (0.4 * r * r + h * h + 0.75 * h * r))
    return m_cyl + m_sph, np.stack([axial, transverse, transverse], axis=1)
