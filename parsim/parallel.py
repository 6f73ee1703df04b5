"""Serial and threaded builds of the same kernel, chosen by problem size.

A numba parallel region costs tens of microseconds to start, which dominates small systems (a
few bodies in a test take 5x longer threaded than serial), and with 2 cores shared by other
processes a threaded kernel can stall. Each time-step kernel is therefore compiled twice from one
source: serially (``prange`` acts as ``range``) and with ``parallel=True``; the engine calls the
threaded one only for at least :data:`PARALLEL_MIN` items. Both give bit-identical results (every
iteration writes its own outputs; the only reductions are an integer count and a maximum).

The default numba threading layer here is ``workqueue`` (TBB stalled on this 2-core machine in
our tests); set ``NUMBA_THREADING_LAYER`` to choose another, ``NUMBA_NUM_THREADS`` for the count.
"""

from __future__ import annotations

import os
import types

import numba
from numba import njit

#: smallest number of items (bodies or pairs) for which a kernel runs threaded. A parallel
#: region costs ~0.1 ms on the 2-core test machine (2026-11-24: the vectorised first half kick
#: of 8,000 bodies took 22 ns/body threaded against 8 serial), as much as a whole light kernel
#: of 8,000 bodies; with 4,096 the 8,000-sphere benchmarks ran 1.2-2.8x slower on 2 threads
#: than on one (docs/benchmarks/dem.md)
PARALLEL_MIN = 16384

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"


def dual(fn, **options):
    """(serial, threaded) dispatchers of the plain Python function ``fn`` (cached separately);
    ``options`` go to both ``njit`` calls (the integrator's kernels use
    ``error_model="numpy"``: a division that may raise stops LLVM from vectorising a loop)."""
    par = njit(cache=True, parallel=True, **options)(fn)
    g = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial",
                           fn.__defaults__, fn.__closure__)
    g.__qualname__ = fn.__qualname__ + "_serial"
    g.__module__ = fn.__module__
    g.__doc__ = fn.__doc__
    return njit(cache=True, **options)(g), par


def variant(fn, suffix: str, options: dict | None = None, **constants):
    """A dispatcher of the plain Python function ``fn`` that sees ``constants`` as globals
    (numba folds them: a branch on one costs nothing where it is False), cached under its own
    name (``fn``'s + ``suffix``); ``options`` go to ``njit``. Make it after every global ``fn``
    reads is defined (its globals are a copy of the module's at that point)."""
    g = dict(fn.__globals__)
    g.update(constants)
    f = types.FunctionType(fn.__code__, g, fn.__name__ + suffix, fn.__defaults__, fn.__closure__)
    f.__qualname__ = fn.__qualname__ + suffix
    f.__module__ = fn.__module__
    f.__doc__ = fn.__doc__
    return njit(cache=True, **(options or {}))(f)


def threaded(n: int) -> bool:
    """Whether :func:`pick` takes the threaded build for ``n`` items. The configured maximum is
    read first: ``numba.get_num_threads()`` costs ~5 us per call (it makes sure the thread
    pool runs), 4.5 % of a 0.5 ms step of the 8,000-sphere gas on one thread, called 4x per step."""
    return (n >= PARALLEL_MIN and numba.config.NUMBA_NUM_THREADS > 1
            and numba.get_num_threads() > 1)


def pick(pair, n: int):
    """The serial or threaded member of ``pair`` for ``n`` items."""
    return pair[1] if threaded(n) else pair[0]
