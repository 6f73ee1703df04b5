"""Processes sharing NUMBA_CACHE_DIR keep numba's cache index and data consistent
(``parsim.numba_cache``): two processes saving two signatures of one kernel at once must leave
both in the cache, each with its own machine code.

The race is made certain, not left to chance: each worker's index write waits (up to
``WAIT`` seconds) until every worker has read the index. Without the lock both read the same
index, pick the same data file and one signature is lost (or, worse, its index entry meets the
other's code); with the lock the second reads the index only after the first has saved."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

WAIT = 3.0   # seconds a worker waits for the others before writing the index anyway

KERNEL = """
from numba import njit


@njit(cache=True)
def f(x, y):
    s = x
    for _ in range(3):
        s = s * y + x
    return s
"""

WORKER = """
import os, sys, time
k, n, typ, wait = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import numpy as np
import parsim  # noqa: F401  (the cache directory, and the lock unless PARSIM_NUMBA_CACHE_LOCK=0)
from numba.core import caching


def everyone(tag):
    return all(os.path.exists(os.path.join(here, f"{tag}-{j}")) for j in range(n))


def wait_for(tag, limit):
    t0 = time.monotonic()
    while not everyone(tag) and time.monotonic() - t0 < limit:
        time.sleep(0.01)


save_index = caching.IndexDataCacheFile._save_index


def slow_save_index(self, overloads):   # runs inside save(), after the index was read
    open(os.path.join(here, f"read-{k}"), "w").close()
    wait_for("read", wait)
    return save_index(self, overloads)


caching.IndexDataCacheFile._save_index = slow_save_index
open(os.path.join(here, f"ready-{k}"), "w").close()
wait_for("ready", 60.0)                  # start compiling together
import kern
print(kern.f(getattr(np, typ)(2), getattr(np, typ)(3)))
"""

CHECK = """
import json, os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np
import parsim  # noqa: F401
import kern
out = [repr(kern.f(getattr(np, t)(2), getattr(np, t)(3))) for t in sys.argv[1:]]
st = kern.f.stats
print(json.dumps({"results": out, "hits": sum(st.cache_hits.values()),
                  "misses": sum(st.cache_misses.values())}))
"""

TYPES = ("int64", "float64")


def _race(tmp_path, lock: bool) -> dict:
    for name, text in (("kern.py", KERNEL), ("worker.py", WORKER), ("check.py", CHECK)):
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PARSIM_NUMBA_CACHE_LOCK="1" if lock else "0", NUMBA_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, str(tmp_path / "worker.py"), str(k),
                               str(len(TYPES)), t, str(WAIT)], env=env, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, t in enumerate(TYPES)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.split() == ["80"] or out.split() == ["80.0"], out
    r = subprocess.run([sys.executable, str(tmp_path / "check.py"), *TYPES], env=env,
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:                # the wrong code for a signature may crash it
        return {"crashed": r.returncode, "stderr": r.stderr[-2000:]}
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_two_processes_saving_one_kernel_keep_both_signatures(tmp_path):
    got = _race(tmp_path, lock=True)
    assert got == {"results": ["80", "80.0"], "hits": 2, "misses": 0}


def test_without_the_lock_the_same_race_loses_a_signature(tmp_path):
    """The test above can fail: numba alone loses a signature (or pairs it with the other's
    code) in the same race."""
    got = _race(tmp_path, lock=False)
    assert got != {"results": ["80", "80.0"], "hits": 2, "misses": 0}


def test_install_wraps_save_load_and_flush_once():
    pytest.importorskip("fcntl")
    from numba.core import caching

    from parsim import numba_cache

    assert numba_cache.install() is True          # already installed by importing parsim
    cls = caching.IndexDataCacheFile
    for name in ("save", "load", "flush"):
        method = getattr(cls, name)
        assert method._parsim_locked
        assert not getattr(method.__wrapped__, "_parsim_locked", False)   # not wrapped twice
