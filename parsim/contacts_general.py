"""Contact forces of pairs involving boxes and capsules (the narrow phase of every shape pair).

Separate from :mod:`parsim.contacts` so that a pure-sphere run never compiles the narrow phase.
Each pair has ``MAX_POINTS`` tangential springs, one per contact point index of the manifold
returned by :func:`parsim.narrowphase.collide`; lever arms are the contact point minus the centres
(B's centre in the pair's canonical frame, see :mod:`parsim.contacts`). The pair's spring-dashpot
is shared by its points in proportion to their depths, so that a flat contact on k points
rebounds and lasts as one contact does (restitution e, duration t_c).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .parallel import dual

from .contacts import (_clear_pair, _cross, _hertz_factor, _pair_params, _with_rolling,
                       contact_force, effective_mass, pair_rows, relative_shift)
from .narrowphase import WORK_SIZE, collide_into
from .rows import row3, row4
from .shapes import BOX, PLANE
from .unmanaged import unmanaged


@njit(cache=True, inline="always")
def _apart(sb, xa, posb, prb, ra, rb):
    """True if the bounding spheres of A and B (centres ``xa``, ``posb``; radii ``ra``,
    ``rb``), or A's and plane B (point ``posb``, normal ``prb``), are apart by more than a
    relative 1e-9: then the narrow phase, which reports penetrating contacts only, would find
    none, so skipping it changes no result. Most candidate pairs of a packing (AABBs enlarged
    by the skin) are such pairs, and the test costs a few flops instead of a narrow-phase
    call."""
    if sb == PLANE:
        d = ((xa[0] - posb[0]) * prb[0] + (xa[1] - posb[1]) * prb[1]
             + (xa[2] - posb[2]) * prb[2])
        return d > ra * (1.0 + 1e-9)
    dx = xa[0] - posb[0]
    dy = xa[1] - posb[1]
    dz = xa[2] - posb[2]
    reach = (ra + rb) * (1.0 + 1e-9)
    return dx * dx + dy * dy + dz * dz > reach * reach


@njit(cache=True, inline="always")
def _narrow_pair(sa, sb, pra, prb, xa, xb, qa, qb, ia, ib, box, ra, rb, normals, points, depths,
                 work):
    """The contact points of pair (A, B) with B taken in A's periodic image: their number (into
    ``normals``, ``points``, ``depths``) and B's shifted position. Takes A's and B's shape
    codes, parameter, position and orientation rows (tuples), image codes and bounding radii,
    and the box lengths (a tuple). 0 without a narrow-phase call when the bounding spheres are
    apart (:func:`_apart`). Shared by the force kernel and the start-of-run overlap check so
    both see the same contacts.

    Scalars and tuples, not the bodies' arrays: an inlined helper that takes arrays and
    branches keeps two atomic reference-count updates per array and call (11 arrays here
    until 2026-11-28). The force kernel passes its scratch arrays unmanaged
    (:mod:`parsim.unmanaged`)."""
    posb = xb
    if sb != PLANE:
        sx, sy, sz = relative_shift(ia, ib, box[0], box[1], box[2])
        posb = (xb[0] + sx, xb[1] + sy, xb[2] + sz)
    if _apart(sb, xa, posb, prb, ra, rb):
        return 0, posb
    k = collide_into(sa, pra, xa, qa, sb, prb, posb, qb, normals, points, depths, work)
    return k, posb


@njit(cache=True, inline="always")
def _narrow_of(a, b, shape, params, position, orientation, image, bx, bounding_radius,
               normals, points, depths, work):
    """:func:`_narrow_pair` of bodies ``a`` and ``b``: their rows are read here, before any
    branch, and only the scratch arrays go on; numba's reference counts of the body arrays then
    cancel out (the compiled general kernel has no atomic instruction left: gdb, 2026-11-28)."""
    return _narrow_pair(shape[a], shape[b], row3(params, a), row3(params, b),
                        row3(position, a), row3(position, b), row4(orientation, a),
                        row4(orientation, b), image[a], image[b], bx, bounding_radius[a],
                        bounding_radius[b], normals, points, depths, work)


def scratch(threads: int):
    """Per-thread buffers of :func:`general_pair_forces`."""
    return (np.zeros((threads, 4, 3)), np.zeros((threads, 4, 3)), np.zeros((threads, 4)),
            np.zeros((threads, WORK_SIZE)))


def _general_pair_forces(sel, pa, pb, hist, shape, params, flags, material, mass, position,
                        orientation, velocity, angular_velocity, image, table, box, dt,
                        bounding_radius, shear, touching, pout, live, update, t_normals,
                        t_points, t_depths, t_work):
    """Like :func:`parsim.contacts.sphere_pair_forces` for the pairs ``sel`` that involve a box
    or a capsule. ``t_*`` are per-thread scratch buffers (:func:`scratch`)."""
    count = 0
    # one chunk of pairs per scratch row (no thread ids: chunks are independent, so the result
    # does not depend on how they are scheduled)
    chunks = t_work.shape[0]
    size = (sel.shape[0] + chunks - 1) // chunks
    for ch in prange(chunks):
        count += _general_chunk(sel, ch * size, min(sel.shape[0], (ch + 1) * size), pa, pb,
                                hist, shape, params, flags, material, mass, position,
                                orientation, velocity, angular_velocity, image, table, box, dt,
                                bounding_radius, shear, touching, pout, live, update,
                                t_normals[ch], t_points[ch], t_depths[ch], t_work[ch])
    return count


@njit(cache=True)
def _general_chunk(sel, q0, q1, pa, pb, hist, shape, params, flags, material, mass, position,
                   orientation, velocity, angular_velocity, image, table, box, dt,
                   bounding_radius, shear, touching, pout, live, update, normals, points,
                   depths, work):
    pf, pta, ptb = pair_rows(pout)
    bx = (box[0], box[1], box[2])
    normals = unmanaged(normals)
    points = unmanaged(points)
    depths = unmanaged(depths)
    work = unmanaged(work)
    count = 0
    for q in range(q0, q1):
        p = sel[q]
        a = pa[p]
        b = pb[p]
        h = hist[p]
        sb = shape[b]
        nh = 4
        k, posb = _narrow_of(a, b, shape, params, position, orientation, image, bx,
                             bounding_radius, normals, points, depths, work)
        if k == 0:
            _clear_pair(p, h, nh, shear, touching, pf, pta, ptb, live, update)
            continue
        meff = effective_mass(flags[a], flags[b], mass[a], mass[b])
        kn, gn, kt, gt, mu, mu_r = _pair_params(table, material[a], material[b], meff)
        va = row3(velocity, a)
        wa = row3(angular_velocity, a)
        vb = wb = (0.0, 0.0, 0.0)
        if sb != PLANE:
            vb = row3(velocity, b)
            wb = row3(angular_velocity, b)
        fx = fy = fz = 0.0
        tax = tay = taz = 0.0
        tbx = tby = tbz = 0.0
        # The pair's spring-dashpot is shared by its k contact points in proportion to their
        # depths (w = depth / sum of depths): a flat face on k equally deep points acts as one
        # contact (restitution e, duration t_c), and a point entering or leaving with depth 0
        # changes no force. (With the whole spring at every point a flat box rebounded as on 4
        # contacts in parallel: 0.64 instead of e = 0.8.)
        dsum = 0.0
        for c in range(k):
            dsum += depths[c]
        for c in range(nh):
            if c >= k:
                if update:
                    touching[h + c] = False
                    shear[h + c, 0] = shear[h + c, 1] = shear[h + c, 2] = 0.0
                continue
            if update:
                touching[h + c] = True
            count += 1
            nx, ny, nz = normals[c, 0], normals[c, 1], normals[c, 2]
            lax = points[c, 0] - position[a, 0]
            lay = points[c, 1] - position[a, 1]
            laz = points[c, 2] - position[a, 2]
            lbx = points[c, 0] - posb[0]
            lby = points[c, 1] - posb[1]
            lbz = points[c, 2] - posb[2]
            rbb = bounding_radius[b] if sb != PLANE else 0.0
            ra_ = bounding_radius[a]
            hz = _hertz_factor(table, material[a], material[b], depths[c], ra_, rbb)
            hz *= depths[c] / dsum if dsum > 0.0 else 1.0 / k
            cfx, cfy, cfz, fn, sx, sy, sz = contact_force(
                nx, ny, nz, depths[c], lax, lay, laz, lbx, lby, lbz, va, wa, vb, wb, meff,
                kn * hz, gn * hz, kt * hz, gt * hz, mu, dt, row3(shear, h + c))
            if update:
                shear[h + c, 0], shear[h + c, 1], shear[h + c, 2] = sx, sy, sz
            fx += cfx
            fy += cfy
            fz += cfz
            t = _cross(lax, lay, laz, cfx, cfy, cfz)
            tax += t[0]
            tay += t[1]
            taz += t[2]
            t = _cross(lbx, lby, lbz, cfx, cfy, cfz)
            tbx -= t[0]
            tby -= t[1]
            tbz -= t[2]
            if mu_r > 0.0:
                tax, tay, taz, tbx, tby, tbz = _with_rolling(
                    mu_r, fn, bounding_radius[a], bounding_radius[b] if sb != PLANE else 0.0,
                    wa, wb, nx, ny, nz, tax, tay, taz, tbx, tby, tbz)
        pf[p, 0], pf[p, 1], pf[p, 2] = fx, fy, fz
        pta[p, 0], pta[p, 1], pta[p, 2] = tax, tay, taz
        ptb[p, 0], ptb[p, 1], ptb[p, 2] = tbx, tby, tbz
        live[p] = 1
    return count


general_pair_forces = dual(_general_pair_forces)


@njit(cache=True, inline="always")
def _size(shape, params, i):
    """A body's size for the overlap warning: its radius (sphere, capsule) or a box's smallest
    half-extent."""
    if shape[i] == BOX:
        return min(params[i, 0], params[i, 1], params[i, 2])
    return params[i, 0]


@njit(cache=True)
def deepest_overlaps(sel, pa, pb, shape, params, position, orientation, image, box,
                     bounding_radius, out):
    """For each pair ``sel[q]`` (one that involves a box or a capsule): the depth of its deepest
    contact point divided by the smaller size of its two bodies (:func:`_size`; a plane counts
    as the other body's size), 0 for bodies apart. Used once, at the start of a run, by the
    overlap warning (:meth:`parsim.Simulation._start_overlap`)."""
    normals = np.zeros((4, 3))
    points = np.zeros((4, 3))
    depths = np.zeros(4)
    work = np.zeros(WORK_SIZE)
    bx = (box[0], box[1], box[2])
    for q in range(sel.shape[0]):
        p = sel[q]
        a = pa[p]
        b = pb[p]
        sb = shape[b]
        out[q] = 0.0
        k, _ = _narrow_of(a, b, shape, params, position, orientation, image, bx,
                          bounding_radius, normals, points, depths, work)
        deepest = 0.0
        for c in range(k):
            deepest = max(deepest, depths[c])
        size = _size(shape, params, a)
        if sb != PLANE:
            size = min(size, _size(shape, params, b))
        out[q] = deepest / size if size > 0.0 else (np.inf if deepest > 0.0 else 0.0)
