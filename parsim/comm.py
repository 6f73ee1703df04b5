"""The one layer that talks MPI: reductions and neighbour exchanges of contiguous numpy buffers.

:class:`Net` wraps an ``mpi4py`` communicator, or nothing for a serial run (then no MPI is
initialised and every call is local). Messages between neighbours are whole numpy arrays sent as
bytes (no pickling on the hot path); only the small object collectives (:meth:`Net.gather`,
:meth:`Net.allgather`, :meth:`Net.bcast`, the error messages of :meth:`Net.first_error` and the
partial sums of :meth:`Net.exact_sum`) pickle.

An exchange along one axis sends one buffer down and one up and receives what the neighbours sent
the other way. A rank that is its own neighbour (one block along a periodic axis) copies locally.
"""

from __future__ import annotations

import math
import os
import time

import numpy as np

from . import native_mpi
from .decomposition import NONE

#: message tags: 2 per axis and direction of travel, for counts and data
_TAG = 7000


def _mpich_names(cvar: str) -> tuple[str, ...]:
    """The names MPICH reads for control variable ``MPIR_CVAR_<cvar>`` (the MPIR_CVAR_ one wins
    when several are set)."""
    return tuple(f"{p}_{cvar}" for p in ("MPIR_CVAR", "MPIR_PARAM", "MPICH"))


#: MPICH (ch4) sends a message of at least this many bytes between two processes of a node by
#: a single copy (CMA: the receiver reads the sender's buffer with process_vm_readv), 8 KiB by
#: default. Measured on the 8,000-sphere gas on two ranks (2026-11-27): after such a transfer,
#: packing the next step's shadow refresh into the same buffer took 9-10 us instead of 1.5 in
#: some runs (3 of 5 in one benchmark, none of 8 later runs), and a step 209 us instead of
#: 200; the eager path was as fast or faster in every case measured. parsim raises the
#: threshold to 256 KiB, so that messages below 256 KiB (the pruned refresh of that gas: 11-70
#: kB) go through MPICH's shared-memory queue; larger ones keep the single copy.
CMA_THRESHOLD = ("MPIR_CVAR_CH4_IPC_CMA_P2P_THRESHOLD", str(256 * 1024))
CMA_THRESHOLD_NAMES = _mpich_names("CH4_IPC_CMA_P2P_THRESHOLD")

#: With the defaults of the `mpich` wheel (5.0.2), a message of more than about 8 KiB (8,100
#: bytes sent in 2.0 us, 8,200 in 3.7-5.2 us) takes a slower path through MPICH's
#: shared-memory queue than one that fits a queue cell. A Sendrecv between two ranks of the
#: 2-core host took 5.5 us for 12 kB (the 8,000-sphere gas's refresh) and 10.4 us for 40 kB
#: with the defaults, 3.1 and 4.9 us with 64 KiB cells (2026-11-28, alternated three times;
#: 8 kB and less: no change). MPICH requires its pack buffers to be at least as large as a
#: cell, so both are set together. Cost: 8 MB of shared memory per rank instead of 1 (64 cells
#: per rank) and 9 MB more resident memory per rank.
IQUEUE_CELL = ("MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE", str(64 * 1024))
PACK_BUFFER = ("MPIR_CVAR_CH4_PACK_BUFFER_SIZE", str(64 * 1024))

#: the free /dev/shm the cells need per rank of the job (8 MB measured, with a margin): a
#: container's /dev/shm is 64 MB by default, and MPICH fails when it runs out
CELL_SHM_PER_RANK = 16 * 2**20

#: parsim's MPICH settings: (names the user may have set, settings, free /dev/shm needed per
#: rank). Importing parsim applies a group when MPI is not yet initialised and the user set
#: none of its names, in this process's environment (programs it launches inherit it); other
#: MPI libraries ignore these names. A group that needs /dev/shm is applied only in a rank of
#: a job of several ranks (``launched_ranks``) for which /dev/shm has the room: a process
#: that launches ranks itself (the benchmark scripts) leaves the choice to them.
MPICH_DEFAULTS = (
    (CMA_THRESHOLD_NAMES, (CMA_THRESHOLD,), 0),
    (_mpich_names("CH4_SHM_POSIX_IQUEUE_CELL_SIZE") + _mpich_names("CH4_PACK_BUFFER_SIZE"),
     (IQUEUE_CELL, PACK_BUFFER), CELL_SHM_PER_RANK),
)


