"""Waiting for one rank without taking its core: for MPI tests on an oversubscribed machine.

In the suite's MPI sessions 4 or 8 ranks share 2 cores. Where one rank works alone (the serial
reference run, an analysis on rank 0, a layout on a sub-communicator) the others wait in a
collective, and MPICH waits by polling: 7 polling ranks left the working one about a quarter of
a core. These helpers wait in a non-blocking barrier tested every few milliseconds, sleeping in
between, so the working rank gets a whole core. They change no value.
"""

from __future__ import annotations


POLL_S = 0.002


def quiet_barrier(comm) -> None:
    """``comm.Barrier()``, with the waiting ranks asleep between polls
    (:meth:`parsim.comm.Net.quiet_barrier`, on any communicator)."""
    from parsim.comm import Net

    Net(comm).quiet_barrier(POLL_S)


def quiet_bcast(comm, obj, root: int = 0):
    """``comm.bcast(obj, root)``, with the ranks that wait for the root asleep between polls."""
    quiet_barrier(comm)
    return comm.bcast(obj, root=root)
