"""The kernels compiled before and during a run.

Rank 1's share of a cold compile (``compile_helper_part``) must compile exactly the kernels,
with exactly the signatures, that rank 0's ``compile_kernels`` then needs (otherwise the split
saves nothing), and rank 1 helps only where it may have a core of its own. A kernel compiled
while a run steps (a threaded build on its first use) is announced and kept out of the rate.
"""

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
    # the warm-up rebuilds mid-run too (the check before a rebuild: compiled mid-run by every
    # first run before 2026-11-28)
    assert after.get("parsim.integrator.check_state")
    # and the removal of many bodies at once (outflow; found by the compile watch)
    assert after.get("parsim.broadphase.base._descending")
    # the springs of a checkpoint or migration, and bodies deleted by outflow (the same)
    assert after.get("parsim.neighbours._any_touching")
    assert after.get("parsim.broadphase.idmap.for_each_delete")
    # the listing of the pairs in play of large ranks (parsim.contacts.FAR_ROWS bodies), with
    # the signature of the small ones' (the engine's arguments)
    assert after.get("parsim.contacts._sphere_pairs_in_play_far") == \
        after.get("parsim.contacts._sphere_pairs_in_play_near")
    assert after.get("parsim.contacts._sphere_pair_forces_far") == \
        after.get("parsim.contacts._sphere_pair_forces_serial")
    assert after.get("parsim.contacts._accumulate_far") == \
        after.get("parsim.contacts._accumulate_serial")
    # and the helper leaves the hash grid's detection to rank 0 (no work done twice)
    assert "parsim.broadphase.hashgrid_detect.find_pairs_rows" not in helper
    assert after.get("parsim.broadphase.hashgrid_detect.find_pairs_rows")
    # both builds of it (the one for sparse grids tried first and now and then)
    assert after.get("parsim.broadphase.hashgrid_detect.find_pairs_rows_flat") == \
        after.get("parsim.broadphase.hashgrid_detect.find_pairs_rows")


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


def test_the_watch_counts_top_level_compiles_and_says_the_first():
    """A compile inside the ``with`` is counted once with its callees, named, and the first
    one announced; a second kernel adds its time without a second note; a kernel already
    compiled, or compiled after the ``with``, adds nothing."""
    import time

    import numba

    from parsim.compile_watch import watch

    @numba.njit
    def inner(x):
        return x * 3 + 1

    @numba.njit
    def outer(x):
        return inner(x) - 2

    @numba.njit
    def other(x):
        return x // 2

    @numba.njit
    def later(x):
        return x + 7

    said = []
    with watch(said.append) as w:
        t0 = time.perf_counter()
        assert outer(4) == 11
        took = time.perf_counter() - t0
        assert w.kernels == [f"{__name__}.{outer.py_func.__qualname__}"]
        assert 0.0 < w.seconds <= took
        first = w.seconds
        assert other(9) == 4 and outer(5) == 14
        assert len(w.kernels) == 2 and w.seconds > first
    assert len(said) == 1 and "outer on its first use (a kernel the warm-up does not reach)" \
        in said[0], said
    seconds = w.seconds
    assert later(1) == 8
    assert w.seconds == seconds and len(w.kernels) == 2


def test_a_compile_during_a_run_is_announced_and_left_out_of_the_rate(tmp_path, monkeypatch):
    """A kernel compiled while ``parsim run`` steps (here a fresh one, called between two
    stretches of steps; in real runs a threaded build on its first use) is announced, its
    seconds are given in the closing line and the timing table, and the rate leaves them out."""
    import numba

    @numba.njit
    def fresh(x):
        return 2 * x

    stretch = runner._stretch
    calls = []

    def stretch_and_compile(*args):
        if not calls:
            fresh(1)
        calls.append(1)
        return stretch(*args)

    monkeypatch.setattr(runner, "_stretch", stretch_and_compile)
    cfg = tmp_path / "c.toml"
    cfg.write_text("""
[simulation]
dt = 1e-4
steps = 40

[domain]
lo = [0.0, 0.0, 0.0]
hi = [0.1, 0.1, 0.1]

[output]
every = 20

[[materials]]
name = "g"
density = 2500.0
restitution = 0.5
collision_time = 1e-3

[[bodies]]
kind = "lattice"
shape = "sphere"
radius = 0.003
spacing = 0.01
region = [[0.0, 0.0, 0.0], [0.1, 0.1, 0.02]]
""")
    import io
    import re

    out = io.StringIO()
    assert runner.run_config(str(cfg), str(tmp_path / "run"), stream=out) == 0
    text = out.getvalue()
    assert re.search(r"parsim: compiling \S+fresh on its first use", text), text
    done = re.search(r"done: 40 steps in (\S+) s \(of which (\S+) s compiling kernels on their "
                     r"first use: fresh\) \((\S+) particle-steps/s on 1 rank\(s\), compiling left "
                     r"out\)", text)
    assert done, text
    row = re.search(r"compiling \(included\)\s+(\S+)\s+(\S+)\s+(\S+)", text)
    assert row and float(row.group(3)) > 0.0, text
    # without a compile the line and the table stay as they were
    out = io.StringIO()
    assert runner.run_config(str(cfg), str(tmp_path / "run2"), stream=out) == 0
    text = out.getvalue()
    assert "compiling" not in text and re.search(r"done: 40 steps in \S+ s \(\S+ "
                                                 r"particle-steps/s on 1 rank\(s\)\); ", text), text
