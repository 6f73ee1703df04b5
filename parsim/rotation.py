"""Quaternion and rotation helpers shared by the shapes, the narrow phase and the integrator.

Orientation is a unit quaternion ``(w, x, y, z)`` that rotates body-frame vectors into the world
frame: ``x_world = R(q) @ x_body + position``. The helpers take and return scalars (tuples), so
calling them from other kernels costs no array reference counting.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def quat_matrix(w, x, y, z):
    """Row-major 3x3 rotation matrix of the unit quaternion (w, x, y, z), as a 9-tuple."""
    return (1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y - w * z), 2.0 * (x * z + w * y),
            2.0 * (x * y + w * z), 1.0 - 2.0 * (x * x + z * z), 2.0 * (y * z - w * x),
            2.0 * (x * z - w * y), 2.0 * (y * z + w * x), 1.0 - 2.0 * (x * x + y * y))


@njit(cache=True, inline="always")
def quat_mul(aw, ax, ay, az, bw, bx, by, bz):
    """Hamilton product a * b."""
    return (aw * bw - ax * bx - ay * by - az * bz,
            aw * bx + ax * bw + ay * bz - az * by,
            aw * by - ax * bz + ay * bw + az * bx,
            aw * bz + ax * by - ay * bx + az * bw)


@njit(cache=True, inline="always")
def quat_from_rotation_vector(vx, vy, vz):
    """Quaternion of the rotation by angle |v| about v (exponential map, exact in float64: below
    an angle of 1e-2 the series of cos(a/2) and sin(a/2)/a to a^6 is used, whose truncation
    error a^8/10^7 is far below one ulp, and which avoids the trigonometric calls)."""
    a2 = vx * vx + vy * vy + vz * vz
    if a2 < 1e-4:
        c = 1.0 - a2 * (1.0 / 8.0 - a2 * (1.0 / 384.0 - a2 * (1.0 / 46080.0)))
        s = 0.5 - a2 * (1.0 / 48.0 - a2 * (1.0 / 3840.0 - a2 * (1.0 / 645120.0)))
        return (c, vx * s, vy * s, vz * s)
    angle = math.sqrt(a2)
    s = math.sin(0.5 * angle) / angle
    return (math.cos(0.5 * angle), vx * s, vy * s, vz * s)


@njit(cache=True, inline="always")
def rotate_world_inertia(R, ix, iy, iz, vx, vy, vz):
    """``R diag(ix, iy, iz) R^T v``: a body-frame diagonal tensor applied to a world vector."""
    bx = R[0] * vx + R[3] * vy + R[6] * vz
    by = R[1] * vx + R[4] * vy + R[7] * vz
    bz = R[2] * vx + R[5] * vy + R[8] * vz
    bx *= ix
    by *= iy
    bz *= iz
    return (R[0] * bx + R[1] * by + R[2] * bz,
            R[3] * bx + R[4] * by + R[5] * bz,
            R[6] * bx + R[7] * by + R[8] * bz)


def normalized_quaternion(q, name: str = "orientation") -> np.ndarray:
    """Validate and normalise a user-given quaternion (w, x, y, z)."""
    a = np.asarray(q, dtype=np.float64).reshape(-1)
    if a.shape != (4,) or not np.isfinite(a).all():
        raise ValueError(f"{name} must be 4 finite numbers (w, x, y, z), got {q!r}")
    norm = float(np.linalg.norm(a))
    if norm < 1e-12:
        raise ValueError(f"{name} must be a non-zero quaternion (w, x, y, z), got {q!r}")
    return a / norm
