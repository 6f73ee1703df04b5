"""parsim sets MPICH's single-copy threshold before MPI starts (see parsim.comm.CMA_THRESHOLD),
and leaves a value the user chose alone, under any of MPICH's names for it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from parsim.comm import CMA_THRESHOLD, CMA_THRESHOLD_NAMES

NAME, VALUE = CMA_THRESHOLD


def _seen(env: dict, name: str = NAME) -> str:
    code = f"import os, parsim; print(os.environ.get({name!r}, 'unset'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def _clean() -> dict:
    return {k: v for k, v in os.environ.items() if k not in CMA_THRESHOLD_NAMES}


def test_import_sets_the_threshold_when_unset():
    assert _seen(_clean()) == VALUE


@pytest.mark.parametrize("name", CMA_THRESHOLD_NAMES)
def test_a_value_the_user_set_is_kept(name):
    """Under MPICH's other names too: MPICH would let parsim's MPIR_CVAR_ value win over them."""
    env = dict(_clean(), **{name: "4096"})
    assert _seen(env, name) == "4096"
    if name != NAME:
        assert _seen(env) == "unset"
