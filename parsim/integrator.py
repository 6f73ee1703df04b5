"""Velocity-Verlet time integration of translation and rotation, as numba kernels.

Translation is LAMMPS's ``nve/sphere``: half kick, drift, (forces), half kick. Rotation:

* bodies with isotropic inertia (spheres) kick the angular velocity directly, ``w += dt/2 tau/I``,
  and rotate the orientation by the exact exponential map ``q <- exp(dt w) q``;
* other bodies kick the world-frame angular momentum ``L = R I R^T w`` and rotate with the
  midpoint rule (``w`` at the half-rotated orientation), then recover ``w = R I^-1 R^T L``. Without
  torque ``L`` is exactly constant, which carries the gyroscopic term (the intermediate-axis flip
  of a tumbling box is reproduced, see
  ``tests/test_engine_spheres.py::test_torque_free_asymmetric_box_keeps_angular_momentum_and_flips``).

Quaternions are renormalised every step. Fixed bodies never move.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .parallel import dual, variant

from .bodies import FIXED
from .rotation import quat_from_rotation_vector, quat_matrix, quat_mul
from .rows import row3, row4
from .shapes import SPHERE


@njit(cache=True, inline="always")
def _body_omega(q, ii, L):
    """w = R I^-1 R^T L for orientation q (4-tuple) and inverse principal moments ii."""
    R = quat_matrix(q[0], q[1], q[2], q[3])
    bx = R[0] * L[0] + R[3] * L[1] + R[6] * L[2]
    by = R[1] * L[0] + R[4] * L[1] + R[7] * L[2]
    bz = R[2] * L[0] + R[5] * L[1] + R[8] * L[2]
    bx *= ii[0]
    by *= ii[1]
    bz *= ii[2]
    return (R[0] * bx + R[1] * by + R[2] * bz,
            R[3] * bx + R[4] * by + R[5] * bz,
            R[6] * bx + R[7] * by + R[8] * bz)


@njit(cache=True, inline="always")
def _angular_momentum(q, inertia, w):
    R = quat_matrix(q[0], q[1], q[2], q[3])
    bx = (R[0] * w[0] + R[3] * w[1] + R[6] * w[2]) * inertia[0]
    by = (R[1] * w[0] + R[4] * w[1] + R[7] * w[2]) * inertia[1]
    bz = (R[2] * w[0] + R[5] * w[1] + R[8] * w[2]) * inertia[2]
    return (R[0] * bx + R[1] * by + R[2] * bz,
            R[3] * bx + R[4] * by + R[5] * bz,
            R[6] * bx + R[7] * by + R[8] * bz)


@njit(cache=True, inline="always")
def _rotate(q, wx, wy, wz, h):
    e = quat_from_rotation_vector(wx * h, wy * h, wz * h)
    r = quat_mul(e[0], e[1], e[2], e[3], q[0], q[1], q[2], q[3])
    s = 1.0 / math.sqrt(r[0] * r[0] + r[1] * r[1] + r[2] * r[2] + r[3] * r[3])
    return (r[0] * s, r[1] * s, r[2] * s, r[3] * s)


@njit(cache=True, inline="always")
def _isotropic(shape, inertia, i):
    """Equal principal moments (spheres always: the inertia array, 24 bytes per body, is then
    not read; the kernels are bound by memory traffic at 64,000 bodies)."""
    return shape[i] == SPHERE or (inertia[i, 0] == inertia[i, 1] and inertia[i, 1] == inertia[i, 2])


@njit(cache=True, inline="always")
def _turned(b0, b1, b2, q0, q1, q2, q3, dt):
    """Orientation (q0..q3) turned by the angular velocity (b0, b1, b2) over dt with the
    series branch of :func:`parsim.rotation.quat_from_rotation_vector` (the expressions of
    :func:`_rotate`, exact to rounding below 1e-2 rad), renormalised, and the squared angle,
    which says whether the series applies (< 1e-4). Inlined: the loops stay vectorised."""
    e0, e1, e2 = b0 * dt, b1 * dt, b2 * dt
    s2 = e0 * e0 + e1 * e1 + e2 * e2
    c = 1.0 - s2 * (1.0 / 8.0 - s2 * (1.0 / 384.0 - s2 * (1.0 / 46080.0)))
    s = 0.5 - s2 * (1.0 / 48.0 - s2 * (1.0 / 3840.0 - s2 * (1.0 / 645120.0)))
    r = quat_mul(c, e0 * s, e1 * s, e2 * s, q0, q1, q2, q3)
    # not turning: only the renormalisation
    still = (b0 == 0.0) & (b1 == 0.0) & (b2 == 0.0)
    t = (q0, q1, q2, q3) if still else r
    g = 1.0 / math.sqrt(t[0] * t[0] + t[1] * t[1] + t[2] * t[2] + t[3] * t[3])
    return (t[0] * g, t[1] * g, t[2] * g, t[3] * g), s2


#: bodies per chunk of the vectorised loops (one chunk's rows stay in the L1/L2 caches between
#: its loops; the threaded builds hand out chunks)
CHUNK = 1024


@njit(cache=True, error_model="numpy")
def _translate(m, dt, flags, inv_mass, x, v, f, x0):
    """Half kick and drift of bodies 0..m-1 of flat (3 m) views; returns the largest squared
    distance from the reference position of a movable body as the bits of a non-negative float
    (an integer maximum vectorises, a float one does not; NaN never wins, as with max())."""
    h = 0.5 * dt
    d2bits = np.int64(0)
    for i in range(m):
        free = (flags[i] & FIXED) == 0
        im = inv_mass[i]
        j = 3 * i
        v0, v1, v2 = v[j], v[j + 1], v[j + 2]
        p0, p1, p2 = x[j], x[j + 1], x[j + 2]
        u0 = v0 + h * f[j] * im
        u1 = v1 + h * f[j + 1] * im
        u2 = v2 + h * f[j + 2] * im
        r0 = p0 + dt * u0
        r1 = p1 + dt * u1
        r2 = p2 + dt * u2
        v[j], v[j + 1], v[j + 2] = (u0, u1, u2) if free else (v0, v1, v2)
        x[j], x[j + 1], x[j + 2] = (r0, r1, r2) if free else (p0, p1, p2)
        dx, dy, dz = r0 - x0[j], r1 - x0[j + 1], r2 - x0[j + 2]
        d2 = dx * dx + dy * dy + dz * dz
        d2bits = max(d2bits, np.float64(d2 if free & (d2 >= 0.0) else 0.0).view(np.int64))
    return d2bits


@njit(cache=True, error_model="numpy")
def _turn_spheres(m, dt, flags, shape, ii0, w, tq, q):
    """Kick and rotation of the movable spheres among bodies 0..m-1 of flat views, with the
    expressions of :func:`_rotate` (the series branch of rotation.quat_from_rotation_vector);
    other bodies keep their rows. ``ii0``: first inverse principal moments, contiguous (see
    :func:`_kick_turn`). Returns how many movable bodies are left to the serial loop
    (non-spheres, and spheres turning by more than 1e-2 rad in the step)."""
    h = 0.5 * dt
    rest = 0
    for i in range(m):
        free = (flags[i] & FIXED) == 0
        sph = free & (shape[i] == SPHERE)
        j = 3 * i
        k = ii0[i]
        a0, a1, a2 = w[j], w[j + 1], w[j + 2]
        b0 = a0 + h * tq[j] * k
        b1 = a1 + h * tq[j + 1] * k
        b2 = a2 + h * tq[j + 2] * k
        w[j], w[j + 1], w[j + 2] = (b0, b1, b2) if sph else (a0, a1, a2)
        n4 = 4 * i
        q0, q1, q2, q3 = q[n4], q[n4 + 1], q[n4 + 2], q[n4 + 3]
        t, s2 = _turned(b0, b1, b2, q0, q1, q2, q3, dt)
        done = sph & (s2 < 1e-4)
        q[n4], q[n4 + 1], q[n4 + 2], q[n4 + 3] = t if done else (q0, q1, q2, q3)
        rest += np.int64(free & ~done)
    return rest


def _first_half(n, dt, flags, shape, inv_mass, inertia, inv_inertia, iso_inv_inertia,
               bounding_radius, position, orientation, velocity, angular_velocity, force, torque,
               ref_position, ref_orientation):
    """Half kick + drift + rotation of bodies 0..n-1. Returns the largest distance any point of
    a body has moved since its reference pose (translation + bounding radius x rotation angle),
    which decides when the neighbour list is rebuilt.

    The common case runs in branch-free loops that LLVM vectorises (:func:`_translate`,
    :func:`_turn_spheres`, over chunks of :data:`CHUNK` bodies and flat views of the arrays:
    a 2-d index ``a[i, d]`` has a run-time row stride, which stops the vectoriser). A serial
    loop then does what they left: movable non-spheres, and spheres turning by more than 1e-2
    rad in the step. The bits are those of the plain one-body-at-a-time form (tested).
    ``iso_inv_inertia``: ``inv_inertia[:n, 0]`` as a contiguous array (see :func:`_kick_turn`)."""
    h = 0.5 * dt
    x, v, f = position.reshape(-1), velocity.reshape(-1), force.reshape(-1)
    w, tq, q = angular_velocity.reshape(-1), torque.reshape(-1), orientation.reshape(-1)
    x0 = ref_position.reshape(-1)
    d2bits = np.int64(0)
    rest = 0
    for c in prange((n + CHUNK - 1) // CHUNK):
        a = c * CHUNK
        b = min(a + CHUNK, n)
        d2bits = max(d2bits, _translate(b - a, dt, flags[a:b], inv_mass[a:b], x[3 * a:3 * b],
                                        v[3 * a:3 * b], f[3 * a:3 * b], x0[3 * a:3 * b]))
        rest += _turn_spheres(b - a, dt, flags[a:b], shape[a:b], iso_inv_inertia[a:b],
                              w[3 * a:3 * b], tq[3 * a:3 * b], q[4 * a:4 * b])
    moved = math.sqrt(np.int64(d2bits).view(np.float64))
    if rest == 0:
        return moved
    for i in range(n):
        if flags[i] & FIXED:
            continue
        qo = row4(orientation, i)
        if shape[i] == SPHERE:
            # turning by more than 1e-2 rad (_turn_spheres kept q): the trigonometric branch
            wi = row3(angular_velocity, i)
            e0, e1, e2 = wi[0] * dt, wi[1] * dt, wi[2] * dt
            if e0 * e0 + e1 * e1 + e2 * e2 >= 1e-4:
                qn = _rotate(qo, wi[0], wi[1], wi[2], dt)
                orientation[i, 0], orientation[i, 1], orientation[i, 2], orientation[i, 3] = qn
            continue
        ii3 = row3(inv_inertia, i)
        if _isotropic(shape, inertia, i):
            for d in range(3):
                angular_velocity[i, d] += h * torque[i, d] * ii3[0]
            wi = row3(angular_velocity, i)
            if wi[0] == 0.0 and wi[1] == 0.0 and wi[2] == 0.0:
                s = 1.0 / math.sqrt(qo[0] * qo[0] + qo[1] * qo[1] + qo[2] * qo[2] + qo[3] * qo[3])
                qn = (qo[0] * s, qo[1] * s, qo[2] * s, qo[3] * s)
            else:
                qn = _rotate(qo, wi[0], wi[1], wi[2], dt)
        else:
            L0 = _angular_momentum(qo, row3(inertia, i), row3(angular_velocity, i))
            L = (L0[0] + h * torque[i, 0], L0[1] + h * torque[i, 1], L0[2] + h * torque[i, 2])
            w1 = _body_omega(qo, ii3, L)
            qh = _rotate(qo, w1[0], w1[1], w1[2], h)
            wh = _body_omega(qh, ii3, L)
            qn = _rotate(qo, wh[0], wh[1], wh[2], dt)
            w2 = _body_omega(qn, ii3, L)
            angular_velocity[i, 0], angular_velocity[i, 1], angular_velocity[i, 2] = w2
        orientation[i, 0], orientation[i, 1], orientation[i, 2], orientation[i, 3] = qn
        dx = position[i, 0] - ref_position[i, 0]
        dy = position[i, 1] - ref_position[i, 1]
        dz = position[i, 2] - ref_position[i, 2]
        r4 = row4(ref_orientation, i)
        c4 = abs(qn[0] * r4[0] + qn[1] * r4[1] + qn[2] * r4[2] + qn[3] * r4[3])
        moved = max(moved, math.sqrt(dx * dx + dy * dy + dz * dz)
                    + bounding_radius[i] * 2.0 * math.acos(min(c4, 1.0)))
    return moved


@njit(cache=True, inline="always")
def _finite3(a, b, c):
    return math.isfinite(a) & math.isfinite(b) & math.isfinite(c)


@njit(cache=True, error_model="numpy")
def _kick_and_check(m, base, none, dt, flags, shape, inv_mass, x, v, f, ii0, w, tq, lo, hi,
                    walled):
    """Second half kick of the movable bodies' velocity and the movable spheres' angular
    velocity among bodies 0..m-1 of flat views, and the state code of :func:`_state_code`
    (index ``base + i``) of every body but the movable non-spheres (their angular velocity is
    kicked later). Returns (smallest code or ``none``, number of movable non-spheres)."""
    h = 0.5 * dt
    lo0, lo1, lo2, hi0, hi1, hi2 = lo[0], lo[1], lo[2], hi[0], hi[1], hi[2]
    wa0, wa1, wa2 = walled[0], walled[1], walled[2]
    first = none
    rest = 0
    for i in range(m):
        free = (flags[i] & FIXED) == 0
        sph = shape[i] == SPHERE
        im = inv_mass[i]
        j = 3 * i
        v0, v1, v2 = v[j], v[j + 1], v[j + 2]
        u0 = v0 + h * f[j] * im
        u1 = v1 + h * f[j + 1] * im
        u2 = v2 + h * f[j + 2] * im
        y0, y1, y2 = (u0, u1, u2) if free else (v0, v1, v2)
        v[j], v[j + 1], v[j + 2] = y0, y1, y2
        k = ii0[i]
        a0, a1, a2 = w[j], w[j + 1], w[j + 2]
        b0 = a0 + h * tq[j] * k
        b1 = a1 + h * tq[j + 1] * k
        b2 = a2 + h * tq[j + 2] * k
        kicked = free & sph
        c0, c1, c2 = (b0, b1, b2) if kicked else (a0, a1, a2)
        w[j], w[j + 1], w[j + 2] = c0, c1, c2
        p0, p1, p2 = x[j], x[j + 1], x[j + 2]
        # whether the kept values (y, c) are finite, from the two candidates of each and the
        # same conditions as the selects: reading y and c here made LLVM's cost model leave the
        # loop scalar for AMD targets (znver3/znver4, 2026-11-28; see _kick_drift)
        fin_v = (free & _finite3(u0, u1, u2)) | (~free & _finite3(v0, v1, v2))
        fin_w = (kicked & _finite3(b0, b1, b2)) | (~kicked & _finite3(a0, a1, a2))
        finite = _finite3(p0, p1, p2) & fin_v & fin_w
        out = ((wa0 & ((p0 < lo0) | (p0 >= hi0))) | (wa1 & ((p1 < lo1) | (p1 >= hi1)))
               | (wa2 & ((p2 < lo2) | (p2 >= hi2))))
        g = 2 * (base + i)
        code = g if not finite else (g + 1 if free & out else none)
        first = min(first, code if sph | ~free else none)
        rest += np.int64(free & ~sph)
    return first, rest


def _second_half(n, dt, flags, shape, inv_mass, inertia, inv_inertia, iso_inv_inertia,
                 orientation, velocity, angular_velocity, force, torque, position, lo, hi, walled):
    """Second half kick of bodies 0..n-1 with the new forces, and the end-of-step state check
    of :func:`check_state` in the same call (as a separate pass it cost 0.2-0.3 ms per step at
    64,000 bodies). Returns what :func:`check_state` returns for the kicked state: (index,
    cause) of the first bad body, or (-1, 0). Split as :func:`_first_half`: vectorised chunks
    (:func:`_kick_and_check`), then a serial loop over the movable non-spheres, if any."""
    h = 0.5 * dt
    x, v, f = position.reshape(-1), velocity.reshape(-1), force.reshape(-1)
    w, tq = angular_velocity.reshape(-1), torque.reshape(-1)
    none = 2 * n           # 2 * index + (0: non-finite, 1: outside); min over bodies = first
    first = none
    rest = 0
    for c in prange((n + CHUNK - 1) // CHUNK):
        a = c * CHUNK
        b = min(a + CHUNK, n)
        fc, rc = _kick_and_check(b - a, a, none, dt, flags[a:b], shape[a:b], inv_mass[a:b],
                                 x[3 * a:3 * b], v[3 * a:3 * b], f[3 * a:3 * b],
                                 iso_inv_inertia[a:b], w[3 * a:3 * b], tq[3 * a:3 * b], lo, hi,
                                 walled)
        first = min(first, fc)
        rest += rc
    if rest > 0:
        lo3, hi3 = (lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])
        walled3 = (walled[0], walled[1], walled[2])
        for i in range(n):
            if flags[i] & FIXED or shape[i] == SPHERE:
                continue
            ii3 = row3(inv_inertia, i)
            if _isotropic(shape, inertia, i):
                for d in range(3):
                    angular_velocity[i, d] += h * torque[i, d] * ii3[0]
            else:
                q = row4(orientation, i)
                L0 = _angular_momentum(q, row3(inertia, i), row3(angular_velocity, i))
                L = (L0[0] + h * torque[i, 0], L0[1] + h * torque[i, 1],
                     L0[2] + h * torque[i, 2])
                wn = _body_omega(q, ii3, L)
                angular_velocity[i, 0], angular_velocity[i, 1], angular_velocity[i, 2] = wn
            code = _state_code(i, False, row3(position, i), row3(velocity, i),
                               row3(angular_velocity, i), lo3, hi3, walled3)
            if code >= 0:
                first = min(first, code)
    if first == none:
        return -1, 0
    return first // 2, 1 + first % 2


@njit(cache=True, inline="always")
def _bounds(lo, hi, walled):
    """Per axis the (low, high) bounds a movable body's centre must keep: the domain's on a
    checked (walled) axis, (-inf, inf) on the others."""
    inf = math.inf
    return ((lo[0] if walled[0] else -inf), (lo[1] if walled[1] else -inf),
            (lo[2] if walled[2] else -inf), (hi[0] if walled[0] else inf),
            (hi[1] if walled[1] else inf), (hi[2] if walled[2] else inf))


#: whether :func:`_kick_drift` computes the displacement (a constant: see ``_kick_drift_free``)
_TRACK = True


@njit(cache=True, error_model="numpy")
def _kick_drift(m, dt, flags, inv_mass, x, v, f, x0, lo, hi, walled):
    """Second half kick of one step and half kick + drift of the next, with the same force,
    of bodies 0..m-1 of flat views: the bits of :func:`_kick_and_check` then
    :func:`_translate`, with every array read and written once. Returns (number of bodies
    whose new centre or velocity is not finite, or whose centre left the domain on a checked
    axis; the d2bits of :func:`_translate`; the largest squared speed of a movable body after
    the kicks, as bits too). A count, not the first index: an integer sum vectorises, and a
    non-zero count only sends the step to the exact check. The build :func:`_kick_drift_free`
    (``_TRACK`` False) leaves out the displacement (d2bits 0) and does not read ``x0``: 24 of
    the pass's ~290 bytes per sphere, for the steps whose caller has a bound instead."""
    h = 0.5 * dt
    l0, l1, l2, g0, g1, g2 = _bounds(lo, hi, walled)
    nbad = np.int64(0)
    d2bits = np.int64(0)
    u2bits = np.int64(0)
    for i in range(m):
        free = (flags[i] & FIXED) == 0
        im = inv_mass[i]
        j = 3 * i
        f0, f1, f2 = f[j], f[j + 1], f[j + 2]
        v0, v1, v2 = v[j], v[j + 1], v[j + 2]
        u0 = v0 + h * f0 * im
        u1 = v1 + h * f1 * im
        u2 = v2 + h * f2 * im
        z0 = u0 + h * f0 * im
        z1 = u1 + h * f1 * im
        z2 = u2 + h * f2 * im
        p0, p1, p2 = x[j], x[j + 1], x[j + 2]
        r0 = p0 + dt * z0
        r1 = p1 + dt * z1
        r2 = p2 + dt * z2
        # the kept values (a fixed body keeps its row) under other names: the bounds, the
        # displacement and the speed below read the moved values r, z, which they count for
        # movable bodies only (the same numbers); reading the kept ones there made LLVM's cost
        # model leave the loop scalar for AMD targets (znver3/znver4; 1.5x slower, 2026-11-28)
        y0, y1, y2 = (z0, z1, z2) if free else (v0, v1, v2)
        k0, k1, k2 = (r0, r1, r2) if free else (p0, p1, p2)
        v[j], v[j + 1], v[j + 2] = y0, y1, y2
        x[j], x[j + 1], x[j + 2] = k0, k1, k2
        s = ((k0 + k1) + k2) + ((y0 + y1) + y2)
        out = free & ((r0 < l0) | (r0 >= g0) | (r1 < l1) | (r1 >= g1) | (r2 < l2) | (r2 >= g2))
        nbad += np.int64((not math.isfinite(s)) | out)
        if _TRACK:
            dx, dy, dz = r0 - x0[j], r1 - x0[j + 1], r2 - x0[j + 2]
            d2 = dx * dx + dy * dy + dz * dz
            d2bits = max(d2bits, np.float64(d2 if free & (d2 >= 0.0) else 0.0).view(np.int64))
        u2 = z0 * z0 + z1 * z1 + z2 * z2
        u2bits = max(u2bits, np.float64(u2 if free & (u2 >= 0.0) else 0.0).view(np.int64))
    return nbad, d2bits, u2bits


