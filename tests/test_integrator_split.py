"""The integration kernels' split into vectorised loops and a serial rest changes no bit.

``first_half`` and ``second_half`` treat the common case (movable spheres turning by less than
1e-2 rad per step) in branch-free loops and leave the rest (non-spheres, fast-turning spheres)
to a serial loop. Which body goes where is the risk: a body handled twice, or by the wrong
branch, changes its state. The reference here is the plain form, one body at a time in Python,
built from the integrator's own helpers (``_rotate``, ``_angular_momentum``, ``_body_omega``);
both builds (serial, threaded) must give its bits for every kind of body.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from parsim import integrator as I
from parsim.bodies import FIXED
from parsim.shapes import BOX, CAPSULE, SPHERE

FIRST = ("flags", "shape", "inv_mass", "inertia", "inv_inertia", "iso_inv_inertia",
         "bounding_radius", "position",
         "orientation", "velocity", "angular_velocity", "force", "torque", "ref_position",
         "ref_orientation")
SECOND = ("flags", "shape", "inv_mass", "inertia", "inv_inertia", "iso_inv_inertia",
          "orientation", "velocity",
          "angular_velocity", "force", "torque", "position")


def _state(n, seed):
    """Spheres turning slowly, not at all and fast (|w| dt > 1e-2), fixed spheres and boxes,
    anisotropic boxes, cubes (isotropic non-spheres) and capsules, in a mixed order."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(n, 4))
    q /= np.linalg.norm(q, axis=1)[:, None]
    ii = np.repeat(rng.uniform(5.0, 20.0, (n, 1)), 3, axis=1)     # isotropic, per body
    s = dict(flags=np.zeros(n, np.uint8), shape=np.full(n, SPHERE, np.int8),
             inv_mass=rng.uniform(0.5, 2.0, n), inertia=1.0 / ii,
             inv_inertia=ii, bounding_radius=rng.uniform(0.1, 1.0, n),
             position=rng.uniform(-5, 5, (n, 3)), orientation=q,
             velocity=rng.uniform(-1, 1, (n, 3)), angular_velocity=rng.uniform(-5, 5, (n, 3)),
             force=rng.uniform(-1, 1, (n, 3)), torque=rng.uniform(-1, 1, (n, 3)))
    s["ref_position"] = s["position"] + rng.normal(scale=0.01, size=(n, 3))
    s["ref_orientation"] = s["orientation"].copy()
    kind = rng.integers(0, 8, n)
    s["angular_velocity"][kind == 1] = 0.0          # not turning ...
    s["torque"][kind == 1] = 0.0                    # ... and not kicked
    s["angular_velocity"][kind == 2] *= 400.0       # |w| dt > 1e-2 at dt = 1e-3
    s["flags"][kind == 3] = FIXED
    s["shape"][kind == 4] = BOX
    s["inertia"][kind == 4] = [1.0, 2.0, 3.0]
    s["inv_inertia"][kind == 4] = [1.0, 0.5, 1.0 / 3.0]
    s["shape"][kind == 5] = BOX                     # a cube: isotropic, not a sphere
    s["shape"][kind == 6] = CAPSULE
    s["inertia"][kind == 6] = [0.3, 0.3, 0.2]
    s["inv_inertia"][kind == 6] = 1.0 / s["inertia"][kind == 6]
    s["flags"][(kind == 7) & (np.arange(n) % 2 == 0)] = FIXED
    s["shape"][(kind == 7) & (np.arange(n) % 2 == 0)] = BOX
    s["iso_inv_inertia"] = s["inv_inertia"][:, 0].copy()
    return s


def _isotropic(s, i):
    return s["shape"][i] == SPHERE or (s["inertia"][i, 0] == s["inertia"][i, 1]
                                       and s["inertia"][i, 1] == s["inertia"][i, 2])


