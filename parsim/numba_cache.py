"""Sharing numba's on-disk kernel cache between processes safely.

numba saves a cached kernel in two files: an index (one per function, mapping each compiled
signature to a data file number) and the data file. Its ``save`` reads the index, picks the
first free number, writes the index and then the data, each atomically but not together. Two
processes saving two signatures of one function at the same moment both read the same index and
pick the same number: one signature is lost from the index, and when the index of one meets the
data of the other, a later process loads the wrong machine code for a signature and crashes
(seen with several MPI ranks on a cold cache). The same can happen to a reader that meets an
index newer than its data file.

:func:`install` makes every ``save`` and ``load`` of numba's cache files hold a lock on a file
in the cache directory (``flock``: exclusive to save, shared to load), so that processes sharing
``NUMBA_CACHE_DIR`` -- MPI ranks, pytest-xdist workers, the jobs of an array -- see each
function's index and data as one. Compiling itself is not serialised: two processes needing the
same kernel may both compile it, and the second save replaces the first with the same code.

Where the cache directory cannot hold the lock file or the file system has no ``flock``, numba
works as it does alone. ``PARSIM_NUMBA_CACHE_LOCK=0`` leaves numba untouched.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os

#: the lock file, one per cache directory numba writes to (one per source directory)
LOCK_NAME = "parsim-cache.lock"


@contextlib.contextmanager
def _locked(directory: str, exclusive: bool):
    """Hold a ``flock`` on ``directory/LOCK_NAME`` (exclusive or shared) for the ``with`` body;
    without the lock if the file cannot be opened or locked."""
    import fcntl

    try:
        fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        fd = -1
    try:
        if fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            except OSError:
                pass                     # no flock on this file system: as numba alone
        yield
    finally:
        if fd >= 0:
            os.close(fd)                 # releases the lock


def install() -> bool:
    """Wrap numba's cache file ``save``, ``load`` and ``flush`` in the lock (once per process).
    Returns whether the lock is in place."""
    if os.environ.get("PARSIM_NUMBA_CACHE_LOCK", "1").strip() == "0":
        return False
    if importlib.util.find_spec("fcntl") is None:      # POSIX only
        return False
    try:
        from numba.core import caching
    except ImportError:
        return False
    cls = getattr(caching, "IndexDataCacheFile", None)
    if cls is None or not all(callable(getattr(cls, m, None)) for m in ("save", "load", "flush")):
        return False                     # another numba layout: leave it alone
    if getattr(cls.save, "_parsim_locked", False):
        return True

    def wrap(method, exclusive):
        @functools.wraps(method)
        def locked(self, *args, **kwargs):
            where = getattr(self, "_cache_path", None)
            if not isinstance(where, str):   # another numba layout: as numba alone
                return method(self, *args, **kwargs)
            with _locked(where, exclusive):
                return method(self, *args, **kwargs)
        locked._parsim_locked = True
        return locked

    cls.save = wrap(cls.save, True)
    cls.flush = wrap(cls.flush, True)
    cls.load = wrap(cls.load, False)
    return True
