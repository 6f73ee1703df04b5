"""MPI called from numba kernels: the per-step messages without Python between them.

Every step on several ranks exchanges two small messages: the end-of-step check (16 bytes) and
the shadow refresh (a few kB). Through mpi4py each costs the Python call on top of MPI's own
latency, and the refresh's packing and unpacking are two more kernel calls. Measured on the
2-core host (2026-11-29, MPICH 5.0.2 of the `mpich` wheel, two ranks, 20,000 calls in a loop):
``MPI_Sendrecv`` of 16 bytes took 1.08 us called from a kernel, 1.85 us through mpi4py; of
8.8 kB, 1.94 against 2.77 us. Here the kernels declare the few MPI functions they call
(:func:`numba.types.ExternalFunction`, resolved by name in the MPI library mpi4py loaded, so
the kernels stay in numba's on-disk cache), and :mod:`parsim.halo` runs the whole refresh --
pack, messages, unpack -- in one kernel call.

Only for MPI libraries with the MPICH ABI (MPICH, Intel MPI, Cray MPICH, MVAPICH: integer
handles, ``MPI_STATUS_IGNORE`` = 1), found in this process's memory map (Linux), and checked
by asking the library for the rank. Anywhere else, or with ``PARSIM_NATIVE_MPI=0``, the same
messages go through mpi4py (:mod:`parsim.comm`); both ways send the same bytes with the same
tags, so the results are the same bits.
"""

from __future__ import annotations

import os

import numpy as np
from numba import njit, types

_i32, _i64 = types.int32, types.int64

# C signatures with pointers as int64 and MPICH's integer handles as int32
_SENDRECV = types.ExternalFunction(
    "MPI_Sendrecv", _i32(_i64, _i32, _i32, _i32, _i32, _i64, _i32, _i32, _i32, _i32, _i32, _i64))
_IRECV = types.ExternalFunction("MPI_Irecv", _i32(_i64, _i32, _i32, _i32, _i32, _i32, _i64))
_ISEND = types.ExternalFunction("MPI_Isend", _i32(_i64, _i32, _i32, _i32, _i32, _i32, _i64))
_WAITALL = types.ExternalFunction("MPI_Waitall", _i32(_i32, _i64, _i64))
_ALLREDUCE = types.ExternalFunction("MPI_Allreduce", _i32(_i64, _i64, _i32, _i32, _i32, _i32))
_COMM_RANK = types.ExternalFunction("MPI_Comm_rank", _i32(_i32, _i64))
_CLOCK = types.ExternalFunction("clock_gettime", _i32(_i32, _i64))

#: MPICH's MPI_STATUS_IGNORE and MPI_STATUSES_IGNORE
_STATUS_IGNORE = 1
#: Linux's CLOCK_MONOTONIC
_MONOTONIC = 1

#: slots of the handle array ``h`` the kernels take
COMM, BYTE, DOUBLE, MAX = 0, 1, 2, 3

#: MPI_SUCCESS
SUCCESS = 0


@njit(cache=True)
def now(ts) -> float:
    """Seconds of the monotonic clock (``ts``: two int64, the C timespec)."""
    _CLOCK(_MONOTONIC, ts.ctypes.data)
    return ts[0] + 1e-9 * ts[1]


@njit(cache=True)
def sendrecv(out, inbuf, peer, tag, h) -> int:
    """One message each way with ``peer``: all of ``out`` (contiguous) sent, all of ``inbuf``
    received. Returns MPI's error code."""
    return _SENDRECV(out.ctypes.data, out.size * out.itemsize, h[BYTE], peer, tag,
                     inbuf.ctypes.data, inbuf.size * inbuf.itemsize, h[BYTE], peer, tag,
                     h[COMM], _STATUS_IGNORE)


@njit(cache=True, inline="always")
def _post(send, addr, nbytes, peer, tag, h, req) -> int:
    if send:
        return _ISEND(addr, nbytes, h[BYTE], peer, tag, h[COMM], req)
    return _IRECV(addr, nbytes, h[BYTE], peer, tag, h[COMM], req)