def _first_reference(n, dt, s):
    h = 0.5 * dt
    moved = 0.0
    for i in range(n):
        if s["flags"][i] & FIXED:
            continue
        for d in range(3):
            s["velocity"][i, d] += h * s["force"][i, d] * s["inv_mass"][i]
            s["position"][i, d] += dt * s["velocity"][i, d]
        q = tuple(s["orientation"][i])
        ii = tuple(s["inv_inertia"][i])
        if _isotropic(s, i):
            for d in range(3):
                s["angular_velocity"][i, d] += h * s["torque"][i, d] * ii[0]
            w = s["angular_velocity"][i]
            if w[0] == 0.0 and w[1] == 0.0 and w[2] == 0.0:
                g = 1.0 / math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
                qn = (q[0] * g, q[1] * g, q[2] * g, q[3] * g)
            else:
                qn = I._rotate(q, w[0], w[1], w[2], dt)
        else:
            L0 = I._angular_momentum(q, tuple(s["inertia"][i]), tuple(s["angular_velocity"][i]))
            L = tuple(L0[d] + h * s["torque"][i, d] for d in range(3))
            w1 = I._body_omega(q, ii, L)
            qh = I._rotate(q, w1[0], w1[1], w1[2], h)
            wh = I._body_omega(qh, ii, L)
            qn = I._rotate(q, wh[0], wh[1], wh[2], dt)
            s["angular_velocity"][i] = I._body_omega(qn, ii, L)
        s["orientation"][i] = qn
        dx = s["position"][i] - s["ref_position"][i]
        m = math.sqrt(dx[0] * dx[0] + dx[1] * dx[1] + dx[2] * dx[2])
        if s["shape"][i] != SPHERE:
            r = s["ref_orientation"][i]
            c = abs(qn[0] * r[0] + qn[1] * r[1] + qn[2] * r[2] + qn[3] * r[3])
            m += s["bounding_radius"][i] * 2.0 * math.acos(min(c, 1.0))
        moved = max(moved, m)
    return moved


def _second_reference(n, dt, s):
    h = 0.5 * dt
    for i in range(n):
        if s["flags"][i] & FIXED:
            continue
        for d in range(3):
            s["velocity"][i, d] += h * s["force"][i, d] * s["inv_mass"][i]
        ii = tuple(s["inv_inertia"][i])
        if _isotropic(s, i):
            for d in range(3):
                s["angular_velocity"][i, d] += h * s["torque"][i, d] * ii[0]
        else:
            q = tuple(s["orientation"][i])
            L0 = I._angular_momentum(q, tuple(s["inertia"][i]), tuple(s["angular_velocity"][i]))
            L = tuple(L0[d] + h * s["torque"][i, d] for d in range(3))
            s["angular_velocity"][i] = I._body_omega(q, ii, L)


def _same_bits(a, b):
    for k in a:
        x, y = a[k], b[k]
        if x.dtype == np.float64:
            x, y = x.view(np.uint64), y.view(np.uint64)
        assert np.array_equal(x, y), k


@pytest.mark.parametrize("dt", [1e-4, 1e-3])
def test_split_integration_gives_the_bits_of_the_plain_form(dt):
    n = 5000
    s = _state(n, seed=11)
    kinds = np.unique(s["shape"][(s["flags"] & FIXED) == 0]).tolist()
    assert kinds == [SPHERE, BOX, CAPSULE]
    fast = np.linalg.norm(s["angular_velocity"], axis=1) * dt > 1e-2
    assert 0 < np.count_nonzero(fast & (s["shape"] == SPHERE)) or dt == 1e-4
    ref = {k: v.copy() for k, v in s.items()}
    moved = _first_reference(n, dt, ref)
    _second_reference(n, dt, ref)
    for build in (0, 1):
        got = {k: v.copy() for k, v in s.items()}
        m = I.first_half[build](n, dt, *[got[k] for k in FIRST])
        assert m == moved
        bad = I.second_half[build](n, dt, *[got[k] for k in SECOND], np.full(3, -10.0),
                                   np.full(3, 10.0), np.ones(3, np.bool_))
        assert tuple(int(x) for x in bad) == (-1, 0)
        _same_bits(got, ref)


