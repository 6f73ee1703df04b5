"""Bad input raises :class:`BroadPhaseError` naming the argument, and changes nothing.

For every configuration and every bad call: the exception is a ``BroadPhaseError`` (not a numba
error, ``IndexError`` or ``KeyError``), its message names the argument or the offending id, and
the structure afterwards answers exactly as before -- including for batches in which only one
entry is bad (no partial add / update / remove) -- and keeps working.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import broadphase_oracle as orc
from broadphase_configs import CONFIG_PARAMS, make

NAN = np.nan
INF = np.inf
N = 40          # finite bodies 0..39 (more than the HHG activation threshold of 32)
PLANE = 999     # one infinite body
FRESH = 100     # ids 100.. are free


def unit(*rows):
    return np.array(rows, dtype=np.float64)


def populated(cfg):
    rng = np.random.default_rng(20)
    lo = rng.uniform(0, 8, (N, 3))
    hi = lo + rng.uniform(0.5, 2.0, (N, 3))
    bp, model = make(cfg), orc.Model()
    bp.add(np.arange(N), lo, hi)
    model.add(np.arange(N), lo, hi)
    bp.add_infinite([PLANE])
    model.add_infinite([PLANE])
    return bp, model


def snapshot(bp):
    return (
        len(bp),
        orc.canonical_pairs(bp.pairs()).tolist(),
        bp.query_box(np.full(3, -1e3), np.full(3, 1e3)).tolist(),
        bp.query_radius(np.full(3, 4.0), 2.0).tolist(),
        [a.tolist() for a in bp.raycast(np.zeros(3), np.ones(3))],
    )


def _all_boxes(row=None, axis=0, value=0.0, corner=0):
    """Moved boxes of all N bodies; with ``row``, ``value`` in coordinate ``axis`` of its
    corner ``corner`` (0: lo, 1: hi)."""
    rng = np.random.default_rng(23)
    lo = rng.uniform(0, 8, (N, 3))
    hi = lo + rng.uniform(0.5, 2.0, (N, 3))
    if row is not None:
        (lo, hi)[corner][row, axis] = value
    return lo, hi


def _edge_overflow(row):
    """Moved boxes of all N bodies, one of which (``row``) spans -1e308 to 1e308 along y."""
    lo, hi = _all_boxes()
    lo[row, 1], hi[row, 1] = -1e308, 1e308
    return lo, hi


# (case id, call, regex the message must contain)
CASES = [
    # ---- add
    ("add-nan-lo", lambda bp: bp.add([FRESH], unit([NAN, 0, 0]), unit([1, 1, 1])), r"\blo\b"),
    ("add-inf-hi", lambda bp: bp.add([FRESH], unit([0, 0, 0]), unit([1, INF, 1])), r"\bhi\b"),
    ("add-neg-inf-lo", lambda bp: bp.add([FRESH], unit([0, -INF, 0]), unit([1, 1, 1])), r"\blo\b"),
    ("add-lo-above-hi", lambda bp: bp.add([FRESH], unit([2, 0, 0]), unit([1, 1, 1])), r"\blo\b"),
    ("add-lo-wrong-shape", lambda bp: bp.add([FRESH], np.zeros((1, 2)), np.ones((1, 2))), r"\blo\b"),
    ("add-lo-flat", lambda bp: bp.add([FRESH, FRESH + 1], np.zeros(6), np.ones((2, 3))), r"\blo\b"),
    ("add-hi-count-mismatch", lambda bp: bp.add([FRESH, FRESH + 1], np.zeros((2, 3)), np.ones((1, 3))),
     r"\bhi\b"),
    ("add-ids-2d", lambda bp: bp.add([[FRESH, FRESH + 1]], np.zeros((2, 3)), np.ones((2, 3))), r"\bids\b"),
    ("add-negative-id", lambda bp: bp.add([-1], unit([0, 0, 0]), unit([1, 1, 1])), r"ids|-1"),
    ("add-duplicate-in-batch",
     lambda bp: bp.add([FRESH, FRESH], unit([0, 0, 0], [1, 1, 1]), unit([1, 1, 1], [2, 2, 2])), r"\b100\b"),
    ("add-present-id", lambda bp: bp.add([17], unit([0, 0, 0]), unit([1, 1, 1])), r"\b17\b"),
    ("add-infinite-id", lambda bp: bp.add([PLANE], unit([0, 0, 0]), unit([1, 1, 1])), r"\b999\b"),
    ("add-batch-last-nan",
     lambda bp: bp.add([FRESH, FRESH + 1, FRESH + 2], unit([0, 0, 0], [1, 1, 1], [2, 2, NAN]),
                       unit([1, 1, 1], [2, 2, 2], [3, 3, 3])), r"\blo\b"),
    ("add-batch-last-present",
     lambda bp: bp.add([FRESH, FRESH + 1, 23], unit([0, 0, 0], [1, 1, 1], [2, 2, 2]),
                       unit([1, 1, 1], [2, 2, 2], [3, 3, 3])), r"\b23\b"),
    # ---- update
    ("update-unknown", lambda bp: bp.update([12345], unit([0, 0, 0]), unit([1, 1, 1])), r"\b12345\b"),
    ("update-unknown-among-known",
     lambda bp: bp.update([0, 1, 12345], unit([50, 50, 50], [50, 50, 50], [50, 50, 50]),
                          unit([51, 51, 51], [51, 51, 51], [51, 51, 51])), r"\b12345\b"),
    ("update-duplicate",
     lambda bp: bp.update([5, 5], unit([0, 0, 0], [1, 1, 1]), unit([1, 1, 1], [2, 2, 2])), r"\b5\b"),
    ("update-negative-id", lambda bp: bp.update([-3], unit([0, 0, 0]), unit([1, 1, 1])), r"ids|-3"),
    ("update-nan", lambda bp: bp.update([2, 3], unit([0, 0, 0], [0, NAN, 0]), unit([1, 1, 1], [1, 1, 1])),
     r"\blo\b"),
    ("update-lo-above-hi",
     lambda bp: bp.update([2, 3], unit([0, 0, 0], [0, 0, 5]), unit([1, 1, 1], [1, 1, 1])), r"\blo\b"),
    # every body in stored order: a time step's call (the hash grid checks these boxes in the
    # first pass of its update, not in a pass of the front end)
    ("update-all-nan-last", lambda bp: bp.update(np.arange(N), *_all_boxes(N - 1, 2, NAN, 0)),
     r"\blo\b.*\b39\b|\b39\b.*\blo\b"),
    ("update-all-inf-hi-first", lambda bp: bp.update(np.arange(N), *_all_boxes(0, 1, INF, 1)),
     r"\bhi\b"),
    ("update-all-lo-above-hi", lambda bp: bp.update(np.arange(N), *_all_boxes(17, 0, 50.0, 0)),
     r"\blo\b.*\b17\b|\b17\b.*\blo\b"),
    # an edge hi - lo that rounds to infinity (finite corners): the hash grid looped forever
    ("add-edge-overflows", lambda bp: bp.add([FRESH], unit([-1e308, 0, 0]), unit([1e308, 1, 1])),
     r"\bedge\b"),
    ("update-all-edge-overflows", lambda bp: bp.update(np.arange(N), *_edge_overflow(7)),
     r"\[7\]"),
    ("update-hi-count-mismatch", lambda bp: bp.update([2, 3], np.zeros((2, 3)), np.ones((3, 3))), r"\bhi\b"),
    # ---- remove
    ("remove-unknown", lambda bp: bp.remove([12345]), r"\b12345\b"),
    ("remove-known-and-unknown", lambda bp: bp.remove([0, 1, 12345]), r"\b12345\b"),
    ("remove-plane-and-unknown", lambda bp: bp.remove([PLANE, 12345]), r"\b12345\b"),
    ("remove-duplicate", lambda bp: bp.remove([3, 3]), r"\b3\b"),
    ("remove-plane-twice-in-batch", lambda bp: bp.remove([PLANE, PLANE]), r"\b999\b"),
    ("remove-negative", lambda bp: bp.remove([-2]), r"ids|-2"),
    ("remove-ids-2d", lambda bp: bp.remove([[0, 1]]), r"\bids\b"),
    # ---- add_infinite
    ("add_infinite-present-finite", lambda bp: bp.add_infinite([7]), r"\b7\b"),
    ("add_infinite-present-infinite", lambda bp: bp.add_infinite([PLANE]), r"\b999\b"),
    ("add_infinite-duplicate-in-batch", lambda bp: bp.add_infinite([FRESH, FRESH]), r"\b100\b"),
    ("add_infinite-negative", lambda bp: bp.add_infinite([-5]), r"ids|-5"),
    ("add_infinite-batch-last-present", lambda bp: bp.add_infinite([FRESH, FRESH + 1, 7]), r"\b7\b"),
    # ---- queries
    ("query_box-lo-above-hi", lambda bp: bp.query_box([1, 0, 0], [0, 1, 1]), r"\blo\b"),
    ("query_box-nan", lambda bp: bp.query_box([NAN, 0, 0], [1, 1, 1]), r"\blo\b"),
    ("query_box-inf", lambda bp: bp.query_box([0, 0, 0], [1, INF, 1]), r"\bhi\b"),
    ("query_box-shape", lambda bp: bp.query_box([0, 0], [1, 1, 1]), r"\blo\b"),
    ("query_radius-negative-r", lambda bp: bp.query_radius([0, 0, 0], -1.0), r"\br\b"),
    ("query_radius-nan-r", lambda bp: bp.query_radius([0, 0, 0], NAN), r"\br\b"),
    ("query_radius-inf-r", lambda bp: bp.query_radius([0, 0, 0], INF), r"\br\b"),
    ("query_radius-nan-point", lambda bp: bp.query_radius([0, NAN, 0], 1.0), r"\bpoint\b"),
    ("query_radius-point-shape", lambda bp: bp.query_radius([0, 0, 0, 0], 1.0), r"\bpoint\b"),
    ("raycast-zero-direction", lambda bp: bp.raycast([0, 0, 0], [0, 0, 0]), r"\bdirection\b"),
    ("raycast-nan-direction", lambda bp: bp.raycast([0, 0, 0], [1, NAN, 0]), r"\bdirection\b"),
    ("raycast-inf-direction", lambda bp: bp.raycast([0, 0, 0], [INF, 0, 0]), r"\bdirection\b"),
    ("raycast-nan-origin", lambda bp: bp.raycast([NAN, 0, 0], [1, 0, 0]), r"\borigin\b"),
    ("raycast-origin-shape", lambda bp: bp.raycast([0, 0], [1, 0, 0]), r"\borigin\b"),
    ("raycast-negative-t_max", lambda bp: bp.raycast([0, 0, 0], [1, 0, 0], -1.0), r"\bt_max\b"),
    ("raycast-nan-t_max", lambda bp: bp.raycast([0, 0, 0], [1, 0, 0], NAN), r"\bt_max\b"),
]


@pytest.mark.parametrize("cfg", CONFIG_PARAMS)
@pytest.mark.parametrize("case", [pytest.param(c, id=c[0]) for c in CASES])
def test_bad_input_raises_and_changes_nothing(cfg, case):
    _, call, pattern = case
    bp, model = populated(cfg)
    before = snapshot(bp)
    with pytest.raises(Exception) as excinfo:
        call(bp)
    err = excinfo.value
    from parsim.broadphase import BroadPhaseError

    assert isinstance(err, BroadPhaseError), f"raised {type(err).__name__}: {err}"
    assert re.search(pattern, str(err)), f"message {str(err)!r} does not name {pattern!r}"
    assert snapshot(bp) == before, "the failed call changed the structure"
    orc.assert_matches(bp, model, label="after the error: ")
    # and the structure still works
    lo = np.array([[1.0, 1.0, 1.0], [4.0, 4.0, 4.0]])
    bp.add([FRESH, FRESH + 1], lo, lo + 2.0)
    model.add([FRESH, FRESH + 1], lo, lo + 2.0)
    bp.update([0, FRESH], lo[::-1], lo[::-1] + 1.0)
    model.update([0, FRESH], lo[::-1], lo[::-1] + 1.0)
    bp.remove([1, PLANE])
    model.remove([1, PLANE])
    orc.assert_matches(bp, model, np.random.default_rng(21), 3, label="after recovery: ")


@pytest.mark.parametrize("value", [NAN, INF, -1.0])
def test_inactive_hash_grid_refuses_bad_update(value):
    """Below the activation threshold the grids' pass does not run: the boxes are checked
    before they are stored."""
    from parsim.broadphase import BroadPhaseError, HierarchicalHashGrid

    bp = HierarchicalHashGrid(activation_threshold=1000)
    bp.add(np.arange(N), *_all_boxes())
    before = bp.pairs().tolist()
    new_lo, new_hi = _all_boxes(5, 1, value, 1)
    with pytest.raises(BroadPhaseError, match=r"\bhi\[5\]"):
        bp.update(np.arange(N), new_lo, new_hi)
    assert not bp.active
    assert bp.pairs().tolist() == before


@pytest.mark.parametrize("cfg", [c for c in CONFIG_PARAMS if c.values[0].is_hhg])
@pytest.mark.parametrize("where", ["add", "update"])
def test_hash_grid_refuses_a_cell_too_large_for_float64(cfg, where):
    """A box whose edges are finite but whose grid's cell (edge x hierarchy factor) would not
    be: a cell of infinite size made the grid search loop forever (2026-11-29). Now refused,
    naming the row, and nothing changes. (A guard ends the process if the call hangs.)"""
    import faulthandler

    from parsim.broadphase import BroadPhaseError

    bp, model = populated(cfg)
    before = snapshot(bp)
    lo, hi = _all_boxes()
    lo[11, 2], hi[11, 2] = -8e307, 8e307  # an edge of 1.6e308: finite, twice it is not
    faulthandler.dump_traceback_later(600, exit=True)
    try:
        with pytest.raises(BroadPhaseError, match=r"row 11 of lo/hi.*float64"):
            if where == "add":
                bp.add(np.arange(FRESH, FRESH + N), lo, hi)
            else:
                bp.update(np.arange(N), lo, hi)
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert snapshot(bp) == before
    orc.assert_matches(bp, model, label="after the error: ")


@pytest.mark.parametrize("cfg", CONFIG_PARAMS)
def test_removed_ids_are_unknown(cfg):
    from parsim.broadphase import BroadPhaseError

    bp, model = populated(cfg)
    bp.remove([3, PLANE])
    model.remove([3, PLANE])
    for call in (lambda: bp.update([3], unit([0, 0, 0]), unit([1, 1, 1])),
                 lambda: bp.remove([3]),
                 lambda: bp.remove([PLANE])):
        before = snapshot(bp)
        with pytest.raises(BroadPhaseError):
            call()
        assert snapshot(bp) == before
    orc.assert_matches(bp, model)
    bp.add([3], unit([0, 0, 0]), unit([9, 9, 9]))  # the id is free again
    model.add([3], unit([0, 0, 0]), unit([9, 9, 9]))
    orc.assert_matches(bp, model, np.random.default_rng(22), 3)


def test_broadphase_error_is_a_value_error():
    from parsim.broadphase import BroadPhaseError

    assert issubclass(BroadPhaseError, ValueError)