def _shm_free() -> int:
    """Bytes free in /dev/shm (0 where there is none)."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return st.f_bavail * st.f_frsize


def launched_ranks() -> int:
    """Ranks of the job according to the launcher's environment (1 without mpiexec/srun), read
    without initialising MPI."""
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                pass
    if "SLURM_NTASKS" in os.environ and "SLURM_STEP_ID" in os.environ:
        try:
            return int(os.environ["SLURM_NTASKS"])
        except ValueError:
            pass
    return 1


def _tune_mpich() -> None:
    import sys

    if "mpi4py.MPI" in sys.modules:
        return
    for names, settings, shm in MPICH_DEFAULTS:
        if any(k in os.environ for k in names):
            continue
        if shm and not 1 < launched_ranks() <= _shm_free() // shm:
            continue
        os.environ.update(settings)


_tune_mpich()


def auto_comm():
    """``MPI.COMM_WORLD`` when launched on several ranks (or when MPI is already initialised),
    else None (serial)."""
    import sys

    if launched_ranks() > 1 or "mpi4py.MPI" in sys.modules:
        from mpi4py import MPI

        if MPI.Is_initialized() or launched_ranks() > 1:
            return MPI.COMM_WORLD
    return None


class Net:
    """Communication of one rank (``comm=None``: a serial run, no MPI)."""

    def __init__(self, comm=None):
        self.comm = comm
        #: MPI handles for the kernels of :mod:`parsim.native_mpi`, or None: the per-step
        #: messages then go through mpi4py (serial runs, other MPI libraries)
        self.native = None
        if comm is None:
            self.rank, self.size = 0, 1
        else:
            from mpi4py import MPI

            self.MPI = MPI
            self.rank, self.size = comm.Get_rank(), comm.Get_size()
            native = native_mpi.handles(MPI, comm) if self.size > 1 else None
            # every rank the same way (the kernels' refresh messages carry the check values)
            if comm.allreduce(native is not None, op=MPI.LAND):
                self.native = native
        # the per-step reduction's buffers, kept (allocating them cost 0.9 of its 4.4 us on 2
        # ranks of the 2026-11-27 host)
        self._both = np.zeros(2)
        self._both_out = np.zeros(2)
        if self.size == 2:
            # on two ranks that reduction is one Sendrecv with the other rank: 1.9 us against
            # 3.4-3.8 us for MPICH's Allreduce of the same 16 bytes (2026-11-27 host)
            self._pair = ([self._both, MPI.DOUBLE], 1 - self.rank, _TAG + 300,
                          [self._both_out, MPI.DOUBLE])
        self.bytes_sent = 0
        self.messages_sent = 0

    @property
    def serial(self) -> bool:
        return self.size == 1

    # ---- reductions ----------------------------------------------------------------------------
    # scalar reductions go through one-element buffers (no pickling: they run every step)
    def _scalar(self, x, dtype, op):
        buf = np.array([x], dtype=dtype)
        out = np.empty(1, dtype=dtype)
        self.comm.Allreduce(buf, out, op=op)
        return out[0]

    def max(self, x: float) -> float:
        if self.size == 1:
            return float(x)
        return float(self._scalar(float(x), np.float64, self.MPI.MAX))

    def min(self, x: float) -> float:
        if self.size == 1:
            return float(x)
        return float(self._scalar(float(x), np.float64, self.MPI.MIN))

    def isum(self, x: int) -> int:
        if self.size == 1:
            return int(x)
        return int(self._scalar(int(x), np.int64, self.MPI.SUM))

    def exact_sum(self, values: np.ndarray) -> float:
        """Collective: the sum of every rank's finite ``values``, exact and rounded once
        (correctly), so it depends neither on how the values are spread over the ranks nor on
        their order. Each value is an integer times a power of two; per exponent the integers
        are added exactly (split in 26-bit halves, int64), and the few partial sums per rank
        are added as Python integers."""
        parts = exact_partial_sums(values)
        if self.size > 1:
            parts = [p for rank in self.comm.allgather(parts) for p in rank]
        if not parts:
            return 0.0
        low = min(e for e, _ in parts)
        total = sum(m << (e - low) for e, m in parts)
        return float(total << low) if low >= 0 else total / (1 << -low)

    def allreduce_array(self, a: np.ndarray, op: str) -> np.ndarray:
        if self.size == 1:
            return a.copy()
        out = np.empty_like(a)
        self.comm.Allreduce(a, out, op={"max": self.MPI.MAX, "min": self.MPI.MIN,
                                         "sum": self.MPI.SUM}[op])
        return out

    def first_error(self, message: str | None):
        """Collective: the message of the lowest rank that has one (None if no rank has), so
        every rank can raise the same error instead of leaving the others waiting."""
        return self.first_error_and_max(message, 0.0)[0]

    def first_error_and_max(self, message: str | None, x: float, key: int = 0):
        """Collective: :meth:`first_error` and the largest ``x`` over the ranks, in one
        reduction. With messages on several ranks, the one with the smallest ``key`` wins (then
        the lowest rank)."""
        if self.size == 1:
            return message, float(x)
        both, out = self._both, self._both_out
        both[0] = 0.0 if message is None else 1.0
        both[1] = x if x == x else math.inf  # a NaN counts as inf: MPI's MAX of NaN may differ by rank
        if self.native is not None:
            e = (native_mpi.pair_max(both, out, 1 - self.rank, _TAG + 300, self.native)
                 if self.size == 2 else native_mpi.all_max(both, out, self.native))
            if e:
                raise RuntimeError(f"parsim: MPI error {e} in the end-of-step check")
        elif self.size == 2:
            send, peer, tag, recv = self._pair
            self.comm.Sendrecv(send, peer, tag, recv, peer, tag)
            out[0] = max(both[0], out[0])   # the same on both ranks (no NaN is left)
            out[1] = max(both[1], out[1])
        else:
            self.comm.Allreduce(both, out, op=self.MPI.MAX)
        if out[0] == 0.0:
            return None, float(out[1])
        msgs = self.comm.allgather(None if message is None else (int(key), message))
        found = [(m[0], r, m[1]) for r, m in enumerate(msgs) if m is not None]
        if not found:
            return None, float(out[1])
        _, r, m = min(found)
        return (m if r == 0 else f"{m} [rank {r}]"), float(out[1])

    def gather(self, obj, root: int = 0):
        if self.size == 1:
            return [obj]
        return self.comm.gather(obj, root=root)

    def allgather(self, obj):
        if self.size == 1:
            return [obj]
        return self.comm.allgather(obj)

    def bcast(self, obj, root: int = 0):
        if self.size == 1:
            return obj
        return self.comm.bcast(obj, root=root)

    def allgather_int64(self, a: np.ndarray) -> np.ndarray:
        """Concatenation over ranks (rank order) of int64 arrays of any length."""
        a = np.ascontiguousarray(a, dtype=np.int64)
        if self.size == 1:
            return a.copy()
        counts = np.array(self.comm.allgather(a.size), dtype=np.int64)
        out = np.empty(int(counts.sum()), dtype=np.int64)
        displs = np.zeros(self.size, dtype=np.int64)
        np.cumsum(counts[:-1], out=displs[1:])
        self.comm.Allgatherv(a, [out, counts, displs, self.MPI.INT64_T])
        return out

    def allgather_records(self, a: np.ndarray, dtype) -> np.ndarray:
        """Concatenation over ranks (rank order) of record arrays of ``dtype`` (sent as bytes)."""
        a = np.ascontiguousarray(a, dtype=dtype)
        if self.size == 1:
            return a.copy()
        counts = np.array(self.comm.allgather(a.nbytes), dtype=np.int64)
        out = np.empty(int(counts.sum()) // dtype.itemsize, dtype=dtype)
        displs = np.zeros(self.size, dtype=np.int64)
        np.cumsum(counts[:-1], out=displs[1:])
        self.comm.Allgatherv([a.view(np.uint8), self.MPI.BYTE],
                             [out.view(np.uint8), counts, displs, self.MPI.BYTE])
        return out

    def alltoall_records(self, a: np.ndarray, counts, dtype) -> np.ndarray:
        """Personalised exchange of records of ``dtype`` (sent as bytes): ``a`` holds
        ``counts[r]`` records for each rank r, in rank order; returns the records the ranks
        sent to this one, in the senders' rank order."""
        a = np.ascontiguousarray(a, dtype=dtype)
        if self.size == 1:
            return a.copy()
        send = np.asarray(counts, dtype=np.int64) * dtype.itemsize
        recv = np.empty(self.size, dtype=np.int64)
        self.comm.Alltoall(send, recv)
        out = np.empty(int(recv.sum()) // dtype.itemsize, dtype=dtype)
        sd = np.zeros(self.size, dtype=np.int64)
        rd = np.zeros(self.size, dtype=np.int64)
        np.cumsum(send[:-1], out=sd[1:])
        np.cumsum(recv[:-1], out=rd[1:])
        self.comm.Alltoallv([a.view(np.uint8), send, sd, self.MPI.BYTE],
                            [out.view(np.uint8), recv, rd, self.MPI.BYTE])
        return out

    def barrier(self) -> None:
        if self.size > 1:
            self.comm.Barrier()

    def quiet_barrier(self, poll: float = 0.005) -> None:
        """Collective: a barrier whose waiting ranks sleep between tests of a non-blocking one
        instead of spinning, for waits of seconds (the other ranks while rank 0 compiles the
        kernels). MPICH waits in ``Barrier`` by polling: with more ranks than cores the
        spinning ranks took the compiling rank's core (8 ranks on 2 cores, a cold cache: the
        start of a run took 274 s, its 400 steps 8 s)."""
        if self.size > 1:
            req = self.comm.Ibarrier()
            while not req.Test():
                time.sleep(poll)

    # ---- neighbour exchange ----------------------------------------------------------------------
    def exchange(self, axis: int, down_rank: int, up_rank: int, to_down: np.ndarray,
                 to_up: np.ndarray, dtype) -> tuple[np.ndarray, np.ndarray]:
        """Send ``to_down`` to the lower neighbour and ``to_up`` to the upper one (arrays of
        ``dtype``, any length; ignored where the neighbour is NONE). Returns (from_down,
        from_up): what the lower neighbour sent up and what the upper one sent down."""
        empty = np.empty(0, dtype=dtype)
        if down_rank == self.rank and up_rank == self.rank:       # one block: local copies
            return (to_up.copy() if up_rank != NONE else empty,
                    to_down.copy() if down_rank != NONE else empty)
        MPI = self.MPI
        comm = self.comm
        t_up, t_down = _TAG + 4 * axis, _TAG + 4 * axis + 1
        counts_in = [np.zeros(1, np.int64), np.zeros(1, np.int64)]
        reqs = []
        for src, tag, buf in ((down_rank, t_up, counts_in[0]), (up_rank, t_down, counts_in[1])):
            if src != NONE:
                reqs.append(comm.Irecv(buf, source=src, tag=tag))
        out_counts = []
        for dst, tag, arr in ((down_rank, t_down, to_down), (up_rank, t_up, to_up)):
            if dst != NONE:
                c = np.array([arr.shape[0]], dtype=np.int64)
                out_counts.append(c)
                reqs.append(comm.Isend(c, dest=dst, tag=tag))
        MPI.Request.Waitall(reqs)
        got = [np.empty(int(counts_in[0][0]) if down_rank != NONE else 0, dtype=dtype),
               np.empty(int(counts_in[1][0]) if up_rank != NONE else 0, dtype=dtype)]
        reqs = []
        for src, tag, buf in ((down_rank, t_up + 2, got[0]), (up_rank, t_down + 2, got[1])):
            if src != NONE and buf.shape[0]:
                reqs.append(comm.Irecv([buf.view(np.uint8), MPI.BYTE], source=src, tag=tag))
        for dst, tag, arr in ((down_rank, t_down + 2, to_down), (up_rank, t_up + 2, to_up)):
            if dst != NONE and arr.shape[0]:
                a = np.ascontiguousarray(arr)
                reqs.append(comm.Isend([a.view(np.uint8), MPI.BYTE], dest=dst, tag=tag))
                self.bytes_sent += a.nbytes
                self.messages_sent += 1
        MPI.Request.Waitall(reqs)
        return got[0], got[1]

    def sendrecv_fixed(self, axis: int, peer: int, out: np.ndarray, inbuf: np.ndarray) -> None:
        """One message each way with ``peer`` (the neighbour on both sides of ``axis``: two
        blocks along a periodic axis), sizes known to both: send ``out``, receive ``inbuf``."""
        self.prepare_fixed(axis, peer, peer, True, out, inbuf, None)()

    def exchange_fixed(self, axis: int, down_rank: int, up_rank: int, to_down: np.ndarray,
                       to_up: np.ndarray, from_down: np.ndarray, from_up: np.ndarray) -> None:
        """Like :meth:`exchange` for messages whose sizes both sides know (the per-step shadow
        refresh): receives straight into ``from_down`` / ``from_up``, one message each way."""
        self.prepare_fixed(axis, down_rank, up_rank, False, None, None,
                           (to_down, to_up, from_down, from_up))()

    def prepare_fixed(self, axis: int, down_rank: int, up_rank: int, whole: bool,
                      out: np.ndarray | None, inbuf: np.ndarray | None, views):
        """A callable doing :meth:`sendrecv_fixed` (``whole``: ``out`` and ``inbuf`` with
        ``up_rank``) or :meth:`exchange_fixed` (``views``: to_down, to_up, from_down, from_up)
        on these buffers, with their MPI buffer specifications made once: the per-step refresh
        keeps one per message step and calls it every step (building them per call cost about
        1 us of a 6.3 us exchange on 2 ranks, 2026-11-27)."""
        if not whole and down_rank == self.rank and up_rank == self.rank:
            to_down, to_up, from_down, from_up = views

            def copy():                  # this rank is its own neighbour: no message
                from_up[...] = to_down
                from_down[...] = to_up
            return copy
        MPI, comm = self.MPI, self.comm

        def spec(a):
            return [a.view(np.uint8), MPI.BYTE]

        if whole:
            tag = _TAG + 200 + axis
            so, si, nbytes = spec(out), spec(inbuf), out.nbytes

            def run():
                comm.Sendrecv(so, dest=up_rank, sendtag=tag, recvbuf=si, source=up_rank,
                              recvtag=tag)
                if nbytes:
                    self.bytes_sent += nbytes
                    self.messages_sent += 1
            return run
        to_down, to_up, from_down, from_up = views
        t_up, t_down = _TAG + 100 + 2 * axis, _TAG + 101 + 2 * axis
        recvs = [(spec(buf), src, tag) for src, tag, buf in
                 ((down_rank, t_up, from_down), (up_rank, t_down, from_up))
                 if src != NONE and buf.size]
        sends = [(spec(arr), dst, tag, arr.nbytes) for dst, tag, arr in
                 ((down_rank, t_down, to_down), (up_rank, t_up, to_up))
                 if dst != NONE and arr.size]
        nbytes = sum(x[3] for x in sends)

        def run():
            reqs = [comm.Irecv(b, source=src, tag=tag) for b, src, tag in recvs]
            reqs += [comm.Isend(b, dest=dst, tag=tag) for b, dst, tag, _ in sends]
            MPI.Request.Waitall(reqs)
            self.bytes_sent += nbytes
            self.messages_sent += len(sends)
        return run


def exact_partial_sums(values: np.ndarray) -> list:
    """[(exponent, integer)] whose sum of integer * 2**exponent is exactly the sum of the
    finite float64 ``values`` (one pair per distinct exponent)."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.isfinite(x).all():
        raise ValueError("exact_sum: values must be finite")
    x = x[x != 0.0]
    if x.size == 0:
        return []
    m, e = np.frexp(x)                           # x = m 2^e, 0.5 <= |m| < 1
    mant = (m * 9007199254740992.0).astype(np.int64)    # x = mant 2^(e - 53), exactly
    order = np.argsort(e, kind="stable")
    e, mant = e[order], mant[order]
    starts = np.flatnonzero(np.r_[True, e[1:] != e[:-1]])
    hi = np.add.reduceat(mant >> 26, starts)     # |mant >> 26| < 2^27: no overflow below
    lo = np.add.reduceat(mant & 0x3FFFFFF, starts)      # 2^36 values per exponent
    return [(int(ex) - 53, (int(h) << 26) + int(lw))
            for ex, h, lw in zip(e[starts], hi, lo)]
