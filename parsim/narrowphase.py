"""Narrow phase: contact normal, penetration depth and contact point(s) of every shape pair.

Conventions (the engine relies on them):

* ``collide(shape_a, params_a, pos_a, quat_a, shape_b, params_b, pos_b, quat_b, normals, points,
  depths) -> k`` fills ``k <= MAX_CONTACTS`` contacts (``params``, ``pos``, ``quat``: arrays or
  tuples; the engine passes tuples, which cost no reference counting per call);
* the normal is a unit vector from B toward A (moving A along it separates the bodies);
* only penetrating contacts are reported (depth > 0);
* a contact point lies midway between the two surfaces;
* the argument order does not matter: a pair is computed in a canonical order (by shape code,
  and for two bodies of the same shape lexicographically by parameters, position, orientation)
  and the normals are negated if that swapped the bodies, so ``collide(b, a)`` returns exactly
  the contacts of ``collide(a, b)`` with opposite normals.

Shapes and parameters are those of :mod:`parsim.shapes`. Algorithms:

* sphere-sphere, sphere-plane, capsule-plane (each end cap), box-plane (penetrating vertices,
  the four deepest): closed form;
* sphere-box: closest point of the box (clamped in the box frame), or, for a centre inside the
  box, the way out through the nearest face;
* sphere-capsule, capsule-capsule: closest points of point/segment or segment/segment (two
  points for overlapping parallel segments, so a capsule lying on another does not pivot);
* capsule-box: the closest point of the axis to the box in closed form (the squared distance
  is convex and piecewise quadratic along the axis); if the axis meets the box, the minimum of
  the (convex) signed distance by golden-section search; when both end caps penetrate
  through the same face the two end contacts are returned instead (a capsule lying on a box),
  and when the capsule lies along a face or an edge beyond its ends, the two ends of the part
  of the segment over that face (along that edge) are;
* box-box: separating-axis test over the 15 axes (face axes preferred over edge axes within a
  tolerance); for a face axis the incident face is clipped against the side planes of the
  reference face (Sutherland-Hodgman) and up to four well-spread points are kept; for an edge
  axis one point midway between the closest points of the two edges.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .rotation import quat_matrix
from .shapes import BOX, PLANE, SPHERE

MAX_CONTACTS = 4
#: length of the float64 scratch buffer of :func:`collide_into` (no allocation per call)
WORK_SIZE = 224


@njit(cache=True, inline="always")
def _put(k, normals, points, depths, nx, ny, nz, px, py, pz, depth):
    normals[k, 0] = nx
    normals[k, 1] = ny
    normals[k, 2] = nz
    points[k, 0] = px
    points[k, 1] = py
    points[k, 2] = pz
    depths[k] = depth


@njit(cache=True)
def _spheres(ax, ay, az, ra, bx, by, bz, rb, normals, points, depths, k):
    """Ball A (centre, radius) against ball B; appends at index k; returns the new count."""
    dx, dy, dz = ax - bx, ay - by, az - bz
    rs = ra + rb
    d2 = dx * dx + dy * dy + dz * dz
    if d2 >= rs * rs:
        return k
    d = math.sqrt(d2)
    if d > 1e-14:
        nx, ny, nz = dx / d, dy / d, dz / d
    else:
        nx, ny, nz = 0.0, 0.0, 1.0
    depth = rs - d
    s = rb - 0.5 * depth
    _put(k, normals, points, depths, nx, ny, nz, bx + nx * s, by + ny * s, bz + nz * s, depth)
    return k + 1


@njit(cache=True)
def _ball_plane(cx, cy, cz, r, px, py, pz, nx, ny, nz, normals, points, depths, k):
    d = (cx - px) * nx + (cy - py) * ny + (cz - pz) * nz
    depth = r - d
    if depth <= 0.0:
        return k
    s = 0.5 * (r + d)
    _put(k, normals, points, depths, nx, ny, nz, cx - s * nx, cy - s * ny, cz - s * nz, depth)
    return k + 1


@njit(cache=True)
def _ball_box(cx, cy, cz, r, bpos, R, h, normals, points, depths, k):
    """Ball (centre, radius) = A against box B (position, rotation 9-tuple, half extents)."""
    wx, wy, wz = cx - bpos[0], cy - bpos[1], cz - bpos[2]
    p0 = R[0] * wx + R[3] * wy + R[6] * wz
    p1 = R[1] * wx + R[4] * wy + R[7] * wz
    p2 = R[2] * wx + R[5] * wy + R[8] * wz
    q0 = min(max(p0, -h[0]), h[0])
    q1 = min(max(p1, -h[1]), h[1])
    q2 = min(max(p2, -h[2]), h[2])
    d0, d1, d2 = p0 - q0, p1 - q1, p2 - q2
    dist2 = d0 * d0 + d1 * d1 + d2 * d2
    if dist2 > 0.0:
        if dist2 >= r * r:
            return k
        dist = math.sqrt(dist2)
        n0, n1, n2 = d0 / dist, d1 / dist, d2 / dist
        depth = r - dist
    else:
        # centre inside: leave through the nearest face
        g0 = h[0] - abs(p0)
        g1 = h[1] - abs(p1)
        g2 = h[2] - abs(p2)
        n0 = n1 = n2 = 0.0
        if g0 <= g1 and g0 <= g2:
            n0 = 1.0 if p0 >= 0 else -1.0
            q0 = n0 * h[0]
            depth = r + g0
        elif g1 <= g2:
            n1 = 1.0 if p1 >= 0 else -1.0
            q1 = n1 * h[1]
            depth = r + g1
        else:
            n2 = 1.0 if p2 >= 0 else -1.0
            q2 = n2 * h[2]
            depth = r + g2
    nx = R[0] * n0 + R[1] * n1 + R[2] * n2
    ny = R[3] * n0 + R[4] * n1 + R[5] * n2
    nz = R[6] * n0 + R[7] * n1 + R[8] * n2
    sx = bpos[0] + R[0] * q0 + R[1] * q1 + R[2] * q2
    sy = bpos[1] + R[3] * q0 + R[4] * q1 + R[5] * q2
    sz = bpos[2] + R[6] * q0 + R[7] * q1 + R[8] * q2
    # midway between the box surface point and the ball's deepest point c - r n
    _put(k, normals, points, depths, nx, ny, nz, 0.5 * (sx + cx - r * nx),
         0.5 * (sy + cy - r * ny), 0.5 * (sz + cz - r * nz), depth)
    return k + 1


@njit(cache=True, inline="always")
def _segment(pos, R, hl):
    """End points of a capsule's segment (body x axis)."""
    ex, ey, ez = R[0] * hl, R[3] * hl, R[6] * hl
    return (pos[0] - ex, pos[1] - ey, pos[2] - ez, pos[0] + ex, pos[1] + ey, pos[2] + ez)


