"""The broad-phase demo: a miniature of the parallel engine's bookkeeping, without the physics.

The domain ``[0, L]^3`` is cut into slabs along x, one per rank. Bodies are polydisperse spheres
and axis-aligned boxes, known to the broad phase by their AABBs and global uids. Every step, each
rank

1. moves its owned bodies by a small random walk (reflecting walls at 0 and L);
2. migrates the bodies whose centre left its slab to the neighbour slab (the owner changes);
3. sends shadow copies of its owned bodies whose AABB reaches into a neighbour's slab to that
   neighbour, and receives the neighbours' shadows;
4. brings its broad-phase structure up to date (owned + shadows: remove / update / add by uid);
5. asks the structure for overlapping pairs and counts the ones it is responsible for.

Counting rule. A pair is counted by the rank whose slab contains ``x* = max(lo_i.x, lo_j.x)``,
the lower x edge of the two AABBs' intersection. ``x*`` lies inside both AABBs, and each body is
present (owned or shadow) on every rank whose slab its AABB touches, so that rank holds both
bodies; and exactly one slab contains ``x*``. The global sum is therefore the serial pair count,
whatever the number of ranks. (Counting on "the owner of the smaller uid" would miss pairs whose
overlap lies wholly in the other body's slab: that owner need not hold the other body.)

Random numbers are a function of ``(seed, uid, step)`` (a counter-based hash, no rank-local
stream), and the box length depends on the total body count only, so ``run_demo(None, 2 * n, ...)``
and ``run_demo(comm_of_2_ranks, n, ...)`` simulate exactly the same bodies and report the same
pair counts every step.

Communication uses contiguous numpy buffers only (``Sendrecv`` of counts, then of packed body
records as bytes; ``Allreduce`` of per-step statistics). It imports mpi4py lazily, like
:mod:`parsim.comm`: ``comm=None`` runs serially without MPI.

Limits. Shadows are exchanged with the two neighbour slabs only, so a slab must be at least as wide
as the largest body half-extent (:data:`HALF_EXTENT_MAX`); :func:`run_demo` refuses thinner slabs.
The initial placement generates every uid on every rank and keeps the ones in its slab (O(total
bodies) once, in chunks): fine for a demo; the engine's configs build their bodies rank-locally (``docs/configs.md``).
"""

from __future__ import annotations

import math
import sys
import time
import traceback

import numpy as np

from .randoms import uniform  # counter-based: u(seed, uid, step, stream) in [0, 1)

# ---- body population (all lengths in the same arbitrary unit) ---------------------------------
HALF_EXTENT_MIN = 0.5   #: smallest sphere radius / box size parameter
HALF_EXTENT_MAX = 2.0   #: largest half-extent of any body along any axis
NUMBER_DENSITY = 0.03   #: bodies per unit volume; sets L from the total body count
STEP_LENGTH = 0.25      #: largest displacement per axis per step of the random walk

PHASES = ("move", "migrate", "shadows", "structure", "pairs")

# A body in transit (migration or shadow copy): one record, sent as bytes.
BODY_RECORD = np.dtype([("uid", np.int64), ("position", np.float64, (3,)),
                        ("half_extent", np.float64, (3,))])

# Hash streams: which random number of a body a draw is.
_STREAM_POSITION = (0, 1, 2)
_STREAM_SIZE = 3
_STREAM_KIND = 4
_STREAM_ASPECT = (5, 6, 7)
_CHUNK = 1 << 20  # uids generated at once during the initial placement


# ------------------------------------------------------------------------------------------------
# the model: where bodies are, how big they are, how they move
# ------------------------------------------------------------------------------------------------

def box_length(n_bodies: int) -> float:
    """Edge length L of the cubic domain holding ``n_bodies`` at :data:`NUMBER_DENSITY`."""
    return (n_bodies / NUMBER_DENSITY) ** (1.0 / 3.0)