_kick_drift_free = variant(_kick_drift.py_func, "_free", options={"error_model": "numpy"},
                           _TRACK=False)


@njit(cache=True, error_model="numpy")
def _kick_turn(m, dt, flags, shape, ii0, w, tq, q):
    """The angular part of :func:`_kick_drift` for spheres: both half kicks of the angular
    velocity and the rotation of :func:`_turn_spheres`, same bits. ``ii0``: the first inverse
    principal moment of each body, contiguous: read from the rows of ``inv_inertia`` (one value
    in three, which the vectorised loop gathers) it cost far more than its bytes
    (:func:`both_halves` 0.85 -> 0.63 ms per call at 125,000 spheres, 0.043 -> 0.033 at 8,000,
    Zen 5 host, 2026-11-29). Returns (number of bodies with a non-finite angular velocity,
    number of movable bodies left to the serial loop)."""
    h = 0.5 * dt
    nbad = np.int64(0)
    rest = 0
    for i in range(m):
        free = (flags[i] & FIXED) == 0
        sph = free & (shape[i] == SPHERE)
        j = 3 * i
        k = ii0[i]
        t0, t1, t2 = tq[j], tq[j + 1], tq[j + 2]
        a0, a1, a2 = w[j], w[j + 1], w[j + 2]
        b0 = a0 + h * t0 * k
        b1 = a1 + h * t1 * k
        b2 = a2 + h * t2 * k
        b0 = b0 + h * t0 * k
        b1 = b1 + h * t1 * k
        b2 = b2 + h * t2 * k
        # kept rows under other names; the rotation takes the kicked b, as _turn_spheres (a
        # body that is not a movable sphere keeps its q anyway): turning the kept values
        # instead made LLVM leave the loop scalar for AMD targets (2026-11-28)
        c0, c1, c2 = (b0, b1, b2) if sph else (a0, a1, a2)
        w[j], w[j + 1], w[j + 2] = c0, c1, c2
        nbad += np.int64(not math.isfinite((c0 + c1) + c2))
        n4 = 4 * i
        q0, q1, q2, q3 = q[n4], q[n4 + 1], q[n4 + 2], q[n4 + 3]
        t, s2 = _turned(b0, b1, b2, q0, q1, q2, q3, dt)
        done = sph & (s2 < 1e-4)
        q[n4], q[n4 + 1], q[n4 + 2], q[n4 + 3] = t if done else (q0, q1, q2, q3)
        rest += np.int64(free & ~done)
    return nbad, rest