@njit(cache=True, inline="always")
def _closest_on_segment(px, py, pz, ax, ay, az, bx, by, bz):
    dx, dy, dz = bx - ax, by - ay, bz - az
    L = dx * dx + dy * dy + dz * dz
    t = 0.0
    if L > 0.0:
        t = ((px - ax) * dx + (py - ay) * dy + (pz - az) * dz) / L
        t = min(max(t, 0.0), 1.0)
    return ax + t * dx, ay + t * dy, az + t * dz


@njit(cache=True)
def _segments_closest(p1x, p1y, p1z, q1x, q1y, q1z, p2x, p2y, p2z, q2x, q2y, q2z):
    """Parameters (s, t) of the closest points of segments p1q1 and p2q2 (Ericson 5.1.9)."""
    d1x, d1y, d1z = q1x - p1x, q1y - p1y, q1z - p1z
    d2x, d2y, d2z = q2x - p2x, q2y - p2y, q2z - p2z
    rx, ry, rz = p1x - p2x, p1y - p2y, p1z - p2z
    a = d1x * d1x + d1y * d1y + d1z * d1z
    e = d2x * d2x + d2y * d2y + d2z * d2z
    f = d2x * rx + d2y * ry + d2z * rz
    eps = 1e-300
    if a <= eps and e <= eps:
        return 0.0, 0.0
    if a <= eps:
        return 0.0, min(max(f / e, 0.0), 1.0)
    c = d1x * rx + d1y * ry + d1z * rz
    if e <= eps:
        return min(max(-c / a, 0.0), 1.0), 0.0
    b = d1x * d2x + d1y * d2y + d1z * d2z
    denom = a * e - b * b
    s = 0.0
    if denom > 1e-12 * a * e:
        s = min(max((b * f - c * e) / denom, 0.0), 1.0)
    t = (b * s + f) / e
    if t < 0.0:
        t = 0.0
        s = min(max(-c / a, 0.0), 1.0)
    elif t > 1.0:
        t = 1.0
        s = min(max((b - c) / a, 0.0), 1.0)
    return s, t


