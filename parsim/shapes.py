"""The shapes parsim simulates: codes, parameters, mass properties from density, and AABBs.

Shape codes and the meaning of the three shape parameters (``params[i]``) are a contract shared by
the body storage, the narrow phase and the HDF5 output:

=========  ====  =========================================================================
shape      code  params
=========  ====  =========================================================================
sphere     0     (radius, 0, 0)
box        1     (hx, hy, hz): half extents along the body-frame axes
capsule    2     (radius, half_length, 0): a segment from -half_length to +half_length along
                 the body-frame x axis, swept by a ball of ``radius``
plane      3     (nx, ny, nz): unit outward normal (world frame); the body position is a point
                 of the plane and the solid is the half-space behind it. Planes are infinite
                 and fixed.
=========  ====  =========================================================================

Body-frame axes are the principal axes, so the inertia tensor is stored as its diagonal.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .rotation import quat_matrix

SPHERE, BOX, CAPSULE, PLANE = 0, 1, 2, 3
SHAPE_NAMES = ("sphere", "box", "capsule", "plane")


def mass_properties(shape: int, params, density: float) -> tuple[float, np.ndarray]:
    """Mass and body-frame principal moments of inertia of a finite shape of uniform density."""
    p = np.asarray(params, dtype=np.float64)
    if shape == SPHERE:
        r = p[0]
        m = density * 4.0 / 3.0 * math.pi * r**3
        return m, np.full(3, 0.4 * m * r * r)
    if shape == BOX:
        a, b, c = p
        m = density * 8.0 * a * b * c
        return m, np.array([(b * b + c * c), (a * a + c * c), (a * a + b * b)]) * m / 3.0
    if shape == CAPSULE:
        r, h = p[0], p[1]
        m_cyl = density * math.pi * r * r * 2.0 * h
        m_sph = density * 4.0 / 3.0 * math.pi * r**3
        axial = m_cyl * r * r / 2.0 + m_sph * 0.4 * r * r
        # cylinder about a diameter through its centre, plus both hemispheres moved to the ends
        # (each hemisphere's centroid lies 3r/8 beyond the end of the segment)
        transverse = (m_cyl * ((2.0 * h) ** 2 / 12.0 + r * r / 4.0)
                      + m_sph * (0.4 * r * r + h * h + 0.75 * h * r))
        return m_cyl + m_sph, np.array([axial, transverse, transverse])
    raise ValueError(f"shape {shape} has no finite mass")


def bounding_radius(shape: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Radius of the smallest centred ball holding each finite shape (0 for planes)."""
    r = np.zeros(shape.shape[0])
    s = shape == SPHERE
    r[s] = params[s, 0]
    b = shape == BOX
    r[b] = np.linalg.norm(params[b], axis=1)
    c = shape == CAPSULE
    r[c] = params[c, 0] + params[c, 1]
    return r


@njit(cache=True)
def compute_aabbs(shape, params, position, orientation, n, margin, lo, hi):
    """Write the AABB of bodies ``0..n-1``, enlarged by ``margin`` on every side, into lo/hi.

    Reads shape, params, position, orientation; writes lo, hi (float64[>=n, 3]). Planes get
    their position as a degenerate box (they are registered as infinite bodies elsewhere).
    """
    for i in range(n):
        s = shape[i]
        ex = 0.0
        ey = 0.0
        ez = 0.0
        if s == SPHERE:
            ex = ey = ez = params[i, 0]
        elif s == BOX or s == CAPSULE:
            q = orientation[i]
            R = quat_matrix(q[0], q[1], q[2], q[3])
            if s == BOX:
                hx, hy, hz = params[i, 0], params[i, 1], params[i, 2]
                ex = abs(R[0]) * hx + abs(R[1]) * hy + abs(R[2]) * hz
                ey = abs(R[3]) * hx + abs(R[4]) * hy + abs(R[5]) * hz
                ez = abs(R[6]) * hx + abs(R[7]) * hy + abs(R[8]) * hz
            else:
                r, h = params[i, 0], params[i, 1]
                ex = abs(R[0]) * h + r
                ey = abs(R[3]) * h + r
                ez = abs(R[6]) * h + r
        lo[i, 0] = position[i, 0] - ex - margin
        lo[i, 1] = position[i, 1] - ey - margin
        lo[i, 2] = position[i, 2] - ez - margin
        hi[i, 0] = position[i, 0] + ex + margin
        hi[i, 1] = position[i, 1] + ey + margin
        hi[i, 2] = position[i, 2] + ez + margin