def test_only_spheres_take_no_serial_pass_and_keep_their_bits():
    """All movable spheres turning slowly (the benchmark case): the serial loop finds nothing
    to do (the vectorised kernels leave no body to it: the count both halves go by is 0), and
    a fixed body in the middle is left exactly as it was."""
    n = 3000
    s = _state(n, seed=12)
    s["shape"][:] = SPHERE
    s["inertia"][:] = 0.1
    s["inv_inertia"][:] = 10.0
    s["iso_inv_inertia"][:] = 10.0
    s["flags"][:] = 0
    s["flags"][1500] = FIXED
    w = s["angular_velocity"]
    fast = np.linalg.norm(w, axis=1) * 1e-4 >= 1e-2    # _state's fast turners (kind 2) ...
    assert fast.any()
    w[fast] /= 400.0                                    # ... turn slowly too
    c = {k: v.copy().reshape(-1) for k, v in s.items()}
    assert I._turn_spheres(n, 1e-4, c["flags"], c["shape"], c["iso_inv_inertia"],
                           c["angular_velocity"], c["torque"], c["orientation"]) == 0
    _, rest = I._kick_and_check(n, 0, 2 * n, 1e-4, c["flags"], c["shape"], c["inv_mass"],
                                c["position"], c["velocity"], c["force"], c["iso_inv_inertia"],
                                c["angular_velocity"], c["torque"], np.full(3, -10.0),
                                np.full(3, 10.0), np.ones(3, np.bool_))
    assert rest == 0
    ref = {k: v.copy() for k, v in s.items()}
    moved = _first_reference(n, 1e-4, ref)
    _second_reference(n, 1e-4, ref)
    got = {k: v.copy() for k, v in s.items()}
    assert I.first_half[0](n, 1e-4, *[got[k] for k in FIRST]) == moved
    I.second_half[0](n, 1e-4, *[got[k] for k in SECOND], np.full(3, -10.0), np.full(3, 10.0),
                     np.ones(3, np.bool_))
    _same_bits(got, ref)
    for k in s:
        assert np.array_equal(got[k][1500], s[k][1500]) or k in ("flags", "shape"), k


def test_wrap_periodic_matches_the_formula():
    """``wrap_periodic`` (the rebuild's wrap into the box) gives the bits of the plain formula:
    on periodic axes a centre ``k = floor((x - lo) / L)`` box lengths out moves by ``-k L`` and
    its wrap count by ``k``; other axes, and centres inside, are left alone. Centres exactly on
    a bound, several boxes out and on both sides included."""
    rng = np.random.default_rng(3)
    lo = np.array([-2.0, 0.5, 10.0])
    hi = np.array([3.0, 4.0, 11.0])
    periodic = np.array([True, False, True])
    n = 400
    pos = rng.uniform(lo - 3 * (hi - lo), hi + 3 * (hi - lo), (n, 3))
    pos[:50] = rng.uniform(lo, hi, (50, 3))                  # inside: not moved
    pos[50:60, 0] = hi[0]
    pos[60:70, 2] = lo[2]
    pos[70:80, 0] = lo[0] - (hi[0] - lo[0])
    wraps = rng.integers(-3, 4, (n, 3)).astype(np.int32)
    box = np.where(periodic, hi - lo, 1.0)
    k = np.floor((pos - lo) / box) * periodic
    want_pos, want_wraps = pos.copy(), wraps.copy()
    rows = np.flatnonzero(k.any(axis=1))
    for i in rows:
        for d in np.flatnonzero(periodic):
            want_pos[i, d] -= k[i, d] * box[d]
            want_wraps[i, d] += np.int32(k[i, d])
    got_pos, got_wraps = pos.copy(), wraps.copy()
    moved = I.wrap_periodic(n, got_pos, got_wraps, lo, box, periodic)
    assert moved == rows.size and moved > 0
    assert got_pos.tobytes() == want_pos.tobytes()
    assert (got_wraps == want_wraps).all()
    inside = (got_pos >= lo) & (got_pos < hi)
    assert inside[:, periodic].all()
    assert (got_pos[:, ~periodic] == pos[:, ~periodic]).all()