@njit(cache=True)
def _capsules(a0x, a0y, a0z, a1x, a1y, a1z, ra, b0x, b0y, b0z, b1x, b1y, b1z, rb,
              normals, points, depths, k):
    """Capsule A (segment, radius) against capsule B; one point, or two for parallel overlap."""
    dax, day, daz = a1x - a0x, a1y - a0y, a1z - a0z
    dbx, dby, dbz = b1x - b0x, b1y - b0y, b1z - b0z
    la2 = dax * dax + day * day + daz * daz
    lb2 = dbx * dbx + dby * dby + dbz * dbz
    cx = day * dbz - daz * dby
    cy = daz * dbx - dax * dbz
    cz = dax * dby - day * dbx
    if la2 > 0.0 and lb2 > 0.0 and cx * cx + cy * cy + cz * cz < 1e-6 * la2 * lb2:
        # (nearly) parallel: contacts at both ends of the overlap of A's projection onto B
        lb = math.sqrt(lb2)
        ux, uy, uz = dbx / lb, dby / lb, dbz / lb
        s0 = (a0x - b0x) * ux + (a0y - b0y) * uy + (a0z - b0z) * uz
        s1 = (a1x - b0x) * ux + (a1y - b0y) * uy + (a1z - b0z) * uz
        lo = max(min(s0, s1), 0.0)
        hi = min(max(s0, s1), lb)
        if hi - lo > 1e-9 * lb:
            k0 = k
            for s in (lo, hi):
                # point of B's axis at s, and the matching point of A's axis
                bx, by, bz = b0x + s * ux, b0y + s * uy, b0z + s * uz
                px, py, pz = _closest_on_segment(bx, by, bz, a0x, a0y, a0z, a1x, a1y, a1z)
                k = _spheres(px, py, pz, ra, bx, by, bz, rb, normals, points, depths, k)
            if k > k0:
                return k
    s, t = _segments_closest(a0x, a0y, a0z, a1x, a1y, a1z, b0x, b0y, b0z, b1x, b1y, b1z)
    return _spheres(a0x + s * dax, a0y + s * day, a0z + s * daz, ra,
                    b0x + t * dbx, b0y + t * dby, b0z + t * dbz, rb, normals, points, depths, k)


@njit(cache=True, inline="always")
def _box_signed_distance(x, y, z, bpos, R, h):
    wx, wy, wz = x - bpos[0], y - bpos[1], z - bpos[2]
    q0 = abs(R[0] * wx + R[3] * wy + R[6] * wz) - h[0]
    q1 = abs(R[1] * wx + R[4] * wy + R[7] * wz) - h[1]
    q2 = abs(R[2] * wx + R[5] * wy + R[8] * wz) - h[2]
    o0, o1, o2 = max(q0, 0.0), max(q1, 0.0), max(q2, 0.0)
    return math.sqrt(o0 * o0 + o1 * o1 + o2 * o2) + min(max(q0, max(q1, q2)), 0.0)


@njit(cache=True)
def _capsule_box(a0x, a0y, a0z, a1x, a1y, a1z, r, bpos, R, h, normals, points, depths, k):
    """Capsule A (segment, radius) against box B."""
    k0 = k
    k = _ball_box(a0x, a0y, a0z, r, bpos, R, h, normals, points, depths, k)
    k = _ball_box(a1x, a1y, a1z, r, bpos, R, h, normals, points, depths, k)
    if k - k0 == 2:
        dot = (normals[k0, 0] * normals[k0 + 1, 0] + normals[k0, 1] * normals[k0 + 1, 1]
               + normals[k0, 2] * normals[k0 + 1, 2])
        if dot > 0.999:
            return k                                     # lying on a face: both end contacts
    k = k0
    dx, dy, dz = a1x - a0x, a1y - a0y, a1z - a0z
    t, dist = _segment_box_closest(a0x, a0y, a0z, dx, dy, dz, bpos, R, h)
    if dist > 0.0:
        # the core is outside the box. If its closest point faces a face (edge) of the box, the
        # capsule may lie along that face (edge) beyond its ends: then the support is the part
        # of the segment inside the face's (edge's) slabs, and its two ends are the contacts
        if dist >= r:
            return k
        if k + 2 <= MAX_CONTACTS:
            k2 = _capsule_box_feature(a0x, a0y, a0z, dx, dy, dz, t, r, r - dist, bpos, R, h,
                                      normals, points, depths, k)
            if k2 == k + 2:
                return k2
        return _ball_box(a0x + t * dx, a0y + t * dy, a0z + t * dz, r, bpos, R, h,
                         normals, points, depths, k)
    # the core meets the box: the signed distance along the axis is convex (piecewise linear
    # inside the box), golden-section search for its minimum, the deepest point
    lo, hi = 0.0, 1.0
    g = 0.6180339887498949
    x1 = hi - g * (hi - lo)
    x2 = lo + g * (hi - lo)
    f1 = _box_signed_distance(a0x + x1 * dx, a0y + x1 * dy, a0z + x1 * dz, bpos, R, h)
    f2 = _box_signed_distance(a0x + x2 * dx, a0y + x2 * dy, a0z + x2 * dz, bpos, R, h)
    for _ in range(60):
        if f1 <= f2:
            hi = x2
            x2, f2 = x1, f1
            x1 = hi - g * (hi - lo)
            f1 = _box_signed_distance(a0x + x1 * dx, a0y + x1 * dy, a0z + x1 * dz, bpos, R, h)
        else:
            lo = x1
            x1, f1 = x2, f2
            x2 = lo + g * (hi - lo)
            f2 = _box_signed_distance(a0x + x2 * dx, a0y + x2 * dy, a0z + x2 * dz, bpos, R, h)
    t = 0.5 * (lo + hi)
    fe0 = _box_signed_distance(a0x, a0y, a0z, bpos, R, h)
    fe1 = _box_signed_distance(a1x, a1y, a1z, bpos, R, h)
    ft = _box_signed_distance(a0x + t * dx, a0y + t * dy, a0z + t * dz, bpos, R, h)
    if fe0 < ft and fe0 <= fe1:
        t = 0.0
    elif fe1 < ft:
        t = 1.0
    return _ball_box(a0x + t * dx, a0y + t * dy, a0z + t * dz, r, bpos, R, h,
                     normals, points, depths, k)


