"""Velocity-Verlet time integration of translation and rotation, as numba kernels.

Translation is LAMMPS's ``nve/sphere``: half kick, drift, (forces), half kick. Rotation:

* bodies with isotropic inertia (spheres) kick the angular velocity directly, ``w += dt/2 tau/I``,
  and rotate the orientation by the exact exponential map ``q <- exp(dt w) q``;
* other bodies kick the world-frame angular momentum ``L = R I R^T w`` and rotate with the
  midpoint rule (``w`` at the half-rotated orientation), then recover ``w = R I^-1 R^T L``. Without
  torque ``L`` is exactly constant, which carries the gyroscopic term (the intermediate-axis flip
  of a tumbling box is reproduced, see ``tests/test_engine_validation.py``).

Quaternions are renormalised every step. Fixed bodies never move.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .parallel import dual

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


def _first_half(n, dt, flags, shape, inv_mass, inertia, inv_inertia, bounding_radius, position,
               orientation, velocity, angular_velocity, force, torque, ref_position,
               ref_orientation):
    """Half kick + drift + rotation of bodies 0..n-1. Returns the largest distance any point of
    a body has moved since its reference pose (translation + bounding radius x rotation angle),
    which decides when the neighbour list is rebuilt."""
    h = 0.5 * dt
    moved = 0.0
    for i in prange(n):
        if flags[i] & FIXED:
            continue
        im = inv_mass[i]
        for d in range(3):
            velocity[i, d] += h * force[i, d] * im
            position[i, d] += dt * velocity[i, d]
        q = row4(orientation, i)
        # rows as tuples, not views (a view costs atomic reference-count updates per body)
        ii = row3(inv_inertia, i)
        if _isotropic(shape, inertia, i):
            for d in range(3):
                angular_velocity[i, d] += h * torque[i, d] * ii[0]
            w = row3(angular_velocity, i)
            if w[0] == 0.0 and w[1] == 0.0 and w[2] == 0.0:
                # no rotation: _rotate's identity factor changes nothing but the renormalisation
                s = 1.0 / math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
                qn = (q[0] * s, q[1] * s, q[2] * s, q[3] * s)
            else:
                qn = _rotate(q, w[0], w[1], w[2], dt)
        else:
            L0 = _angular_momentum(q, row3(inertia, i), row3(angular_velocity, i))
            L = (L0[0] + h * torque[i, 0], L0[1] + h * torque[i, 1], L0[2] + h * torque[i, 2])
            w1 = _body_omega(q, ii, L)
            qh = _rotate(q, w1[0], w1[1], w1[2], h)
            wh = _body_omega(qh, ii, L)
            qn = _rotate(q, wh[0], wh[1], wh[2], dt)
            w2 = _body_omega(qn, ii, L)
            angular_velocity[i, 0], angular_velocity[i, 1], angular_velocity[i, 2] = w2
        orientation[i, 0], orientation[i, 1], orientation[i, 2], orientation[i, 3] = qn
        dx = position[i, 0] - ref_position[i, 0]
        dy = position[i, 1] - ref_position[i, 1]
        dz = position[i, 2] - ref_position[i, 2]
        m = math.sqrt(dx * dx + dy * dy + dz * dz)
        if shape[i] != SPHERE:
            r = row4(ref_orientation, i)
            c = abs(qn[0] * r[0] + qn[1] * r[1] + qn[2] * r[2] + qn[3] * r[3])
            m += bounding_radius[i] * 2.0 * math.acos(min(c, 1.0))
        moved = max(moved, m)
    return moved


def _second_half(n, dt, flags, shape, inv_mass, inertia, inv_inertia, orientation, velocity,
                angular_velocity, force, torque, position, lo, hi, walled):
    """Second half kick of bodies 0..n-1 with the new forces, and the end-of-step state check
    of :func:`check_state` in the same pass (it would read position, velocity and angular
    velocity once more: 0.2-0.3 ms per step at 64,000 bodies). Returns what
    :func:`check_state` returns for the kicked state: (index, cause) of the first bad body, or
    (-1, 0)."""
    h = 0.5 * dt
    lo3, hi3 = (lo[0], lo[1], lo[2]), (hi[0], hi[1], hi[2])
    walled3 = (walled[0], walled[1], walled[2])
    first = 2 * n          # 2 * index + (0: non-finite, 1: outside); min over bodies = first
    for i in prange(n):
        if not (flags[i] & FIXED):
            im = inv_mass[i]
            for d in range(3):
                velocity[i, d] += h * force[i, d] * im
            ii = row3(inv_inertia, i)
            if _isotropic(shape, inertia, i):
                for d in range(3):
                    angular_velocity[i, d] += h * torque[i, d] * ii[0]
            else:
                q = row4(orientation, i)
                L0 = _angular_momentum(q, row3(inertia, i), row3(angular_velocity, i))
                L = (L0[0] + h * torque[i, 0], L0[1] + h * torque[i, 1],
                     L0[2] + h * torque[i, 2])
                w = _body_omega(q, ii, L)
                angular_velocity[i, 0], angular_velocity[i, 1], angular_velocity[i, 2] = w
        code = _state_code(i, flags[i] & FIXED, row3(position, i), row3(velocity, i),
                           row3(angular_velocity, i), lo3, hi3, walled3)
        if code >= 0:
            first = min(first, code)
    if first == 2 * n:
        return -1, 0
    return first // 2, 1 + first % 2


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
def kinetic_energy(n, flags, mass, inertia, orientation, velocity, angular_velocity):
    """Translational and rotational kinetic energy of bodies 0..n-1 (fixed bodies excluded),
    summed in slot order."""
    et = 0.0
    er = 0.0
    for i in range(n):
        if flags[i] & FIXED:
            continue
        v = velocity[i]
        et += 0.5 * mass[i] * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2])
        q = orientation[i]
        L = _angular_momentum((q[0], q[1], q[2], q[3]), inertia[i], angular_velocity[i])
        w = angular_velocity[i]
        er += 0.5 * (L[0] * w[0] + L[1] * w[1] + L[2] * w[2])
    return et, er


first_half = dual(_first_half)
second_half = dual(_second_half)