def _both_halves(n, dt, flags, shape, inv_mass, iso_inv_inertia, position, orientation,
                 velocity, angular_velocity, force, torque, ref_position, lo, hi, walled,
                 track=True):
    """:func:`second_half` of a step then :func:`first_half` of the next, in one pass over the
    arrays (the force does not change between them), for bodies 0..n-1 of which no movable
    one is a non-sphere (the caller's condition). The same bits as the two calls; one pass
    moves 40 % fewer bytes (1.3-1.5x faster kernels at 8,000 and 64,000 spheres).
    ``iso_inv_inertia``: float64[n], ``inv_inertia[:n, 0]`` as a contiguous array (a sphere's
    inverse moment; see :func:`_kick_turn`).

    Returns (moved, bad, odd, speed): ``moved`` as :func:`first_half` returns it (``inf``
    when not ``track``: then the displacement is not computed and ``ref_position`` not read,
    for a caller that holds a bound of it, see ``Simulation._advance``); ``bad`` the
    number of bodies whose new state fails the cheap form of :func:`check_state` (non-finite
    centre, velocity or angular velocity, or a movable centre outside ``[lo, hi)`` on a
    ``walled`` axis); ``odd`` the number of movable non-spheres met (must be 0); ``speed`` the
    largest speed of a movable body in the drift (see :func:`drift_bound`). The check of the
    step the second kick ends is not done here: the caller knows before the call that it
    passes (see ``Simulation._advance``)."""
    x, v, f = position.reshape(-1), velocity.reshape(-1), force.reshape(-1)
    w, tq, q = angular_velocity.reshape(-1), torque.reshape(-1), orientation.reshape(-1)
    x0 = ref_position.reshape(-1)
    d2bits = np.int64(0)
    u2bits = np.int64(0)
    bad = 0
    rest = 0
    for c in prange((n + CHUNK - 1) // CHUNK):
        a = c * CHUNK
        b = min(a + CHUNK, n)
        if track:
            nb, d, u = _kick_drift(b - a, dt, flags[a:b], inv_mass[a:b], x[3 * a:3 * b],
                                   v[3 * a:3 * b], f[3 * a:3 * b], x0[3 * a:3 * b], lo, hi,
                                   walled)
        else:
            nb, d, u = _kick_drift_free(b - a, dt, flags[a:b], inv_mass[a:b], x[3 * a:3 * b],
                                        v[3 * a:3 * b], f[3 * a:3 * b], x0[3 * a:3 * b], lo,
                                        hi, walled)
        nt, r = _kick_turn(b - a, dt, flags[a:b], shape[a:b], iso_inv_inertia[a:b],
                           w[3 * a:3 * b], tq[3 * a:3 * b], q[4 * a:4 * b])
        d2bits = max(d2bits, d)
        u2bits = max(u2bits, u)
        bad += nb + nt
        rest += r
    moved = math.sqrt(np.int64(d2bits).view(np.float64)) if track else math.inf
    speed = math.sqrt(np.int64(u2bits).view(np.float64))
    odd = 0
    if rest > 0:
        for i in range(n):
            if flags[i] & FIXED:
                continue
            if shape[i] != SPHERE:
                odd += 1
                continue
            # turning by more than 1e-2 rad (_kick_turn kept q): the trigonometric branch
            wi = row3(angular_velocity, i)
            e0, e1, e2 = wi[0] * dt, wi[1] * dt, wi[2] * dt
            if e0 * e0 + e1 * e1 + e2 * e2 >= 1e-4:
                qn = _rotate(row4(orientation, i), wi[0], wi[1], wi[2], dt)
                orientation[i, 0], orientation[i, 1], orientation[i, 2], orientation[i, 3] = qn
    return moved, bad, odd, speed


@njit(cache=True, error_model="numpy")
def _count_unchecked(m, flags, x, v, w, lo, hi, walled):
    """The cheap check of :func:`_both_halves` for bodies 0..m-1 of flat views, alone; also
    the largest squared speed of a movable body (bits)."""
    l0, l1, l2, g0, g1, g2 = _bounds(lo, hi, walled)
    nbad = np.int64(0)
    u2bits = np.int64(0)
    for i in range(m):
        free = (flags[i] & FIXED) == 0
        j = 3 * i
        r0, r1, r2 = x[j], x[j + 1], x[j + 2]
        v0, v1, v2 = v[j], v[j + 1], v[j + 2]
        s = (((r0 + r1) + r2) + ((v0 + v1) + v2)) + ((w[j] + w[j + 1]) + w[j + 2])
        out = free & ((r0 < l0) | (r0 >= g0) | (r1 < l1) | (r1 >= g1) | (r2 < l2) | (r2 >= g2))
        nbad += np.int64((not math.isfinite(s)) | out)
        u2 = v0 * v0 + v1 * v1 + v2 * v2
        u2bits = max(u2bits, np.float64(u2 if free & (u2 >= 0.0) else 0.0).view(np.int64))
    return nbad, u2bits


@njit(cache=True)
def count_unchecked(n, flags, position, velocity, angular_velocity, lo, hi, walled):
    """(number of bodies among 0..n-1 that fail the cheap check of :func:`_both_halves`,
    largest speed of a movable one)."""
    k, u2bits = _count_unchecked(n, flags, position.reshape(-1), velocity.reshape(-1),
                                 angular_velocity.reshape(-1), lo, hi, walled)
    return k, math.sqrt(np.int64(u2bits).view(np.float64))


@njit(cache=True, error_model="numpy")
def screen_loads(n, force, torque):
    """(number of non-finite values among the force and torque components of bodies 0..n-1,
    largest |force component|). A sum of the two is tested: an overflow to infinity counts
    too, which is harmless (a non-zero count only sends the step to the exact check). The
    largest component, with the largest inverse mass, bounds the acceleration of
    :func:`drift_bound` (|F| / m <= sqrt(3) x that x that): one flat loop, as fast as the
    count alone at 8,000 bodies (3.8 us; a per-body |F| / m took 7)."""
    f, t = force.reshape(-1), torque.reshape(-1)
    k = np.int64(0)
    fbits = np.int64(0)
    for j in range(3 * n):
        x = f[j]
        k += np.int64(not math.isfinite(x + t[j]))
        fbits = max(fbits, np.float64(abs(x)).view(np.int64))
    return k, np.int64(fbits).view(np.float64)


@njit(cache=True, error_model="numpy")
def screen_rows(rows, m, force, torque):
    """:func:`screen_loads` over the bodies ``rows[:m]`` only (the rows a step's sparse sums
    wrote; see ``Simulation._screen_loads``)."""
    k = np.int64(0)
    fbits = np.int64(0)
    for q in range(m):
        i = rows[q]
        for d in range(3):
            x = force[i, d]
            k += np.int64(not math.isfinite(x + torque[i, d]))
            fbits = max(fbits, np.float64(abs(x)).view(np.int64))
    return k, np.int64(fbits).view(np.float64)


#: ranks of at least this many owned bodies let the joint pass skip the displacement while
#: the bound of :func:`drift_bound` rules out a rebuild (``Simulation._advance``): at 125,000
#: spheres the pass reads 3 MB less; below, the arrays stay in the caches and the exact value
#: keeps the bound tight
BOUND_ONLY_MIN = 32768

#: a float64 above sqrt(3): |F| <= SQRT3_UP x the largest |component|
SQRT3_UP = 1.7320508075688776


def drift_bound(moved, speed, accel, dt, slack):
    """An upper bound of the displacement (since the reference poses) that the next drift
    will give, computed in floating point as :func:`first_half` computes it: ``moved`` this
    step's, ``speed`` the largest speed of a movable body after this step's first kick,
    ``accel`` the largest |force| / mass of this step (the two kicks add ``dt * accel`` at most
    to the speed of the drift). ``slack`` covers the rounding of the positions (about 1e-15
    times their magnitude). Lets several ranks skip the reduction of the displacement (see
    ``Simulation._advance``)."""
    return (moved + dt * (speed + dt * accel)) * (1.0 + 1e-12) + slack


@njit(cache=True, inline="always")
def _state_code(i, fixed, p, v, w, lo, hi, walled):
    """2 i if body i has a non-finite state, 2 i + 1 if its centre is outside the domain on a
    walled axis (movable bodies only), else -1. Takes tuples, not arrays: an array argument of
    an inlined helper costs atomic reference-count updates per call (10x this check's time)."""
    for d in range(3):
        if not (math.isfinite(p[d]) and math.isfinite(v[d]) and math.isfinite(w[d])):
            return 2 * i
    if fixed:
        return -1
    for d in range(3):
        if walled[d] and (p[d] < lo[d] or p[d] >= hi[d]):
            return 2 * i + 1
    return -1


@njit(cache=True)
def check_state(n, flags, position, velocity, angular_velocity, lo, hi, walled):
    """First body (index, cause) with a non-finite state (cause 1) or a centre outside the
    domain on a non-periodic axis (cause 2); (-1, 0) when all is well."""
    lo3, hi3 = (lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])
    walled3 = (walled[0], walled[1], walled[2])
    for i in range(n):
        code = _state_code(i, flags[i] & FIXED, row3(position, i), row3(velocity, i),
                           row3(angular_velocity, i), lo3, hi3, walled3)
        if code >= 0:
            return code // 2, 1 + code % 2
    return -1, 0