@njit(cache=True)
def _segment_box_closest(a0x, a0y, a0z, dx, dy, dz, bpos, R, h):
    """Parameter s in [0, 1] of the point of segment a0 + s d closest to box B, and its distance
    (0 if the segment meets the box). Exact: the squared distance is convex and piecewise
    quadratic in s, so its derivative is monotone and piecewise linear between the (at most 6)
    parameters where the segment crosses a slab boundary; the root is bracketed by them and
    found by linear interpolation."""
    wx, wy, wz = a0x - bpos[0], a0y - bpos[1], a0z - bpos[2]
    c = (R[0] * wx + R[3] * wy + R[6] * wz, R[1] * wx + R[4] * wy + R[7] * wz,
         R[2] * wx + R[5] * wy + R[8] * wz)
    u = (R[0] * dx + R[3] * dy + R[6] * dz, R[1] * dx + R[4] * dy + R[7] * dz,
         R[2] * dx + R[5] * dy + R[8] * dz)
    g0 = _seg_box_slope(c, u, h, 0.0)
    g1 = _seg_box_slope(c, u, h, 1.0)
    if g0 >= 0.0:
        s = 0.0
    elif g1 <= 0.0:
        s = 1.0
    else:
        lo, glo, hi, ghi = 0.0, g0, 1.0, g1
        s = -1.0
        for i in range(3):
            if u[i] != 0.0:
                for side in (-1.0, 1.0):
                    b = (side * h[i] - c[i]) / u[i]
                    if lo < b < hi:
                        gb = _seg_box_slope(c, u, h, b)
                        if gb < 0.0:
                            lo, glo = b, gb
                        elif gb > 0.0:
                            hi, ghi = b, gb
                        else:
                            s = b
        if s < 0.0:
            # no slab boundary between lo and hi: the slope is linear there
            s = lo - glo * (hi - lo) / (ghi - glo)
            s = min(max(s, lo), hi)
    e2 = 0.0
    for i in range(3):
        x = c[i] + s * u[i]
        o = x - min(max(x, -h[i]), h[i])
        e2 += o * o
    return s, math.sqrt(e2)


@njit(cache=True, inline="always")
def _seg_box_slope(c, u, h, s):
    """Half the derivative in s of the squared distance of c + s u from the box |x_i| <= h_i."""
    g = 0.0
    for i in range(3):
        x = c[i] + s * u[i]
        g += (x - min(max(x, -h[i]), h[i])) * u[i]
    return g


