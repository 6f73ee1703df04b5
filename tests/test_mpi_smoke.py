"""Smoke tests of the parallel bookkeeping: distributed broad-phase queries and the demo.

The MPI tests run under ``mpiexec -n 2`` and ``-n 4`` (``scripts/run_tests.sh``). Each test does
all its communication before it asserts, so every rank sees the same data and fails alike; a
failure on one rank only still ends the session, because the MPI sessions run ``pytest -x``
under ``python -m mpi4py`` (the failing rank exits non-zero, which aborts the job).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import parsim.broadphase
from parsim import demo
from parsim.cli import main
from mpi_wait import quiet_bcast

STRUCTURES = ["HierarchicalHashGrid", "BruteForce"]


# ---- references computed with numpy over the whole set -----------------------------------------

def overlap_matrix(lo_a, hi_a, lo_b, hi_b) -> np.ndarray:
    """bool[n_a, n_b]: closed AABB overlap."""
    return np.all((lo_a[:, None, :] <= hi_b[None, :, :]) & (lo_b[None, :, :] <= hi_a[:, None, :]),
                  axis=2)


def brute_force_pairs(ids, lo, hi) -> set[tuple[int, int]]:
    i, j = np.nonzero(np.triu(overlap_matrix(lo, hi, lo, hi), k=1))
    a, b = ids[i], ids[j]
    return set(zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist()))


def demo_bodies(seed, n_bodies, steps):
    """AABBs of every demo body after ``steps`` steps, replayed serially on the whole set."""
    length = demo.box_length(n_bodies)
    uid = np.arange(n_bodies, dtype=np.int64)
    position, half_extent = demo.initial_bodies(seed, uid, length)
    for step in range(1, steps + 1):
        position = demo.random_walk(seed, uid, step, position, length)
    return uid, position - half_extent, position + half_extent


def random_boxes(rng, n, length=20.0):
    """Polydisperse boxes in [0, length]^3 (half-extents 0.1 .. 2, log-uniform, per axis)."""
    centre = rng.uniform(0.0, length, size=(n, 3))
    half = 0.1 * 20.0 ** rng.uniform(0.0, 1.0, size=(n, 3))
    return centre - half, centre + half


# ---- MPI tests ---------------------------------------------------------------------------------

@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", STRUCTURES)
def test_distributed_query_box_matches_brute_force(comm, rng, name):
    """Each rank holds a different subset (added, moved, partly removed); the union of all
    ranks' ``query_box`` answers equals the numpy answer over the whole set."""
    n = 3000
    lo, hi = random_boxes(rng, n)
    shift = rng.uniform(-0.5, 0.5, size=(n, 3))
    ids = np.arange(n, dtype=np.int64)
    mine = ids % comm.size == comm.rank
    removed = ids % 7 == 3

    bp = getattr(parsim.broadphase, name)()
    bp.add(ids[mine], lo[mine], hi[mine])
    lo, hi = lo + shift, hi + shift
    bp.update(ids[mine], lo[mine], hi[mine])
    bp.remove(ids[mine & removed])
    present = ~removed

    q_centre = rng.uniform(-2.0, 22.0, size=(40, 3))
    q_half = rng.uniform(0.0, 4.0, size=(40, 3))
    queries = [(c - h, c + h) for c, h in zip(q_centre, q_half)]
    queries += [(np.full(3, -50.0), np.full(3, 50.0)),   # everything
                (np.full(3, 30.0), np.full(3, 31.0))]    # nothing
    local_answers = [bp.query_box(q_lo, q_hi) for q_lo, q_hi in queries]
    local_pairs = bp.pairs()
    gathered = comm.allgather(local_answers)
    sizes = comm.allgather(len(bp))

    assert sum(sizes) == int(present.sum())
    held = present & mine
    assert brute_force_pairs(ids[held], lo[held], hi[held]) == set(map(tuple, local_pairs.tolist()))
    for k, (q_lo, q_hi) in enumerate(queries):
        answers = [ranks_answers[k] for ranks_answers in gathered]
        union = np.sort(np.concatenate(answers))
        expected = ids[present & overlap_matrix(lo, hi, q_lo[None], q_hi[None])[:, 0]]
        assert np.array_equal(union, expected), f"query {k}"
        assert all(np.all(np.diff(a) > 0) for a in answers), "answers must be sorted and unique"
    assert gathered[0][-2].size == sizes[0]  # the box over everything finds every body


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("name", STRUCTURES)
def test_demo_same_on_every_rank_and_equal_to_brute_force(comm, name):
    """The demo's global pair counts are the same on every rank, equal a serial run of the same
    bodies step by step, and at the end equal the numpy count over all bodies."""
    bodies_per_rank, steps, seed = 400, 6, 11
    result = demo.run_demo(comm, bodies_per_rank, steps, name, seed)
    everyone = comm.allgather(result["pairs"])
    n_bodies = bodies_per_rank * comm.size
    serial = demo.run_demo(None, n_bodies, steps, name, seed) if comm.rank == 0 else None
    serial = quiet_bcast(comm, serial)      # the others sleep while rank 0 runs alone
    if comm.rank == 0:
        uid, lo, hi = demo_bodies(seed, n_bodies, steps)
        expected_final = len(brute_force_pairs(uid, lo, hi))
    else:
        expected_final = None
    expected_final = quiet_bcast(comm, expected_final)

    assert all(pairs == result["pairs"] for pairs in everyone)
    assert result["pairs"] == serial["pairs"]
    assert result["pairs"][-1] == expected_final
    assert result["owned"] == [n_bodies] * (steps + 1)
    assert sum(result["owned_per_rank"]) == n_bodies
    # the parallel paths were exercised, not only the local ones
    assert sum(result["migrations"]) > 0
    assert min(result["shadows"]) > 0
    assert serial["shadows"] == [0] * (steps + 1)


