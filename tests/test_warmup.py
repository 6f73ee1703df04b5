"""The kernel warm-up before a run: rank 1's share of a cold compile (``compile_helper_part``)
must compile exactly the kernels, with exactly the signatures, that rank 0's
``compile_kernels`` then needs (otherwise the split saves nothing), and rank 1 helps only where
it may have a core of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from parsim import runner

# In a fresh process (a test process has most kernels loaded already): the signatures of every
# parsim kernel after the helper's part, and which of them compile_kernels then added to.
_PROBE = r"""
import json, sys
from numba.core.registry import CPUDispatcher
import parsim
from parsim import warmup

def signatures():
    out = {}
    for name, mod in list(sys.modules.items()):
        if not name.startswith("parsim"):
            continue
        for v in list(vars(mod).values()):
            for d in (v if isinstance(v, tuple) else (v,)):
                if isinstance(d, CPUDispatcher) and d.signatures:
                    key = d.py_func.__module__ + "." + d.py_func.__qualname__
                    out[key] = sorted(str(s) for s in d.signatures)
    return out

warmup.compile_helper_part()
helper = signatures()
warmup.compile_kernels()
after = signatures()
print(json.dumps({"helper": helper, "after": after}))
"""


def test_the_helpers_kernels_are_the_ones_the_warm_up_needs():
    """Each kernel the helper compiles, the full warm-up reaches with the same signature (it
    adds none to it), and the helper covers the big kernels of rotating bodies."""
    r = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                       env=dict(os.environ, NUMBA_NUM_THREADS="1"), timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    helper, after = got["helper"], got["after"]
    for name in ("parsim.contacts_general._general_pair_forces_serial",
                 "parsim.contacts_general.deepest_overlaps",
                 "parsim.integrator._first_half_serial",
                 "parsim.integrator._second_half_serial"):
        assert helper.get(name), f"the helper did not compile {name}"
    grown = {k: (v, after[k]) for k, v in helper.items() if after[k] != v}
    assert not grown, f"compile_kernels needed other signatures of these kernels: {grown}"
    # and the helper leaves the hash grid's detection to rank 0 (no work done twice)
    assert "parsim.broadphase.hashgrid_detect.find_pairs_rows" not in helper
    assert after.get("parsim.broadphase.hashgrid_detect.find_pairs_rows")


class _FakeNet:
    """What ``_rank1_helps`` uses of :class:`parsim.comm.Net`: size, rank and a broadcast of
    rank 0's (host, cpus)."""

    def __init__(self, size, rank, rank0):
        self.size, self.rank, self._rank0 = size, rank, rank0

    def bcast(self, obj, root=0):
        return obj if self.rank == 0 else self._rank0


@pytest.mark.parametrize("size, rank, rank0, mine, helps", [
    (1, 0, None, None, False),                                  # one rank: nobody to help
    (2, 0, None, None, False),                                  # rank 0 compiles its own part
    (4, 2, ("h", {0, 1}), None, False),                         # only rank 1 helps
    (2, 1, ("h", {0, 1}), ("h", {0, 1}), True),                 # unbound, 2 cpus
    (2, 1, ("h", {0}), ("h", {1}), True),                       # bound to two cores
    (2, 1, ("h", {0}), ("h", {0}), False),                      # one core for both
    (2, 1, ("other", {0}), ("h", {0}), True),                   # another node
])
def test_rank_1_helps_only_with_a_core_of_its_own(monkeypatch, size, rank, rank0, mine, helps):
    import socket

    if mine is not None:
        monkeypatch.setattr(socket, "gethostname", lambda: mine[0])
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(mine[1]), raising=False)
    elif rank == 0:
        rank0 = None
    net = _FakeNet(size, rank, None if rank0 is None else (rank0[0], frozenset(rank0[1])))
    assert runner._rank1_helps(net) is helps