@njit(cache=True)
def _capsule_box_feature(a0x, a0y, a0z, dx, dy, dz, t, r, deepest, bpos, R, h, normals,
                         points, depths, k):
    """Two contacts of a capsule lying along the box face or edge nearest to its axis point t.

    The segment a0 + s d (s in [0, 1]) is clipped to the slabs |x_i| <= h_i (box frame) of the
    axes along the feature (two for a face, one for an edge); a ball contact is computed at each
    end of the clipped part. Returns k + 2 if both penetrate with the same normal and one of
    them is as deep as the deepest point (``deepest``: the capsule lies along the feature),
    anything else if the single deepest contact should be used."""
    wx, wy, wz = a0x - bpos[0], a0y - bpos[1], a0z - bpos[2]
    c = (R[0] * wx + R[3] * wy + R[6] * wz, R[1] * wx + R[4] * wy + R[7] * wz,
         R[2] * wx + R[5] * wy + R[8] * wz)
    u = (R[0] * dx + R[3] * dy + R[6] * dz, R[1] * dx + R[4] * dy + R[7] * dz,
         R[2] * dx + R[5] * dy + R[8] * dz)
    lo = 0.0
    hi = 1.0
    free = 0
    # t comes from a search (on a flat stretch it ends at the stretch's end, on a slab
    # boundary): count an axis as across the feature only if clearly outside its slab
    ulen = math.sqrt(u[0] * u[0] + u[1] * u[1] + u[2] * u[2])
    scale = h[0] + h[1] + h[2] + ulen
    tol = 1e-7 * scale
    for i in range(3):
        x = c[i] + t * u[i]
        if abs(x) > h[i] + tol:
            continue                      # a clamped axis: across the feature
        free += 1
        if abs(u[i]) > 1e-9 * ulen:       # (an axis parallel to the slab stays inside it)
            s0 = (-h[i] - c[i]) / u[i]
            s1 = (h[i] - c[i]) / u[i]
            lo = max(lo, min(s0, s1))
            hi = min(hi, max(s0, s1))
    if free == 0 or hi - lo <= 1e-9:
        return k                          # a vertex, or no extent along the feature
    k2 = _ball_box(a0x + lo * dx, a0y + lo * dy, a0z + lo * dz, r, bpos, R, h, normals, points,
                   depths, k)
    k2 = _ball_box(a0x + hi * dx, a0y + hi * dy, a0z + hi * dz, r, bpos, R, h, normals, points,
                   depths, k2)
    if k2 == k + 2:
        dot = (normals[k, 0] * normals[k + 1, 0] + normals[k, 1] * normals[k + 1, 1]
               + normals[k, 2] * normals[k + 1, 2])
        if dot <= 0.999 or max(depths[k], depths[k + 1]) < deepest - 1e-9 * (r + scale):
            return k
    return k2


@njit(cache=True)
def _box_plane(bpos, R, h, ppos, n, normals, points, depths, k, work):
    """Box A against plane B: its penetrating vertices, the four deepest."""
    cand_d = work[0:8]
    cand_p = work[8:32].reshape((8, 3))
    m = 0
    for sx in (-1.0, 1.0):
        for sy in (-1.0, 1.0):
            for sz in (-1.0, 1.0):
                lx, ly, lz = sx * h[0], sy * h[1], sz * h[2]
                vx = bpos[0] + R[0] * lx + R[1] * ly + R[2] * lz
                vy = bpos[1] + R[3] * lx + R[4] * ly + R[5] * lz
                vz = bpos[2] + R[6] * lx + R[7] * ly + R[8] * lz
                d = (vx - ppos[0]) * n[0] + (vy - ppos[1]) * n[1] + (vz - ppos[2]) * n[2]
                if d < 0.0:
                    cand_d[m] = -d
                    cand_p[m, 0], cand_p[m, 1], cand_p[m, 2] = vx, vy, vz
                    m += 1
    return _keep_deepest(cand_p, cand_d, m, n[0], n[1], n[2], 0.5, normals, points, depths, k,
                         work)


@njit(cache=True)
def _keep_deepest(cand_p, cand_d, m, nx, ny, nz, shift, normals, points, depths, k, work):
    """Append up to MAX_CONTACTS - k of m candidate points (deepest first, then the most
    spread), each written moved by ``shift * depth`` along +n (+-0.5: midway between the
    surfaces)."""
    room = MAX_CONTACTS - k
    used = work[200:216]
    used[:] = 0.0
    for c in range(min(m, room)):
        best = -1
        best_score = -1.0
        for i in range(m):
            if used[i] != 0.0:
                continue
            if c == 0:
                score = cand_d[i]
            else:
                score = 1e300
                for j in range(m):
                    if used[j] != 0.0:
                        ex = cand_p[i, 0] - cand_p[j, 0]
                        ey = cand_p[i, 1] - cand_p[j, 1]
                        ez = cand_p[i, 2] - cand_p[j, 2]
                        score = min(score, ex * ex + ey * ey + ez * ez)
            if score > best_score:
                best_score = score
                best = i
        used[best] = 1.0
        d = cand_d[best]
        _put(k, normals, points, depths, nx, ny, nz, cand_p[best, 0] + shift * d * nx,
             cand_p[best, 1] + shift * d * ny, cand_p[best, 2] + shift * d * nz, d)
        k += 1
    return k


