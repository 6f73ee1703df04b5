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
function's index and data as one. 
It also makes a cache miss compile under a lock of that function (``<index file>.lock``,
exclusive): a process that needs a kernel another process is compiling waits for it and then
loads it from the cache, instead of compiling it a second time. Each kernel is then compiled
once however many processes start on a cold cache (pytest-xdist workers, MPI ranks, the jobs of
an array); a cache hit takes no compile lock. A kernel that calls another one compiles the
callee while holding its own lock; the locks follow the call graph, so no two processes wait
for each other.

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


#: the compile locks this process holds (paths): a kernel whose compile reaches itself again
#: (recursion) must not wait for its own lock (``flock`` on a second descriptor would)
_held: set = set()


@contextlib.contextmanager
def _locked(directory: str, exclusive: bool, name: str = LOCK_NAME):
    """Hold a ``flock`` on ``directory/name`` (exclusive or shared) for the ``with`` body;
    without the lock if the file cannot be opened or locked."""
    import fcntl

    try:
        fd = os.open(os.path.join(directory, name), os.O_RDWR | os.O_CREAT, 0o666)
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
    _lock_compiles()
    return True


def _lock_compiles() -> None:
    """Wrap numba's ``Dispatcher.compile``: on a cache miss, compile under the function's
    compile lock (see the module's docstring). Anything unexpected (no disk cache, another
    numba layout, an unreadable index): numba's own ``compile``, unlocked."""
    try:
        from numba.core import sigutils
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.dispatcher import Dispatcher
    except ImportError:
        return
    compile_ = Dispatcher.compile
    if getattr(compile_, "_parsim_locked", False):
        return

    @functools.wraps(compile_)
    def compile(self, sig):
        with global_compiler_lock:       # (numba's, re-entrant: taken again inside compile_)
            try:
                cache = self._cache
                files = cache._cache_file
                where, name = files._cache_path, files._index_name + ".lock"
                args, _ = sigutils.normalize_signature(sig)
                if (not cache._enabled or not isinstance(where, str)
                        or self.overloads.get(tuple(args)) is not None
                        or os.path.join(where, name) in _held):
                    return compile_(self, sig)
                key = cache._index_key(sig, self.targetctx.codegen())
                with _locked(where, False):
                    cached = key in files._load_index()
            except Exception:            # no disk cache (cache=False), another layout, ...
                return compile_(self, sig)
            if cached:
                return compile_(self, sig)
            path = os.path.join(where, name)
            with _locked(where, True, name):
                _held.add(path)
                try:
                    return compile_(self, sig)     # loads it if another process saved it
                finally:
                    _held.discard(path)

    compile._parsim_locked = True
    Dispatcher.compile = compile