def initial_bodies(seed: int, uid: np.ndarray, length: float) -> tuple[np.ndarray, np.ndarray]:
    """Initial centres and AABB half-extents of the bodies ``uid``.

    Half the bodies are spheres (equal half-extents, log-uniform radius in
    [:data:`HALF_EXTENT_MIN`, :data:`HALF_EXTENT_MAX`]), half are axis-aligned boxes whose
    half-extents are 50-100 % of such a radius per axis.

    Returns
    -------
    position : float64[n, 3]
        Uniform in ``[0, length]^3``.
    half_extent : float64[n, 3]
    """
    uid = np.asarray(uid, dtype=np.int64)
    position = np.stack([uniform(seed, uid, 0, s) for s in _STREAM_POSITION], axis=1) * length
    ratio = HALF_EXTENT_MAX / HALF_EXTENT_MIN
    radius = HALF_EXTENT_MIN * ratio ** uniform(seed, uid, 0, _STREAM_SIZE)
    is_box = uniform(seed, uid, 0, _STREAM_KIND) < 0.5
    aspect = np.stack([uniform(seed, uid, 0, s) for s in _STREAM_ASPECT], axis=1)
    scale = np.where(is_box[:, None], 0.5 + 0.5 * aspect, 1.0)
    return position, radius[:, None] * scale


def random_walk(seed: int, uid: np.ndarray, step: int, position: np.ndarray,
                length: float) -> np.ndarray:
    """Centres after step ``step`` (>= 1): a uniform jump of up to :data:`STEP_LENGTH` per axis,
    reflected at the walls 0 and ``length``. Pure function of ``(seed, uid, step, position)``."""
    jump = np.stack([uniform(seed, uid, step, s) for s in _STREAM_POSITION], axis=1)
    moved = position + (2.0 * jump - 1.0) * STEP_LENGTH
    moved = np.where(moved < 0.0, -moved, moved)
    return np.where(moved > length, 2.0 * length - moved, moved)


def structure_names() -> list[str]:
    """Names of the broad-phase structures :func:`make_structure` knows."""
    from . import broadphase

    return [n for n in broadphase.__all__ if n not in ("BroadPhase", "BroadPhaseError")]


def make_structure(name: str):
    """A new, empty broad-phase structure: the class ``name`` of :mod:`parsim.broadphase`.

    There is no fallback: if that class's module is missing, this raises.
    """
    from . import broadphase

    if name not in structure_names():
        raise ValueError(f"unknown broad-phase structure {name!r}; choose one of "
                         f"{', '.join(structure_names())}")
    return getattr(broadphase, name)()


# ------------------------------------------------------------------------------------------------
# the slab decomposition
# ------------------------------------------------------------------------------------------------

class _Slabs:
    """Slab ``r`` is ``[r * width, (r + 1) * width)`` along x; outside ``[0, L]`` clips to the ends."""

    def __init__(self, length: float, n_ranks: int):
        self.length = length
        self.n_ranks = n_ranks
        self.width = length / n_ranks

    def of(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.floor(x / self.width), 0, self.n_ranks - 1).astype(np.int64)


class _Neighbours:
    """Point-to-point exchange with the slabs left and right of this rank (none when serial)."""

    def __init__(self, comm):
        self.comm = comm
        if comm is None or comm.size == 1:
            self.left = self.right = None
            return
        from mpi4py import MPI

        self.left = comm.rank - 1 if comm.rank > 0 else MPI.PROC_NULL
        self.right = comm.rank + 1 if comm.rank < comm.size - 1 else MPI.PROC_NULL

    def exchange(self, to_left: np.ndarray, to_right: np.ndarray, tag: int) -> np.ndarray:
        """Send ``BODY_RECORD`` arrays left and right; return what the neighbours sent here."""
        if self.left is None:
            return np.empty(0, dtype=BODY_RECORD)
        from mpi4py import MPI

        comm = self.comm
        count_from_right = np.zeros(1, dtype=np.int64)
        count_from_left = np.zeros(1, dtype=np.int64)
        comm.Sendrecv(np.array([to_left.size], dtype=np.int64), dest=self.left, sendtag=tag,
                      recvbuf=count_from_right, source=self.right, recvtag=tag)
        comm.Sendrecv(np.array([to_right.size], dtype=np.int64), dest=self.right, sendtag=tag + 1,
                      recvbuf=count_from_left, source=self.left, recvtag=tag + 1)
        from_right = np.empty(int(count_from_right[0]), dtype=BODY_RECORD)
        from_left = np.empty(int(count_from_left[0]), dtype=BODY_RECORD)
        comm.Sendrecv([_as_bytes(to_left), MPI.BYTE], dest=self.left, sendtag=tag + 2,
                      recvbuf=[_as_bytes(from_right), MPI.BYTE], source=self.right, recvtag=tag + 2)
        comm.Sendrecv([_as_bytes(to_right), MPI.BYTE], dest=self.right, sendtag=tag + 3,
                      recvbuf=[_as_bytes(from_left), MPI.BYTE], source=self.left, recvtag=tag + 3)
        return np.concatenate([from_left, from_right])