@njit(cache=True)
def _box_box(pa, Ra, ha, pb, Rb, hb, normals, points, depths, k, work):
    """Box A against box B: separating axes, then a clipped face manifold or an edge point."""
    A = work[0:9].reshape((3, 3))     # rows: A's axes in world
    B = work[9:18].reshape((3, 3))
    for i in range(3):
        for j in range(3):
            A[i, j] = Ra[3 * j + i]
            B[i, j] = Rb[3 * j + i]
    d = work[18:21]
    for j in range(3):
        d[j] = pa[j] - pb[j]          # from B to A
    best = 1e300
    best_overlap = 0.0
    best_kind = -1                     # 0: face of A, 1: face of B, 2: edge pair
    best_i = -1
    best_j = -1
    bn = work[21:24]
    bn[:] = 0.0
    L = work[24:27]
    for kind in range(3):
        for i in range(3):
            for jj in range(3 if kind == 2 else 1):
                if kind == 0:
                    L[:] = A[i]
                elif kind == 1:
                    L[:] = B[i]
                else:
                    L[0] = A[i, 1] * B[jj, 2] - A[i, 2] * B[jj, 1]
                    L[1] = A[i, 2] * B[jj, 0] - A[i, 0] * B[jj, 2]
                    L[2] = A[i, 0] * B[jj, 1] - A[i, 1] * B[jj, 0]
                    ln = math.sqrt(L[0] * L[0] + L[1] * L[1] + L[2] * L[2])
                    if ln < 1e-6:
                        continue
                    L /= ln
                ra = 0.0
                rb = 0.0
                for m in range(3):
                    ra += ha[m] * abs(A[m, 0] * L[0] + A[m, 1] * L[1] + A[m, 2] * L[2])
                    rb += hb[m] * abs(B[m, 0] * L[0] + B[m, 1] * L[1] + B[m, 2] * L[2])
                dl = d[0] * L[0] + d[1] * L[1] + d[2] * L[2]
                overlap = ra + rb - abs(dl)
                if overlap <= 0.0:
                    return k
                # prefer faces: an edge axis must be clearly better to win
                score = overlap if kind < 2 else overlap * 1.05 + 1e-9 * (ra + rb)
                if score < best:
                    best = score
                    best_overlap = overlap
                    best_kind = kind
                    best_i = i
                    best_j = jj
                    s = 1.0 if dl >= 0.0 else -1.0
                    bn[0], bn[1], bn[2] = s * L[0], s * L[1], s * L[2]
    nx, ny, nz = bn[0], bn[1], bn[2]
    if best_kind == 2:
        # edge of A nearest to B (support in -n) and edge of B nearest to A (support in +n)
        i, j = best_i, best_j
        ca = work[27:30]
        cb = work[30:33]
        ca[0], ca[1], ca[2] = pa[0], pa[1], pa[2]    # pa, pb: arrays or 3-tuples
        cb[0], cb[1], cb[2] = pb[0], pb[1], pb[2]
        for m in range(3):
            if m != i:
                sa = -1.0 if (A[m, 0] * nx + A[m, 1] * ny + A[m, 2] * nz) > 0 else 1.0
                for c in range(3):
                    ca[c] += sa * ha[m] * A[m, c]
            if m != j:
                sb = 1.0 if (B[m, 0] * nx + B[m, 1] * ny + B[m, 2] * nz) > 0 else -1.0
                for c in range(3):
                    cb[c] += sb * hb[m] * B[m, c]
        a0x, a0y, a0z = ca[0] - ha[i] * A[i, 0], ca[1] - ha[i] * A[i, 1], ca[2] - ha[i] * A[i, 2]
        a1x, a1y, a1z = ca[0] + ha[i] * A[i, 0], ca[1] + ha[i] * A[i, 1], ca[2] + ha[i] * A[i, 2]
        b0x, b0y, b0z = cb[0] - hb[j] * B[j, 0], cb[1] - hb[j] * B[j, 1], cb[2] - hb[j] * B[j, 2]
        b1x, b1y, b1z = cb[0] + hb[j] * B[j, 0], cb[1] + hb[j] * B[j, 1], cb[2] + hb[j] * B[j, 2]
        s, t = _segments_closest(a0x, a0y, a0z, a1x, a1y, a1z, b0x, b0y, b0z, b1x, b1y, b1z)
        px = 0.5 * (a0x + s * (a1x - a0x) + b0x + t * (b1x - b0x))
        py = 0.5 * (a0y + s * (a1y - a0y) + b0y + t * (b1y - b0y))
        pz = 0.5 * (a0z + s * (a1z - a0z) + b0z + t * (b1z - b0z))
        _put(k, normals, points, depths, nx, ny, nz, px, py, pz, best_overlap)
        return k + 1
    # face contact: reference face on R (A if kind 0, else B), incident box I
    if best_kind == 0:
        Rr, hr, pr, Ri, hi, pi_, sgn = A, ha, pa, B, hb, pb, -1.0
    else:
        Rr, hr, pr, Ri, hi, pi_, sgn = B, hb, pb, A, ha, pa, 1.0
    # outward normal of the reference face, toward the incident box
    rn = work[33:36]
    rn[0], rn[1], rn[2] = sgn * nx, sgn * ny, sgn * nz
    ri = best_i
    # incident face: the face of I most anti-parallel to rn
    fi = 0
    fdot = 1e300
    for m in range(3):
        dm = Ri[m, 0] * rn[0] + Ri[m, 1] * rn[1] + Ri[m, 2] * rn[2]
        if -abs(dm) < fdot:
            fdot = -abs(dm)
            fi = m
    dm = Ri[fi, 0] * rn[0] + Ri[fi, 1] * rn[1] + Ri[fi, 2] * rn[2]
    fs = -1.0 if dm > 0 else 1.0
    u = (fi + 1) % 3
    v = (fi + 2) % 3
    poly = work[36:84].reshape((16, 3))
    tmp = work[84:132].reshape((16, 3))
    corners = ((-1.0, -1.0), (1.0, -1.0), (1.0, 1.0), (-1.0, 1.0))
    for c in range(4):
        su, sv = corners[c]
        for q in range(3):
            poly[c, q] = (pi_[q] + fs * hi[fi] * Ri[fi, q] + su * hi[u] * Ri[u, q]
                          + sv * hi[v] * Ri[v, q])
    npoly = 4
    # clip against the 4 side planes of the reference face
    for ax in range(3):
        if ax == ri:
            continue
        for side in (-1.0, 1.0):
            # keep points with side * (x - pr) . Rr[ax] <= hr[ax]
            nt = 0
            for c in range(npoly):
                c2 = (c + 1) % npoly
                da = side * ((poly[c, 0] - pr[0]) * Rr[ax, 0] + (poly[c, 1] - pr[1]) * Rr[ax, 1]
                             + (poly[c, 2] - pr[2]) * Rr[ax, 2]) - hr[ax]
                db = side * ((poly[c2, 0] - pr[0]) * Rr[ax, 0] + (poly[c2, 1] - pr[1]) * Rr[ax, 1]
                             + (poly[c2, 2] - pr[2]) * Rr[ax, 2]) - hr[ax]
                if da <= 0.0:
                    tmp[nt] = poly[c]
                    nt += 1
                if (da < 0.0) != (db < 0.0) and da != db and nt < 16:
                    tt = da / (da - db)
                    for q in range(3):
                        tmp[nt, q] = poly[c, q] + tt * (poly[c2, q] - poly[c, q])
                    nt += 1
            npoly = nt
            poly[:npoly] = tmp[:npoly]
            if npoly == 0:
                break
        if npoly == 0:
            break
    # depth of each clipped point below the reference face
    cand_p = work[132:180].reshape((16, 3))
    cand_d = work[180:196]
    m = 0
    face_off = hr[ri]
    for c in range(npoly):
        dist = ((poly[c, 0] - pr[0]) * rn[0] + (poly[c, 1] - pr[1]) * rn[1]
                + (poly[c, 2] - pr[2]) * rn[2])
        depth = face_off - dist
        if depth > 0.0:
            # the point on the incident surface; midway lies depth/2 along rn from it. The
            # candidates are the incident points whichever box is the reference, so the
            # selection (and the manifold) does not depend on the argument order.
            cand_d[m] = depth
            for q in range(3):
                cand_p[m, q] = poly[c, q]
            m += 1
    if m == 0:
        return k
    # n = -rn when the reference is A (kind 0), +rn when it is B: shift by +-depth/2 along n
    return _keep_deepest(cand_p, cand_d, m, nx, ny, nz, sgn * 0.5, normals, points, depths, k,
                         work)


