"""parsim sets MPICH's tuning variables before MPI starts (see parsim.comm.MPICH_DEFAULTS: the
single-copy threshold, the shared-memory queue's cell size with its pack buffers), and leaves a
group alone when the user set any of MPICH's names for it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from parsim.comm import CMA_THRESHOLD, IQUEUE_CELL, MPICH_DEFAULTS, PACK_BUFFER, _shm_free

ALL_NAMES = tuple(n for names, _, _ in MPICH_DEFAULTS for n in names)


def _seen(env: dict, *names: str) -> list[str]:
    code = f"import os, parsim; print(*[os.environ.get(n, 'unset') for n in {list(names)!r}])"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.split()


def _clean() -> dict:
    """This environment without MPICH's names and without a launcher's rank count (one rank)."""
    return {k: v for k, v in os.environ.items()
            if k not in ALL_NAMES + ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE",
                                     "MPI_LOCALNRANKS", "SLURM_NTASKS")}


def _ranks(n: int) -> dict:
    """The clean environment of a rank of an n-rank job started by MPICH's mpiexec."""
    return dict(_clean(), PMI_SIZE=str(n))


def _applied(group, shm) -> list[str]:
    """What importing parsim in a rank of a 2-rank job sets for ``group`` when the user set
    none of it (a group that needs /dev/shm: only where two ranks' share is free)."""
    return [v if _shm_free() >= 2 * shm else "unset" for _, v in group]


def test_import_sets_every_group_when_unset():
    assert {CMA_THRESHOLD, IQUEUE_CELL, PACK_BUFFER} <= {
        s for _, group, _ in MPICH_DEFAULTS for s in group}
    for _, group, shm in MPICH_DEFAULTS:
        assert _seen(_ranks(2), *[n for n, _ in group]) == _applied(group, shm)


def test_a_serial_process_leaves_the_cells_to_the_ranks_it_may_launch():
    """A process that is not a rank of a job of several (a benchmark script that starts
    mpiexec itself) does not choose the cells for them: each rank does, knowing the job's
    size."""
    assert _seen(_clean(), IQUEUE_CELL[0], PACK_BUFFER[0], CMA_THRESHOLD[0]) == [
        "unset", "unset", CMA_THRESHOLD[1]]


def test_cells_fit_the_pack_buffers():
    """MPICH aborts at start-up when its pack buffers are smaller than a queue cell."""
    assert int(PACK_BUFFER[1]) >= int(IQUEUE_CELL[1])


def test_no_cells_without_room_in_dev_shm():
    """A job whose ranks would not fit their queue cells into /dev/shm keeps MPICH's cells
    (a container's /dev/shm holds 64 MB by default); the other settings still apply."""
    assert _seen(_ranks(10**9), IQUEUE_CELL[0], PACK_BUFFER[0], CMA_THRESHOLD[0]) == [
        "unset", "unset", CMA_THRESHOLD[1]]


@pytest.mark.parametrize("name", ALL_NAMES)
def test_a_value_the_user_set_keeps_its_group_alone(name):
    """Under MPICH's other names too (MPICH would let parsim's MPIR_CVAR_ value win over them);
    the other groups are still set."""
    env = dict(_ranks(2), **{name: "4096"})
    for names, group, shm in MPICH_DEFAULTS:
        got = _seen(env, *[n for n, _ in group], name)
        assert got[-1] == "4096"
        if name in names:
            assert got[:-1] == ["4096" if n == name else "unset" for n, _ in group]
        else:
            assert got[:-1] == _applied(group, shm)
