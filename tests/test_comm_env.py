"""parsim sets MPICH's single-copy threshold before MPI starts (see parsim.comm.CMA_THRESHOLD),
and leaves a value the user chose alone."""

from __future__ import annotations

import os
import subprocess
import sys

from parsim.comm import CMA_THRESHOLD

NAME, VALUE = CMA_THRESHOLD


def _seen(env: dict) -> str:
    code = f"import os, parsim; print(os.environ.get({NAME!r}, 'unset'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def test_import_sets_the_threshold_when_unset():
    env = {k: v for k, v in os.environ.items() if k != NAME}
    assert _seen(env) == VALUE


def test_a_value_the_user_set_is_kept():
    env = dict(os.environ, **{NAME: "4096"})
    assert _seen(env) == "4096"