@njit(cache=True)
def _collide_ordered(sa, pa_, posa, qa, sb, pb_, posb, qb, normals, points, depths, work):
    """Shape codes sa <= sb; normal from B to A."""
    if sa == SPHERE:
        ra = pa_[0]
        if sb == SPHERE:
            return _spheres(posa[0], posa[1], posa[2], ra, posb[0], posb[1], posb[2], pb_[0],
                            normals, points, depths, 0)
        if sb == PLANE:
            return _ball_plane(posa[0], posa[1], posa[2], ra, posb[0], posb[1], posb[2],
                               pb_[0], pb_[1], pb_[2], normals, points, depths, 0)
        Rb = quat_matrix(qb[0], qb[1], qb[2], qb[3])
        if sb == BOX:
            return _ball_box(posa[0], posa[1], posa[2], ra, posb, Rb, pb_, normals, points,
                             depths, 0)
        b0x, b0y, b0z, b1x, b1y, b1z = _segment(posb, Rb, pb_[1])
        px, py, pz = _closest_on_segment(posa[0], posa[1], posa[2], b0x, b0y, b0z, b1x, b1y, b1z)
        return _spheres(posa[0], posa[1], posa[2], ra, px, py, pz, pb_[0], normals, points,
                        depths, 0)
    if sa == PLANE:
        return 0
    Ra = quat_matrix(qa[0], qa[1], qa[2], qa[3])
    if sa == BOX:
        if sb == PLANE:
            return _box_plane(posa, Ra, pa_, posb, pb_, normals, points, depths, 0, work)
        Rb = quat_matrix(qb[0], qb[1], qb[2], qb[3])
        if sb == BOX:
            return _box_box(posa, Ra, pa_, posb, Rb, pb_, normals, points, depths, 0, work)
        # box A, capsule B: compute capsule vs box and flip
        b0x, b0y, b0z, b1x, b1y, b1z = _segment(posb, Rb, pb_[1])
        k = _capsule_box(b0x, b0y, b0z, b1x, b1y, b1z, pb_[0], posa, Ra, pa_, normals, points,
                         depths, 0)
        for c in range(k):
            normals[c, 0] = -normals[c, 0]
            normals[c, 1] = -normals[c, 1]
            normals[c, 2] = -normals[c, 2]
        return k
    # capsule A
    a0x, a0y, a0z, a1x, a1y, a1z = _segment(posa, Ra, pa_[1])
    if sb == PLANE:
        k = _ball_plane(a0x, a0y, a0z, pa_[0], posb[0], posb[1], posb[2], pb_[0], pb_[1], pb_[2],
                        normals, points, depths, 0)
        return _ball_plane(a1x, a1y, a1z, pa_[0], posb[0], posb[1], posb[2], pb_[0], pb_[1],
                           pb_[2], normals, points, depths, k)
    Rb = quat_matrix(qb[0], qb[1], qb[2], qb[3])
    b0x, b0y, b0z, b1x, b1y, b1z = _segment(posb, Rb, pb_[1])
    return _capsules(a0x, a0y, a0z, a1x, a1y, a1z, pa_[0], b0x, b0y, b0z, b1x, b1y, b1z, pb_[0],
                     normals, points, depths, 0)


