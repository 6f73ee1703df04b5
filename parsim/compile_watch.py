"""Kernels compiled while a run steps, so that a pause is explained and kept out of the rate.

The warm-up before a run (:mod:`parsim.warmup`) compiles the kernels every run needs, but not
the threaded builds (``parallel=True``, :mod:`parsim.parallel`): one rank with several numba
threads switches to them once a kernel has :data:`parsim.parallel.PARALLEL_MIN` pairs or
bodies, which many runs never reach, and compiling them all up front would add a minute to
every first run. So the first run that needs one compiles it mid-run (9-12 s for the demo's
contact kernel here). :func:`watch` notes every compile (numba's ``numba:compile`` event, which
fires on a cache miss only, not on a load), says the first one as it starts and adds up their
seconds for the closing line.
"""

from __future__ import annotations

import contextlib
import time

from numba.core import event

from .parallel import PARALLEL_MIN


class CompileWatch(event.Listener):
    """Seconds of the top-level compiles seen (a compile's callees are part of it) and the
    kernels' names; ``say(text)`` prints the first one's note."""

    def __init__(self, say):
        self.seconds = 0.0
        self.kernels: list[str] = []
        self._say = say
        self._depth = 0
        self._t0 = 0.0

    def on_start(self, ev) -> None:
        if self._depth == 0:
            self._t0 = time.perf_counter()
            d = ev.data["dispatcher"]
            name = f"{d.py_func.__module__}.{d.py_func.__qualname__}"
            if not self.kernels:
                why = (f"its threaded build, used from {PARALLEL_MIN:,} pairs or bodies with "
                       "several numba threads"
                       if getattr(d, "targetoptions", {}).get("parallel") else
                       "a kernel the warm-up does not reach")
                self._say(f"parsim: compiling {name} on its first use ({why}); the time is "
                          "left out of the rate, and the cache keeps it for the next runs")
            self.kernels.append(name)
        self._depth += 1

    def on_end(self, ev) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.seconds += time.perf_counter() - self._t0


@contextlib.contextmanager
def watch(say):
    """A :class:`CompileWatch` listening to numba's compiles for the ``with`` body."""
    w = CompileWatch(say)
    event.register("numba:compile", w)
    try:
        yield w
    finally:
        event.unregister("numba:compile", w)