def _as_bytes(records: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(records).view(np.uint8)


def _records(uid, position, half_extent) -> np.ndarray:
    out = np.empty(uid.shape[0], dtype=BODY_RECORD)
    out["uid"] = uid
    out["position"] = position
    out["half_extent"] = half_extent
    return out


class _Bodies:
    """Struct of arrays: ``uid`` int64[n], ``position`` float64[n, 3], ``half_extent`` float64[n, 3]."""

    def __init__(self, uid, position, half_extent):
        self.uid = np.ascontiguousarray(uid, dtype=np.int64)
        self.position = np.ascontiguousarray(position, dtype=np.float64)
        self.half_extent = np.ascontiguousarray(half_extent, dtype=np.float64)

    @classmethod
    def from_records(cls, records: np.ndarray) -> "_Bodies":
        return cls(records["uid"], records["position"], records["half_extent"])

    def records(self, mask: np.ndarray) -> np.ndarray:
        return _records(self.uid[mask], self.position[mask], self.half_extent[mask])

    def select(self, mask: np.ndarray) -> "_Bodies":
        return _Bodies(self.uid[mask], self.position[mask], self.half_extent[mask])

    def append(self, other: "_Bodies") -> "_Bodies":
        return _Bodies(np.concatenate([self.uid, other.uid]),
                       np.concatenate([self.position, other.position]),
                       np.concatenate([self.half_extent, other.half_extent]))

    def __len__(self) -> int:
        return self.uid.shape[0]


class _Local:
    """What the broad-phase structure holds on this rank, sorted by uid (owned + shadows)."""

    def __init__(self):
        self.uid = np.empty(0, dtype=np.int64)
        self.lo = np.empty((0, 3))
        self.hi = np.empty((0, 3))

    def sync(self, structure, bodies: _Bodies) -> None:
        """Make ``structure`` hold exactly ``bodies`` (remove / update / add by uid)."""
        order = np.argsort(bodies.uid, kind="stable")
        uid = bodies.uid[order]
        lo = bodies.position[order] - bodies.half_extent[order]
        hi = bodies.position[order] + bodies.half_extent[order]
        kept = np.isin(uid, self.uid, assume_unique=True)
        gone = ~np.isin(self.uid, uid, assume_unique=True)
        structure.remove(self.uid[gone])
        structure.update(uid[kept], lo[kept], hi[kept])
        structure.add(uid[~kept], lo[~kept], hi[~kept])
        self.uid, self.lo, self.hi = uid, lo, hi

    def lower_x(self, ids: np.ndarray) -> np.ndarray:
        return self.lo[np.searchsorted(self.uid, ids), 0]


# ------------------------------------------------------------------------------------------------
# the demo
# ------------------------------------------------------------------------------------------------

def check_arguments(bodies_per_rank: int, n_ranks: int, steps: int, seed: int,
                    structure: str) -> None:
    """Raise ValueError (naming the fix) if :func:`run_demo` cannot run with these arguments."""
    if structure not in structure_names():
        raise ValueError(f"unknown broad-phase structure {structure!r}; choose one of "
                         f"{', '.join(structure_names())}")
    if bodies_per_rank < 1 or steps < 0 or seed < 0:
        raise ValueError(f"need bodies-per-rank >= 1, steps >= 0 and seed >= 0; got "
                         f"{bodies_per_rank}, {steps} and {seed}")
    width = box_length(bodies_per_rank * n_ranks) / n_ranks
    if width < HALF_EXTENT_MAX:
        raise ValueError(
            f"slabs of width {width:.3g} on {n_ranks} ranks are thinner than the largest body "
            f"half-extent {HALF_EXTENT_MAX}, so shadows would have to skip a neighbour; use more "
            "bodies per rank or fewer ranks"
        )


def run_demo(comm, bodies_per_rank: int, steps: int, structure: str = "HierarchicalHashGrid",
             seed: int = 0) -> dict:
    """Run the slab-decomposed broad-phase demo; collective over ``comm`` (``None``: serial).

    Parameters
    ----------
    comm : mpi4py.MPI.Comm or None
        Ranks taking part, one slab each. ``None`` runs on one process without MPI.
    bodies_per_rank : int
        The run has ``bodies_per_rank * ranks`` bodies (uids ``0 .. n - 1``).
    steps : int
        Random-walk steps after the initial placement (>= 0).
    structure : str
        Class name in :mod:`parsim.broadphase` (e.g. ``"HierarchicalHashGrid"``, ``"BruteForce"``).
    seed : int
        Seed of the counter-based random numbers (>= 0).

    Returns
    -------
    dict
        The same on every rank. Per-step lists have ``steps + 1`` entries, entry 0 being the
        initial placement: ``pairs`` (overlapping AABB pairs in the whole domain), ``owned`` and
        ``shadows`` (summed over ranks), ``migrations`` (bodies that changed owner),
        ``step_time`` (seconds, slowest rank). Also ``warm_up_time`` (seconds spent compiling or
        loading the structure's kernels before the run, slowest rank), ``phase_time`` (seconds per phase summed
        over steps, slowest rank), ``owned_per_rank``, ``ranks``, ``bodies``,
        ``bodies_per_rank``, ``steps``, ``structure``, ``seed``, ``box_length``,
        ``slab_width``.

    Raises
    ------
    ValueError
        On bad arguments, or slabs thinner than :data:`HALF_EXTENT_MAX` (too many ranks for
        the body count); raised on every rank alike.
    RuntimeError
        If the final check (body count, uid checksum, queries) fails on any rank.
    """
    rank, n_ranks = (0, 1) if comm is None else (comm.rank, comm.size)
    check_arguments(bodies_per_rank, n_ranks, steps, seed, structure)
    n_bodies = bodies_per_rank * n_ranks
    length = box_length(n_bodies)
    slabs = _Slabs(length, n_ranks)
    t0 = time.perf_counter()
    _warm_up(comm, structure)
    warm_up_time = time.perf_counter() - t0

    bp = make_structure(structure)
    neighbours = _Neighbours(comm)
    local = _Local()

    t0 = time.perf_counter()
    owned = _initial_placement(seed, n_bodies, length, slabs, rank)
    shadows = _refresh_shadows(owned, slabs, rank, neighbours)
    local.sync(bp, owned.append(shadows))
    counted = _count_pairs(bp, local, slabs, rank)
    setup_time = time.perf_counter() - t0

    stats = np.zeros((steps + 1, 4), dtype=np.int64)  # owned, shadows, pairs, migrations
    times = np.zeros((steps + 1, len(PHASES)))
    stats[0] = len(owned), len(shadows), counted, 0
    times[0, 0] = setup_time  # reported as the setup row's total; phase sums skip row 0
    for step in range(1, steps + 1):
        clock = time.perf_counter()
        phase_time = times[step]

        owned.position = random_walk(seed, owned.uid, step, owned.position, length)
        clock = _lap(phase_time, 0, clock)

        owned, migrated = _migrate(owned, slabs, rank, neighbours)
        clock = _lap(phase_time, 1, clock)

        shadows = _refresh_shadows(owned, slabs, rank, neighbours)
        clock = _lap(phase_time, 2, clock)

        local.sync(bp, owned.append(shadows))
        clock = _lap(phase_time, 3, clock)

        counted = _count_pairs(bp, local, slabs, rank)
        _lap(phase_time, 4, clock)
        stats[step] = len(owned), len(shadows), counted, migrated

    step_time = np.append(times.sum(axis=1), warm_up_time)
    phase_total = times[1:].sum(axis=0)
    if comm is not None:
        from mpi4py import MPI

        comm.Allreduce(MPI.IN_PLACE, stats, op=MPI.SUM)
        comm.Allreduce(MPI.IN_PLACE, step_time, op=MPI.MAX)
        comm.Allreduce(MPI.IN_PLACE, phase_total, op=MPI.MAX)
        owned_per_rank = np.zeros(n_ranks, dtype=np.int64)
        comm.Allgather(np.array([len(owned)], dtype=np.int64), owned_per_rank)
    else:
        owned_per_rank = np.array([len(owned)], dtype=np.int64)

    _final_check(comm, bp, owned, n_bodies)
    return {
        "ranks": n_ranks,
        "bodies": n_bodies,
        "bodies_per_rank": bodies_per_rank,
        "steps": steps,
        "structure": structure,
        "seed": seed,
        "box_length": length,
        "slab_width": slabs.width,
        "owned": stats[:, 0].tolist(),
        "shadows": stats[:, 1].tolist(),
        "pairs": stats[:, 2].tolist(),
        "migrations": stats[:, 3].tolist(),
        "step_time": step_time[:-1].tolist(),
        "warm_up_time": float(step_time[-1]),
        "phase_time": dict(zip(PHASES, phase_total.tolist())),
        "owned_per_rank": owned_per_rank.tolist(),
    }


def _warm_up(comm, structure: str) -> None:
    """Compile (or load from the numba cache) the structure's kernels before the timed run.

    Rank 0 goes first and the others wait for it, then only load (see :mod:`parsim.warmup`).
    """
    def exercise():
        bp = make_structure(structure)
        uid = np.arange(64, dtype=np.int64)
        position, half_extent = initial_bodies(0, uid, 8.0)
        bp.add(uid, position - half_extent, position + half_extent)
        position = random_walk(0, uid, 1, position, 8.0)
        bp.update(uid, position - half_extent, position + half_extent)
        bp.remove(uid[::4])
        bp.pairs()
        bp.query_box(position[1] - half_extent[1], position[1] + half_extent[1])

    if comm is None or comm.size == 1:
        exercise()
        return
    if comm.rank == 0:
        exercise()
    comm.Barrier()
    if comm.rank != 0:
        exercise()


def _lap(phase_time: np.ndarray, phase: int, start: float) -> float:
    now = time.perf_counter()
    phase_time[phase] += now - start
    return now


def _initial_placement(seed, n_bodies, length, slabs, rank) -> _Bodies:
    parts = []
    for first in range(0, n_bodies, _CHUNK):
        uid = np.arange(first, min(first + _CHUNK, n_bodies), dtype=np.int64)
        position, half_extent = initial_bodies(seed, uid, length)
        mine = slabs.of(position[:, 0]) == rank
        parts.append(_Bodies(uid[mine], position[mine], half_extent[mine]))
    owned = parts[0]
    for part in parts[1:]:
        owned = owned.append(part)
    return owned


def _migrate(owned: _Bodies, slabs: _Slabs, rank: int, neighbours: _Neighbours):
    """Hand bodies whose centre left this slab to the neighbour that now owns them.

    Before: ``owned`` holds the bodies this rank owned at the start of the step, some of which
    may have moved into a neighbour slab (at most one slab: ``STEP_LENGTH <= slab width``).
    After: every returned body's centre lies in this rank's slab. Returns (owned, number sent).
    """
    dest = slabs.of(owned.position[:, 0])
    if dest.size and np.abs(dest - rank).max() > 1:
        raise RuntimeError(f"rank {rank}: a body jumped over a whole slab in one step")
    to_left, to_right = dest < rank, dest > rank
    arrived = neighbours.exchange(owned.records(to_left), owned.records(to_right), tag=10)
    staying = owned.select(dest == rank)
    return staying.append(_Bodies.from_records(arrived)), int(to_left.sum() + to_right.sum())


def _refresh_shadows(owned: _Bodies, slabs: _Slabs, rank: int,
                     neighbours: _Neighbours) -> _Bodies:
    """Send copies of owned bodies whose AABB reaches into a neighbour slab; return the copies
    the neighbours sent here.

    Before: every owned centre lies in this slab (after :func:`_migrate`).
    After: this rank can see every body whose AABB touches its slab.
    """
    lo_slab = slabs.of(owned.position[:, 0] - owned.half_extent[:, 0])
    hi_slab = slabs.of(owned.position[:, 0] + owned.half_extent[:, 0])
    if lo_slab.size and (lo_slab.min() < rank - 1 or hi_slab.max() > rank + 1):
        raise RuntimeError(f"rank {rank}: a body's AABB spans more than the neighbour slabs")
    received = neighbours.exchange(owned.records(lo_slab < rank), owned.records(hi_slab > rank),
                                   tag=20)
    return _Bodies.from_records(received)


def _count_pairs(bp, local: _Local, slabs: _Slabs, rank: int) -> int:
    """Pairs this rank is responsible for: those whose ``max(lo_i.x, lo_j.x)`` is in its slab."""
    pairs = bp.pairs()
    if pairs.shape[0] == 0:
        return 0
    x_star = np.maximum(local.lower_x(pairs[:, 0]), local.lower_x(pairs[:, 1]))
    return int(np.count_nonzero(slabs.of(x_star) == rank))


def _final_check(comm, bp, owned: _Bodies, n_bodies: int) -> None:
    """Cheap end-of-run invariants, agreed on by all ranks before anyone raises.

    Every uid ``0 .. n_bodies - 1`` is owned exactly once (count and uid sum), and the structure
    finds a few owned bodies by a query over their own AABB.
    """
    sample = np.arange(0, len(owned), max(1, len(owned) // 8))[:8]
    lo = owned.position[sample] - owned.half_extent[sample]
    hi = owned.position[sample] + owned.half_extent[sample]
    queries_ok = all(uid in bp.query_box(lo[k], hi[k]) for k, uid in enumerate(owned.uid[sample]))
    local = np.array([len(owned), int(owned.uid.sum()), 0 if queries_ok else 1], dtype=np.int64)
    if comm is not None:
        from mpi4py import MPI

        comm.Allreduce(MPI.IN_PLACE, local, op=MPI.SUM)
    count, uid_sum, failed_queries = (int(v) for v in local)
    expected_sum = n_bodies * (n_bodies - 1) // 2
    if count != n_bodies or uid_sum != expected_sum or failed_queries:
        raise RuntimeError(
            f"demo check failed: {count} bodies owned (expected {n_bodies}), uid sum {uid_sum} "
            f"(expected {expected_sum}), {failed_queries} rank(s) whose structure missed an "
            "owned body in query_box"
        )


# ------------------------------------------------------------------------------------------------
# report and command
# ------------------------------------------------------------------------------------------------

def format_report(result: dict, max_rows: int = 25) -> str:
    """The demo's result as a small text table (at most ``max_rows`` step rows) and a summary."""
    steps = result["steps"]
    stride = max(1, math.ceil((steps + 1) / max_rows))
    rows = sorted(set(range(0, steps + 1, stride)) | {steps})
    lines = [
        f"parsim demo: {result['bodies']} bodies on {result['ranks']} rank(s), "
        f"structure {result['structure']}, seed {result['seed']}",
        f"domain [0, {result['box_length']:.2f}]^3, slabs along x of width "
        f"{result['slab_width']:.2f}; owned per rank at the end: "
        f"{', '.join(map(str, result['owned_per_rank']))}",
        f"kernels compiled or loaded before the run in {result['warm_up_time']:.2f} s",
        "",
        f"{'step':>6} {'time [ms]':>10} {'owned':>9} {'shadows':>9} {'pairs':>10} {'migrated':>9}",
    ]
    for s in rows:
        label = "setup" if s == 0 else str(s)
        lines.append(
            f"{label:>6} {1e3 * result['step_time'][s]:>10.2f} {result['owned'][s]:>9} "
            f"{result['shadows'][s]:>9} {result['pairs'][s]:>10} {result['migrations'][s]:>9}"
        )
    if len(rows) < steps + 1:
        lines.append(f"({len(rows)} of {steps + 1} rows shown)")
    if steps:
        per_step = {k: 1e3 * v / steps for k, v in result["phase_time"].items()}
        mean = sum(result["step_time"][1:]) / steps
        lines += [
            "",
            f"mean step {1e3 * mean:.2f} ms (slowest rank); per phase: "
            + ", ".join(f"{k} {v:.2f}" for k, v in per_step.items()) + " ms",
            f"migrations {sum(result['migrations'])}, pairs at the end {result['pairs'][-1]}",
        ]
    lines.append(f"check: {result['bodies']} bodies owned exactly once at the end: ok")
    return "\n".join(lines)


def demo_command(bodies_per_rank: int, steps: int, structure: str, seed: int) -> int:
    """``parsim demo``: run on ``MPI.COMM_WORLD`` and print the report on rank 0.

    An exception on any rank aborts the whole MPI job (``MPI_Abort``) rather than leaving the
    other ranks waiting in a collective; ``python -m mpi4py`` gives the same guarantee for
    exceptions raised outside this function.
    """
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise SystemExit(
            f"parsim demo needs mpi4py and an MPI library ({exc}); install parsim with the "
            "'mpich' extra (pip install -e '.[mpich]') or build mpi4py against your site MPI"
        ) from exc
    comm = MPI.COMM_WORLD
    try:
        check_arguments(bodies_per_rank, comm.size, steps, seed, structure)
    except ValueError as exc:  # the same on every rank: no need to abort
        if comm.rank == 0:
            print(f"parsim demo: error: {exc}", file=sys.stderr)
        return 2
    try:
        result = run_demo(comm, bodies_per_rank, steps, structure, seed)
    except Exception:
        if comm.size > 1:
            print(f"parsim demo: rank {comm.rank} failed; aborting all ranks", file=sys.stderr)
            traceback.print_exc()
            sys.stderr.flush()
            comm.Abort(1)
        raise
    if comm.rank == 0:
        print(format_report(result), flush=True)
    return 0