@njit(cache=True)
def outside(n, flags, position, lo, hi, walled, out):
    """Mark (out[i] = True) movable bodies whose centre left the domain on a walled axis."""
    k = 0
    for i in range(n):
        o = False
        if not (flags[i] & FIXED):
            for d in range(3):
                if walled[d] and (position[i, d] < lo[d] or position[i, d] >= hi[d]):
                    o = True
        out[i] = o
        if o:
            k += 1
    return k


@njit(cache=True)
def wrap_periodic(n, position, wraps, lo, box, periodic):
    """Move the centres of bodies 0..n-1 back into the box on the periodic axes: a centre
    ``k = floor((x - lo) / box)`` box lengths out moves by ``-k * box`` and its wrap count by
    ``k``. Returns the number of bodies moved. One pass instead of a dozen numpy passes over
    the positions (the 8,000-sphere gas: 0.27 ms per rebuild before)."""
    moved = 0
    for i in range(n):
        m = False
        for d in range(3):
            if periodic[d]:
                k = np.floor((position[i, d] - lo[d]) / box[d])
                if k != 0.0 and np.isfinite(k):
                    position[i, d] -= k * box[d]
                    wraps[i, d] += np.int32(k)
                    m = True
        if m:
            moved += 1
    return moved


@njit(cache=True)
def kinetic_energies(n, flags, mass, inertia, orientation, velocity, angular_velocity):
    """Translational + rotational kinetic energy of each of bodies 0..n-1 (0 for fixed
    bodies): float64[n], each computed from the body's own state alone (so a body has the same
    value on any rank)."""
    out = np.zeros(n)
    for i in range(n):
        if flags[i] & FIXED:
            continue
        v = velocity[i]
        et = 0.5 * mass[i] * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
        q = orientation[i]
        L = _angular_momentum((q[0], q[1], q[2], q[3]), inertia[i], angular_velocity[i])
        w = angular_velocity[i]
        out[i] = et + 0.5 * (L[0] * w[0] + L[1] * w[1] + L[2] * w[2])
    return out


first_half = dual(_first_half, error_model="numpy")
second_half = dual(_second_half, error_model="numpy")
both_halves = dual(_both_halves, error_model="numpy")