@njit(cache=True)
def exchange(out, n_first, inbuf, n_from_down, down, up, t_up, t_down, none, reqs, h) -> int:
    """:meth:`parsim.comm.Net.exchange_fixed` on flat float64 buffers: ``out[:n_first]`` to the
    lower neighbour and the rest to the upper one, ``inbuf[:n_from_down]`` from the lower and
    the rest from the upper (``none``: no neighbour; empty parts are not sent). ``reqs``: four
    int32 request handles. Returns MPI's error code."""
    item = inbuf.itemsize
    k = 0
    for j in range(4):                  # the receives first: from below, from above; sends
        send, lower = j >= 2, j % 2 == 0
        peer = down if lower else up
        buf, first = (out, n_first) if send else (inbuf, n_from_down)
        tag = (t_down if lower else t_up) if send else (t_up if lower else t_down)
        start = 0 if lower else first
        count = first if lower else buf.size - first
        if peer != none and count:
            # (addresses as int64: uint64 plus int64 would be a float64 in numba)
            e = _post(send, np.int64(buf.ctypes.data) + start * item, count * item, peer, tag,
                      h, np.int64(reqs[k:].ctypes.data))
            if e:
                return e
            k += 1
    if k == 0:
        return SUCCESS
    return _WAITALL(k, reqs.ctypes.data, _STATUS_IGNORE)


@njit(cache=True)
def pair_max(send, recv, peer, tag, h) -> int:
    """``recv`` = the elementwise max of this rank's ``send`` and ``peer``'s (float64, no NaN),
    with one Sendrecv: the reduction of two ranks. Returns MPI's error code."""
    e = sendrecv(send, recv, peer, tag, h)
    for i in range(send.size):
        recv[i] = max(send[i], recv[i])
    return e


@njit(cache=True)
def all_max(send, recv, h) -> int:
    """``recv`` = the elementwise max of ``send`` over the ranks (float64, MPI_Allreduce)."""
    return _ALLREDUCE(send.ctypes.data, recv.ctypes.data, send.size, h[DOUBLE], h[MAX],
                      h[COMM])


@njit(cache=True)
def _comm_rank(h, out) -> int:
    return _COMM_RANK(h[COMM], out.ctypes.data)


def _library() -> str | None:
    """Path of the MPI library mapped into this process (Linux), or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "/" in line}
    except OSError:
        return None
    for p in sorted(paths):
        base = os.path.basename(p)
        if base.startswith(("libmpi.so", "libmpich.so", "libmpi_intel", "libmpi_cray",
                            "libmpich_")) and "mpi4py" not in p:
            return p
    return None


def handles(MPI, comm) -> np.ndarray | None:
    """The int32 handles (:data:`COMM`, :data:`BYTE`, :data:`DOUBLE`, :data:`MAX`) for the kernels
    of this module, with the MPI library made callable from them; None where they cannot be
    used (see the module's text). Local: the caller agrees with the other ranks."""
    if os.environ.get("PARSIM_NATIVE_MPI", "1").strip() == "0":
        return None
    try:
        if any(MPI._sizeof(t) != 4 for t in (MPI.Comm, MPI.Datatype, MPI.Op, MPI.Request)):
            return None
        path = _library()
        if path is None:
            return None
        import ctypes

        lib = ctypes.CDLL(path)
        if not all(hasattr(lib, f) for f in ("MPI_Sendrecv", "MPI_Irecv", "MPI_Isend",
                                             "MPI_Waitall", "MPI_Allreduce", "MPI_Comm_rank")):
            return None
        import llvmlite.binding as ll

        ll.load_library_permanently(path)
        # (handles as C ints: a communicator made by Dup is 0x84..., negative)
        h = np.array([MPI._handleof(x) % 2**32 for x in (comm, MPI.BYTE, MPI.DOUBLE, MPI.MAX)],
                     dtype=np.uint32).view(np.int32)
        rank = np.full(1, -1, dtype=np.int32)
        if _comm_rank(h, rank) != SUCCESS or rank[0] != comm.Get_rank():
            return None
        return h
    except Exception:                    # anything unexpected: the mpi4py way
        return None
