"""scripts/step_segments.py: the segments between the step's meeting points, from timestamps."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
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