@njit(cache=True)
def _after(params_a, pos_a, quat_a, params_b, pos_b, quat_b):
    """Whether body A comes after body B in the lexicographic order of (params, position,
    quaternion). Two bodies of the same shape are handled in this canonical order, so that
    swapping the arguments runs the same computation (same points, normals negated)."""
    for i in range(3):
        if params_a[i] != params_b[i]:
            return params_a[i] > params_b[i]
    for i in range(3):
        if pos_a[i] != pos_b[i]:
            return pos_a[i] > pos_b[i]
    for i in range(4):
        if quat_a[i] != quat_b[i]:
            return quat_a[i] > quat_b[i]
    return False


@njit(cache=True, inline="always")
def collide_into(shape_a, params_a, pos_a, quat_a, shape_b, params_b, pos_b, quat_b, normals,
                 points, depths, work):
    """:func:`collide` with a caller-owned scratch buffer ``work`` (float64[WORK_SIZE]), so the
    time step allocates nothing per pair (one buffer per thread).

    Inlined into its callers (the general pair kernel, the overlap check, :func:`collide`): one
    call layer less per pair, the general pair kernel 10 % faster on the demo's state
    (2026-11-28: best 3.02-3.53 -> 2.70-3.00 ms, four alternations, same bits); compiling the
    kernel's serial build with the narrow phase took 25.0 s with it, 27.4 s without (one fresh
    compile each). Its callers pass the scratch arrays unmanaged (:mod:`parsim.unmanaged`)
    where it matters: an inlined helper that branches keeps the reference counts of its array
    arguments."""
    if shape_a < shape_b or (shape_a == shape_b
                             and not _after(params_a, pos_a, quat_a, params_b, pos_b, quat_b)):
        return _collide_ordered(shape_a, params_a, pos_a, quat_a, shape_b, params_b, pos_b,
                                quat_b, normals, points, depths, work)
    k = _collide_ordered(shape_b, params_b, pos_b, quat_b, shape_a, params_a, pos_a, quat_a,
                         normals, points, depths, work)
    for c in range(k):
        normals[c, 0] = -normals[c, 0]
        normals[c, 1] = -normals[c, 1]
        normals[c, 2] = -normals[c, 2]
    return k


@njit(cache=True, inline="always")
def _tuple3(v):
    return (float(v[0]), float(v[1]), float(v[2]))


@njit(cache=True, inline="always")
def _tuple4(v):
    return (float(v[0]), float(v[1]), float(v[2]), float(v[3]))


@njit(cache=True)
def collide(shape_a, params_a, pos_a, quat_a, shape_b, params_b, pos_b, quat_b, normals,
            points, depths):
    """Contacts of body A with body B (see the module docstring); returns their number.

    Calls :func:`collide_into` with the argument types the engine passes (int8 shapes, tuples
    of floats), whatever the caller gave: one compiled narrow phase instead of two (a second
    one, for arrays, added ~20 s to a cold start)."""
    work = np.empty(WORK_SIZE)
    return collide_into(np.int8(shape_a), _tuple3(params_a), _tuple3(pos_a), _tuple4(quat_a),
                        np.int8(shape_b), _tuple3(params_b), _tuple3(pos_b), _tuple4(quat_b),
                        normals, points, depths, work)