# ---- serial tests (the MPI sessions skip them) -------------------------------------------------

def test_demo_serial_matches_brute_force():
    seed, n_bodies, steps = 3, 600, 4
    result = demo.run_demo(None, n_bodies, steps, "BruteForce", seed)
    expected = [len(brute_force_pairs(*demo_bodies(seed, n_bodies, s))) for s in range(steps + 1)]
    assert result["pairs"] == expected
    assert result["ranks"] == 1 and result["migrations"] == [0] * (steps + 1)


def test_uniform_is_a_function_of_seed_uid_step():
    uid = np.arange(1000, dtype=np.int64)
    u = demo.uniform(5, uid, 2, 0)
    assert np.array_equal(u[::-1], demo.uniform(5, uid[::-1], 2, 0))
    assert np.array_equal(u[10:20], demo.uniform(5, uid[10:20], 2, 0))
    assert not np.array_equal(u, demo.uniform(5, uid, 3, 0))
    assert not np.array_equal(u, demo.uniform(6, uid, 2, 0))
    assert 0.0 <= u.min() and u.max() < 1.0 and abs(u.mean() - 0.5) < 0.05


def test_demo_rejects_slabs_thinner_than_a_body():
    with pytest.raises(ValueError, match="thinner than the largest body"):
        demo.check_arguments(1, 64, 1, 0, "BruteForce")
    with pytest.raises(ValueError, match="unknown broad-phase structure"):
        demo.check_arguments(100, 1, 1, 0, "NoSuchGrid")


def test_cli_demo_prints_table(capsys):
    assert main(["demo", "--bodies-per-rank", "300", "--steps", "3", "--structure",
                 "BruteForce", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "300 bodies on 1 rank(s), structure BruteForce" in out
    assert "check: 300 bodies owned exactly once" in out


@pytest.mark.mpi(min_size=2)
def test_first_error_and_max_agrees_on_every_rank(comm):
    """The per-step check's reduction (one Sendrecv on two ranks, an Allreduce on more): every
    rank gets the largest value and the message of the smallest key (then of the lowest
    rank); a NaN counts as inf (MPI's MAX of a NaN may differ from rank to rank)."""
    from parsim.comm import Net

    net = Net(comm)
    r, p = comm.Get_rank(), comm.Get_size()
    got = [net.first_error_and_max(None, float(10 * ((r + 1) % p) + 0.5))]
    got.append(net.first_error_and_max("bad" if r >= 1 else None, -1.0 - r, key=100 - r))
    got.append(net.first_error_and_max("odd" if r % 2 == 0 else None, float(r), key=7))
    nan = net.first_error_and_max(None, math.nan if r == p - 1 else 1.0)
    every = comm.allgather((got, nan))
    assert all(e == every[0] for e in every), every
    assert got[0] == (None, 10.0 * (p - 1) + 0.5)
    assert got[1] == (f"bad [rank {p - 1}]", -1.0)
    assert got[2] == ("odd", float(p - 1))
    assert nan == (None, math.inf)


@pytest.mark.mpi(min_size=2)
def test_quiet_barrier_waits_asleep(comm):
    """``Net.quiet_barrier`` (the other ranks' wait while rank 0 compiles the kernels of a run) is
    a barrier: no rank leaves before rank 0, 0.5 s late, arrives; and the waiting ranks sleep:
    they use a small part of the wait in CPU time (a polling ``Barrier`` spins: on 2 ranks the
    waiting one used about the whole 0.5 s)."""
    import time

    from parsim.comm import Net

    net = Net(comm)
    comm.Barrier()
    if comm.rank == 0:
        time.sleep(0.5)
    t0, c0 = time.perf_counter(), time.process_time()
    net.quiet_barrier()
    waited, cpu = time.perf_counter() - t0, time.process_time() - c0
    got = comm.allgather((waited, cpu))
    assert all(w > 0.4 and c < 0.1 for w, c in got[1:]), got
