"""scripts/step_segments.py: the segments between the step's meeting points, from timestamps."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).parent / "mpiexec"
_spec = importlib.util.spec_from_file_location("step_segments", REPO / "scripts" / "step_segments.py")
step_segments = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(step_segments)


def test_segments_split_the_time_at_the_meeting_points():
    R, C = step_segments.REFRESH, step_segments.CHECK
    us = 1e-6
    # check, refresh, check, refresh, check, then a rebuild step's two checks
    ev = np.array([[C, 0, 1], [R, 11, 13], [C, 20, 21], [R, 35, 38], [C, 44, 45],
                   [C, 60, 61], [C, 70, 72]], dtype=float)
    ev[:, 1:] *= us
    seg = step_segments.segments(ev)
    assert np.allclose(seg["joint pass"], [10, 14])      # check end -> next refresh start
    assert np.allclose(seg["forces"], [7, 6])            # refresh end -> next check start
    assert np.allclose(seg["refresh"], [2, 3])
    assert np.allclose(seg["check"], [1, 1, 1, 1, 2])


def test_meetings_split_wait_and_what_follows_the_last_arrival():
    R, C = step_segments.REFRESH, step_segments.CHECK
    us = 1e-6
    # rank 0 arrives first at the refresh, rank 1 first at the check; (kind, start, end)
    r0 = np.array([[R, 10, 30], [C, 50, 75], [R, 100, 118]], dtype=float)
    r1 = np.array([[R, 14, 31], [C, 45, 74], [R, 103, 120]], dtype=float)
    r0[:, 1:] *= us
    r1[:, 1:] *= us
    m = step_segments.meetings([r0, r1])
    (w0, a0), (w1, a1) = m["refresh"]
    assert np.allclose(w0, [4, 3]) and np.allclose(w1, [0, 0])      # until the last arrival
    assert np.allclose(a0, [16, 15]) and np.allclose(a1, [17, 17])  # from it to the exit
    (w0, a0), (w1, a1) = m["check"]
    assert np.allclose(w0, [0]) and np.allclose(w1, [5])
    assert np.allclose(a0, [25]) and np.allclose(a1, [24])


def test_script_runs_and_reports_every_segment():
    env = dict(os.environ, NUMBA_CACHE_DIR=os.path.abspath(
        os.environ.get("NUMBA_CACHE_DIR", REPO / ".numba_cache")))
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "step_segments.py"), "--n-side",
                        "4", "--warm", "20", "--steps", "60"], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [line.split() for line in r.stdout.splitlines() if line.strip().startswith("0 ")]
    names = [" ".join(w[1:3]) if w[1] == "joint" else w[1] for w in rows]
    assert names == ["joint pass", "forces", "refresh", "check"]
    counts = [int(w[3] if w[1] == "joint" else w[2]) for w in rows]
    assert all(c > 0 for c in counts) and counts[3] >= 60


@pytest.mark.skipif(not MPIEXEC.exists(), reason="needs the mpiexec next to the interpreter")
def test_script_on_two_ranks_reports_the_meeting_points():
    env = dict(os.environ, NUMBA_CACHE_DIR=os.path.abspath(
        os.environ.get("NUMBA_CACHE_DIR", REPO / ".numba_cache")))
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable,
                        str(REPO / "scripts" / "step_segments.py"), "--n-side", "4", "--warm",
                        "20", "--steps", "60"], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    table = r.stdout.split("meeting points:")[1].splitlines()[2:]
    rows = sorted((int(w[0]), w[1]) for w in (line.split() for line in table) if w)
    assert rows == [(0, "check"), (0, "refresh"), (1, "check"), (1, "refresh")]
    cols = [line.split() for line in table if line.split()]
    assert sum(float(w[2]) for w in cols) > 0.0     # some rank waited for the other (means)
    assert all(float(w[4]) > 0.0 for w in cols)     # no rank left before the last one came
