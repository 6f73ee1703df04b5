"""Contact forces: the linear spring-dashpot normal law and the Cundall-Strack tangential spring.

The law is LAMMPS's ``gran/hooke/history`` (the peers' benchmark law), written for a contact of
normal ``n`` (unit, from body B toward body A), overlap ``delta > 0`` and lever arms ``la``, ``lb``
(contact point minus the centre of A and of B):

* relative velocity at the contact ``vc = (va + wa x la) - (vb + wb x lb)``, ``vn = vc . n``,
  ``vt = vc - vn n``;
* normal force ``Fn = kn delta - m_eff gamma_n vn`` (along n);
* tangential spring ``s += vt dt``, then ``s`` is projected onto the tangent plane;
  ``Ft = -(kt s + m_eff gamma_t vt)``; if ``|Ft| > mu |Fn|`` both are scaled back onto the Coulomb
  cone (the spring keeps the length that gives ``mu |Fn|``: sliding);
* the force on A is ``Fn n + Ft``, on B its negation; torques ``la x F`` and ``-(lb x F)``.

For two spheres the lever arms are ``-r_a n`` and ``+r_b n`` (LAMMPS's convention); for other
shapes they are the contact point (midway between the surfaces) minus the centres.

``m_eff = m_a m_b / (m_a + m_b)``; against a fixed body it is the other body's mass. Under the
restitution parameterisation the pair table stores ``kn`` per unit ``m_eff`` (see
:mod:`parsim.materials`).

Every pair is evaluated by :func:`sphere_pair_forces` (or, for boxes and capsules,
:func:`parsim.contacts_general.general_pair_forces`) from the *canonical frame* of the pair: body A at
its stored position and B at its stored position plus the difference of their periodic image
shifts. Two copies of the same pair (e.g. A with B's image and A's image with B) therefore see
bit-identical inputs and produce bit-identical forces, whichever rank or slot holds them. Forces
are then summed per body in the order of the partner's key (:func:`accumulate`), so a body's total
force does not depend on storage order or on the number of ranks.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .broadphase.prefetch import prefetch
from .parallel import dual, variant
from .rows import row3

from .bodies import FIXED
from .materials import (MODE_RESTITUTION, P_GN, P_GT_RATIO, P_HERTZ, P_KN, P_KT_RATIO, P_MODE,
                        P_MU, P_MU_ROLL)
from .shapes import PLANE

#: history slots (tangential springs) per pair kind
MAX_POINTS = 4


@njit(cache=True, inline="always")
def image_shift(code, lx, ly, lz):
    """Periodic shift (float 3-tuple) of image code 0..26 (13 = none)."""
    c = np.int64(code)
    return ((c % 3 - 1) * lx, ((c // 3) % 3 - 1) * ly, (c // 9 - 1) * lz)


@njit(cache=True, inline="always")
def relative_shift(code_a, code_b, lx, ly, lz):
    """Shift that brings B's stored position into A's frame: shift(B) - shift(A), exact."""
    if code_a == code_b:
        # most pairs (same image; every pair of a non-periodic run): the same zeros as below,
        # without the integer divisions, which cost as much as the rest of the overlap test
        return (0.0, 0.0, 0.0)
    a = np.int64(code_a)
    b = np.int64(code_b)
    dx = (b % 3) - (a % 3)
    dy = ((b // 3) % 3) - ((a // 3) % 3)
    dz = (b // 9) - (a // 9)
    return (dx * lx, dy * ly, dz * lz)


@njit(cache=True, inline="always")
def effective_mass(fa, fb, ma, mb):
    if fa & FIXED:
        return mb
    if fb & FIXED:
        return ma
    return ma * mb / (ma + mb)


@njit(cache=True, inline="always")
def _cross(ax, ay, az, bx, by, bz):
    return (ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx)


@njit(cache=True, inline="always")
def contact_force(nx, ny, nz, delta, lax, lay, laz, lbx, lby, lbz,
                  va, wa, vb, wb, meff, kn, gn, kt, gt, mu, dt, spring):
    """Force on A, normal force and the updated tangential spring of one contact:
    ``(fx, fy, fz, fn, sx, sy, sz)`` (flat: numba's parallel array analysis rejects a nested
    tuple here). ``spring`` is the stored spring; the caller stores the new one unless forces
    are merely re-evaluated at setup (as LAMMPS). ``va``, ``wa``, ``vb``, ``wb`` and ``spring``
    are 3-tuples (see :mod:`parsim.rows`): no array enters this inlined helper, since every array
    argument costs atomic reference-count updates per call."""
    wla = _cross(wa[0], wa[1], wa[2], lax, lay, laz)
    wlb = _cross(wb[0], wb[1], wb[2], lbx, lby, lbz)
    vcx = va[0] + wla[0] - vb[0] - wlb[0]
    vcy = va[1] + wla[1] - vb[1] - wlb[1]
    vcz = va[2] + wla[2] - vb[2] - wlb[2]
    vn = vcx * nx + vcy * ny + vcz * nz
    vtx = vcx - vn * nx
    vty = vcy - vn * ny
    vtz = vcz - vn * nz
    fn = kn * delta - meff * gn * vn
    # tangential spring (LAMMPS order: accumulate, measure, rotate into the tangent plane)
    sx = spring[0] + vtx * dt
    sy = spring[1] + vty * dt
    sz = spring[2] + vtz * dt
    shrmag = math.sqrt(sx * sx + sy * sy + sz * sz)
    sn = sx * nx + sy * ny + sz * nz
    sx -= sn * nx
    sy -= sn * ny
    sz -= sn * nz
    dtx = meff * gt * vtx
    dty = meff * gt * vty
    dtz = meff * gt * vtz
    ftx = -(kt * sx + dtx)
    fty = -(kt * sy + dty)
    ftz = -(kt * sz + dtz)
    ft = math.sqrt(ftx * ftx + fty * fty + ftz * ftz)
    fmax = mu * abs(fn)
    if ft > fmax:
        if shrmag != 0.0:
            ratio = fmax / ft
            sx = ratio * (sx + dtx / kt) - dtx / kt
            sy = ratio * (sy + dty / kt) - dty / kt
            sz = ratio * (sz + dtz / kt) - dtz / kt
            ftx *= ratio
            fty *= ratio
            ftz *= ratio
        else:
            ftx = fty = ftz = 0.0
    return (fn * nx + ftx, fn * ny + fty, fn * nz + ftz, fn, sx, sy, sz)


@njit(cache=True, inline="always")
def _pair_params(table, mat_a, mat_b, meff):
    # scalar reads, no row view: a view costs two atomic reference-count updates per pair
    kn = table[mat_a, mat_b, P_KN]
    if table[mat_a, mat_b, P_MODE] == MODE_RESTITUTION:
        kn = kn * meff
    gn = table[mat_a, mat_b, P_GN]
    return (kn, gn, table[mat_a, mat_b, P_KT_RATIO] * kn, table[mat_a, mat_b, P_GT_RATIO] * gn,
            table[mat_a, mat_b, P_MU], table[mat_a, mat_b, P_MU_ROLL])


@njit(cache=True, inline="always")
def _hertz_factor(table, mat_a, mat_b, delta, ra, rb):
    """sqrt(delta R_eff) for Hertz-Mindlin pairs (LAMMPS gran/hertz/history scales kn, gamma_n,
    kt and gamma_t by it), 1 for linear pairs. ``rb`` is 0 against a plane (R_eff = ra); R_eff
    is only computed for Hertz pairs (a division per linear pair saved)."""
    if table[mat_a, mat_b, P_HERTZ] != 0.0:
        reff = ra * rb / (ra + rb) if rb > 0.0 else ra
        return math.sqrt(delta * reff)
    return 1.0


@njit(cache=True, inline="always")
def _rolling_torque(mu_r, fn, ra, rb, wa, wb, nx, ny, nz):
    """Constant-torque rolling resistance (on A): ``-mu_r |Fn| R_eff`` along the relative rolling
    velocity (the part of wa - wb perpendicular to n)."""
    wx = wa[0] - wb[0]
    wy = wa[1] - wb[1]
    wz = wa[2] - wb[2]
    wn = wx * nx + wy * ny + wz * nz
    wx -= wn * nx
    wy -= wn * ny
    wz -= wn * nz
    w = math.sqrt(wx * wx + wy * wy + wz * wz)
    if w < 1e-12:
        return (0.0, 0.0, 0.0)
    reff = ra * rb / (ra + rb) if rb > 0.0 else ra
    s = -mu_r * abs(fn) * reff / w
    return (s * wx, s * wy, s * wz)


@njit(cache=True, inline="always")
def _with_rolling(mu_r, fn, ra, rb, wa, wb, nx, ny, nz, tax, tay, taz, tbx, tby, tbz):
    """Torques on A and B plus the rolling resistance (on A, and its opposite on B)."""
    rx, ry, rz = _rolling_torque(mu_r, fn, ra, rb, wa, wb, nx, ny, nz)
    return tax + rx, tay + ry, taz + rz, tbx - rx, tby - ry, tbz - rz


@njit(cache=True, inline="always")
def pair_rows(pout):
    """The views ``pf``, ``pta``, ``ptb`` (force on A, torques on A and B) of the per-pair rows
    ``pout`` (n, 9): the one definition of the row layout, for the NeighbourList's numpy code
    and inside the kernels. The kernels take ``pout`` and make the views themselves: views
    passed from Python are typed C-contiguous when a list has 0 or 1 pairs and strided
    otherwise, and numba compiled every contact kernel for both (15-30 s more of a cold start,
    2026-11-28)."""
    return pout[:, 0:3], pout[:, 3:6], pout[:, 6:9]


@njit(cache=True, inline="always")
def _clear_pair(p, h, nh, shear, touching, pf, pta, ptb, live, update):
    live[p] = 0
    if update:
        for k in range(nh):
            touching[h + k] = False
            shear[h + k, 0] = shear[h + k, 1] = shear[h + k, 2] = 0.0
    pf[p, 0] = pf[p, 1] = pf[p, 2] = 0.0
    pta[p, 0] = pta[p, 1] = pta[p, 2] = 0.0
    ptb[p, 0] = ptb[p, 1] = ptb[p, 2] = 0.0


def _sphere_pair_forces(sel, n_sel, every, pa, pb, hist, shape, params, flags, material, mass,
                       position, velocity, angular_velocity, image, table, box, dt, shear,
                       touching, pout, live, update, summed, n_owned, force, torque, rows):
    """Forces of pairs whose bodies are spheres or (as B) planes; writes pf (force on A), pta,
    ptb (torques on A and B) per pair, ``live`` (1 if the pair is in contact, else 0: its
    forces are zeros), updates the springs ``shear`` and flags ``touching`` (a spring whose
    contact is open is reset to zero). Handles the ``n_sel`` pairs ``sel``; returns the number
    of touching contacts. ``pout`` holds the three rows side by side (:func:`pair_rows`).

    ``every``: the list holds only such pairs, so ``sel`` is ``0 .. n_sel-1`` and each pair's
    one spring has the pair's index (``hist[p] == p``); the kernel then reads neither array,
    two fewer streams over the pairs (8 bytes each per pair; a granular gas spends most of this
    kernel streaming the list).

    ``summed`` (serial build only; the pairs sorted by (lower key, higher key), see
    :class:`parsim.neighbours.NeighbourList`): also add each contact's force and torques to
    ``force`` and ``torque`` of its owned bodies (zeroed by the caller), as LAMMPS does. In that
    order every body meets its partners in the order of their keys, so these sums are the
    canonical sums of :func:`accumulate`, bit for bit, without its second pass over the pair
    rows in partner order (random in memory: 10-12 ms per step on the 64,000-sphere bed).
    :func:`finish_sums` then adds gravity. A threaded build must not be given ``summed``: two
    threads would add to one body.

    ``rows``: write the pair rows ``pf``, ``pta``, ``ptb`` of live pairs. Without ``summed``
    they are the sums' input and must be written; with it only the global bodies' sums
    (:mod:`parsim.global_bodies`) read them. Skipping them saves a 72-byte write per contact.
    Rows of pairs that open are zeroed either way, so the rows of a list hold zeros or the
    current forces (``pout`` is new and zero at every rebuild, and ``summed`` and ``rows``
    stay fixed while a list lives).

    The build :data:`_pair_forces_far` (``_FAR``) asks for the rows of pairs ahead, as
    :func:`sphere_pairs_in_play` does: for the pairs in play of a large rank, scattered over
    the list (125,000-sphere gas, 1,823 pairs: 0.50 -> 0.31 ms with the caches flushed).
    """
    pf, pta, ptb = pair_rows(pout)
    # one flat loop body: a helper call with this many array arguments was 3x slower (S2b bed)
    zero = (0.0, 0.0, 0.0)
    count = 0
    xs, vs, ws, rs = (position.reshape(-1), velocity.reshape(-1), angular_velocity.reshape(-1),
                      params.reshape(-1))
    po, sh = pout.reshape(-1), shear.reshape(-1)
    for q in prange(n_sel):
        if _FAR:
            # the rows of the pair AHEAD places on; its bodies' and spring's indices were asked
            # for 2 AHEAD places on (see sphere_pairs_in_play)
            qa = np.int64(q) + AHEAD
            if qa + AHEAD < n_sel:
                g = qa + AHEAD if every else np.int64(sel[qa + AHEAD])
                prefetch(pa, g)
                prefetch(pb, g)
                prefetch(hist, g)
                prefetch(live, g)
            if qa < n_sel:
                f = qa if every else np.int64(sel[qa])
                fa, fb = pa[f], pb[f]
                fh = f if every else np.int64(hist[f])
                prefetch(xs, 3 * fa)
                prefetch(xs, 3 * fb)
                prefetch(vs, 3 * fa)
                prefetch(vs, 3 * fb)
                prefetch(ws, 3 * fa)
                prefetch(ws, 3 * fb)
                prefetch(rs, 3 * fa)
                prefetch(rs, 3 * fb)
                prefetch(mass, fa)
                prefetch(mass, fb)
                prefetch(material, fa)
                prefetch(material, fb)
                prefetch(flags, fa)
                prefetch(flags, fb)
                prefetch(sh, 3 * fh)
                prefetch(touching, fh)
                prefetch(po, 9 * f)
                prefetch(po, 9 * f + 8)
        # int64 on both branches (a parfor index is unsigned: mixed, numba unifies to float)
        if every:
            p = np.int64(q)
            h = np.int64(q)
        else:
            p = np.int64(sel[q])
            h = np.int64(hist[p])
        a = pa[p]
        b = pb[p]
        ra = params[a, 0]
        nx = ny = nz = 0.0
        delta = -1.0
        rb = 0.0
        if shape[b] == PLANE:
            nx, ny, nz = params[b, 0], params[b, 1], params[b, 2]
            d = ((position[a, 0] - position[b, 0]) * nx + (position[a, 1] - position[b, 1]) * ny
                 + (position[a, 2] - position[b, 2]) * nz)
            delta = ra - d
        else:
            rb = params[b, 0]
            sx, sy, sz = relative_shift(image[a], image[b], box[0], box[1], box[2])
            dx = position[a, 0] - (position[b, 0] + sx)
            dy = position[a, 1] - (position[b, 1] + sy)
            dz = position[a, 2] - (position[b, 2] + sz)
            rsq = dx * dx + dy * dy + dz * dz
            rsum = ra + rb
            if rsq < rsum * rsum:
                r = math.sqrt(rsq)
                if r > 0.0:
                    nx, ny, nz = dx / r, dy / r, dz / r
                else:
                    nz = 1.0
                delta = rsum - r
        if delta <= 0.0:
            # a pair that was open already has zero forces and (touching False) a zero spring:
            # most candidates of a gas; skipping their writes saves most of the kernel's time
            if live[p] != 0 or (update and touching[h]):
                _clear_pair(p, h, 1, shear, touching, pf, pta, ptb, live, update)
            continue
        if update:
            touching[h] = True
        meff = effective_mass(flags[a], flags[b], mass[a], mass[b])
        kn, gn, kt, gt, mu, mu_r = _pair_params(table, material[a], material[b], meff)
        hz = _hertz_factor(table, material[a], material[b], delta, ra, rb)
        kn *= hz
        gn *= hz
        kt *= hz
        gt *= hz
        wa = row3(angular_velocity, a)
        wb = zero
        vb = zero
        if shape[b] != PLANE:
            wb = row3(angular_velocity, b)
            vb = row3(velocity, b)
        fx, fy, fz, fn, sx, sy, sz = contact_force(
            nx, ny, nz, delta, -ra * nx, -ra * ny, -ra * nz, rb * nx, rb * ny, rb * nz,
            row3(velocity, a), wa, vb, wb, meff, kn, gn, kt, gt, mu, dt, row3(shear, h))
        if update:
            shear[h, 0], shear[h, 1], shear[h, 2] = sx, sy, sz
        # la x F with la = -ra n;  -(lb x F) with lb = rb n
        cx, cy, cz = _cross(nx, ny, nz, fx, fy, fz)
        tax, tay, taz = -ra * cx, -ra * cy, -ra * cz
        tbx, tby, tbz = -rb * cx, -rb * cy, -rb * cz
        if mu_r > 0.0:
            tax, tay, taz, tbx, tby, tbz = _with_rolling(
                mu_r, fn, ra, rb, wa, wb, nx, ny, nz,
                tax, tay, taz, tbx, tby, tbz)
        if rows:
            pf[p, 0], pf[p, 1], pf[p, 2] = fx, fy, fz
            pta[p, 0], pta[p, 1], pta[p, 2] = tax, tay, taz
            ptb[p, 0], ptb[p, 1], ptb[p, 2] = tbx, tby, tbz
        live[p] = 1
        count += 1
        if summed:
            if a < n_owned:
                force[a, 0] += fx
                force[a, 1] += fy
                force[a, 2] += fz
                torque[a, 0] += tax
                torque[a, 1] += tay
                torque[a, 2] += taz
            if b < n_owned:
                force[b, 0] -= fx
                force[b, 1] -= fy
                force[b, 2] -= fz
                torque[b, 0] += tbx
                torque[b, 1] += tby
                torque[b, 2] += tbz
    return count


@njit(cache=True)
def finish_sums(n_owned, flags, mass, gravity, force, torque):
    """After the pair sums of ``summed`` mode: gravity added, fixed bodies zeroed (the last
    steps of :func:`accumulate`, the same arithmetic)."""
    gx, gy, gz = gravity[0], gravity[1], gravity[2]
    for i in range(n_owned):
        if flags[i] & FIXED:
            force[i, 0] = force[i, 1] = force[i, 2] = 0.0
            torque[i, 0] = torque[i, 1] = torque[i, 2] = 0.0
        else:
            m = mass[i]
            force[i, 0] += m * gx
            force[i, 1] += m * gy
            force[i, 2] += m * gz


#: bodies per chunk of :func:`_accumulate`'s sparse mode
CHUNK = 1024


@njit(cache=True)
def _gravity_only(m, flags, mass, gx, gy, gz, f, t):
    """Force and torque of bodies 0..m-1 (flat views) with no pair contribution: what the sum
    loop of :func:`_accumulate` gives them (``0.0 + m g``, the same bits; zero when fixed).
    Branch-free over flat views, so LLVM vectorises it."""
    for i in range(m):
        fixed = (flags[i] & FIXED) != 0
        w = mass[i]
        j = 3 * i
        f[j], f[j + 1], f[j + 2] = ((0.0, 0.0, 0.0) if fixed
                                    else (0.0 + w * gx, 0.0 + w * gy, 0.0 + w * gz))
        t[j], t[j + 1], t[j + 2] = 0.0, 0.0, 0.0


@njit(cache=True, inline="always")
def _body_sum(i, ptr, entry, live, dense, pf, pta, ptb, flags, mass, gx, gy, gz, force, torque):
    """Body i's force and torque: its pair rows in the canonical order (``entry``), skipping
    pairs that are not live unless ``dense``, then gravity; zero for a fixed body."""
    fx = fy = fz = 0.0
    tx = ty = tz = 0.0
    for e in range(ptr[i], ptr[i + 1]):
        c = entry[e]
        p = c >> 1
        if not dense and live[p] == 0:
            continue
        if (c & 1) == 0:
            fx += pf[p, 0]
            fy += pf[p, 1]
            fz += pf[p, 2]
            tx += pta[p, 0]
            ty += pta[p, 1]
            tz += pta[p, 2]
        else:
            fx -= pf[p, 0]
            fy -= pf[p, 1]
            fz -= pf[p, 2]
            tx += ptb[p, 0]
            ty += ptb[p, 1]
            tz += ptb[p, 2]
    if flags[i] & FIXED:
        fx = fy = fz = tx = ty = tz = 0.0
    else:
        m = mass[i]
        fx += m * gx
        fy += m * gy
        fz += m * gz
    force[i, 0], force[i, 1], force[i, 2] = fx, fy, fz
    torque[i, 0], torque[i, 1], torque[i, 2] = tx, ty, tz


@njit(cache=True)
def mark_touched(n_owned, pa, pb, live, touched, out):
    """Bit 0 of ``touched[i]`` set for the owned bodies ``i`` of every live pair (one stream over
    ``live``: the gas has few live pairs), each written once to ``out``; returns their number.
    Bit 0 must be clear for every body on entry; bit 1 (rows kept by :func:`accumulate`) is
    left as it is."""
    k = 0
    for p in range(live.shape[0]):
        if live[p] != 0:
            a = pa[p]
            b = pb[p]
            if a < n_owned and (touched[a] & 1) == 0:
                touched[a] |= np.uint8(1)
                out[k] = a
                k += 1
            if b < n_owned and (touched[b] & 1) == 0:
                touched[b] |= np.uint8(1)
                out[k] = b
                k += 1
    return k


def _accumulate(n_owned, ptr, entry, live, dense, touched, pout, flags, mass, gravity, force,
                torque, keep, kept_gravity, pa, pb, listed, n_listed):
    """Total force and torque of owned bodies: their pair contributions in the precomputed
    canonical order (by partner key; ``entry`` = 2 * pair + side), then gravity. Fixed bodies
    get zero.

    ``dense``: add every pair's row, live or not (rows of pairs out of contact are zeros, kept
    so by the pair kernels); else skip the pairs that are not ``live``. Both give the same bits
    (a sum that starts at +0.0 stays the same when +-0.0 is added). Measured on the 64,000-sphere
    benchmarks: in the dense bed (~40 % of the pairs touch) the branch on ``live`` mispredicts
    and adding every row takes 0.6x the time; in the gas (<1 % touch) reading every row takes
    2x the time of skipping them. The engine picks ``dense`` when at least 1/8 of the pairs
    touch.

    Sparse mode: only the bodies with a live pair (:func:`mark_touched`, bit 0 of
    ``touched``) walk their lists. The others have nothing to add: their force and torque are
    ``0.0 + m g`` (zero when fixed), the bits the sum loop would give them.

    - Full pass (``n_listed[0] < 0``, or ``keep`` false): every row is written, those of the
      untouched bodies by the vectorised :func:`_gravity_only` (chunks of :data:`CHUNK`
      bodies; 8,000-sphere gas: 23 -> 13 us per call).
    - Listed pass (``keep``, after a full or listed pass with the same gravity): rows that hold
      ``0.0 + m g`` are kept (bit 1 of ``touched``), so only the bodies touched now or at the
      previous step are visited: ``listed[0, :n_listed[0]]`` holds the previous step's touched
      bodies. The work is proportional to the contacts, not to the bodies: 64,000-sphere gas
      (~1,300 bodies touched), 0.165 -> 0.04 ms per call in a loop, 0.32 -> 0.17 ms in the
      step (cache-cold there); 8,000: contact phase 0.063 -> 0.050 ms per step.

    ``keep`` is false when the caller changes the rows afterwards (global bodies); rows are
    also rewritten after a dense pass, when ``gravity`` differs from ``kept_gravity`` (the
    gravity of the kept rows, updated here) and after a rebuild of the neighbour list (rows move;
    the list comes with ``n_listed[0] = -1``)."""
    pf, pta, ptb = pair_rows(pout)
    gx, gy, gz = gravity[0], gravity[1], gravity[2]
    same = (kept_gravity[0] == gx) & (kept_gravity[1] == gy) & (kept_gravity[2] == gz)
    kept_gravity[0], kept_gravity[1], kept_gravity[2] = gx, gy, gz
    if dense:
        for i in prange(n_owned):
            _body_sum(i, ptr, entry, live, True, pf, pta, ptb, flags, mass, gx, gy, gz, force,
                      torque)
        n_listed[0] = -1
        return
    fo, to = force.reshape(-1), torque.reshape(-1)
    if keep and same and n_listed[0] >= 0:
        prev = listed[0]
        n_prev = n_listed[0]
        for k in range(n_prev):
            touched[prev[k]] = 0
        now = listed[1]
        n_now = mark_touched(n_owned, pa, pb, live, touched, now)
        for k in range(n_now):
            if _FAR:
                # the rows of the body AHEAD places on, the entries of the one half as far
                if k + AHEAD < n_now:
                    f = now[k + AHEAD]
                    prefetch(ptr, f)
                    prefetch(mass, f)
                    prefetch(fo, 3 * f)
                    prefetch(to, 3 * f)
                if k + AHEAD // 2 < n_now:
                    prefetch(entry, ptr[now[k + AHEAD // 2]])
            i = now[k]
            _body_sum(i, ptr, entry, live, False, pf, pta, ptb, flags, mass, gx, gy, gz, force,
                      torque)
        for k in range(n_prev):
            if _FAR and k + AHEAD < n_prev:
                f = prev[k + AHEAD]
                prefetch(touched, f)
                prefetch(mass, f)
                prefetch(fo, 3 * f)
                prefetch(to, 3 * f)
            i = prev[k]
            if touched[i] == 0:
                _gravity_only(1, flags[i:i + 1], mass[i:i + 1], gx, gy, gz, fo[3 * i:3 * i + 3],
                              to[3 * i:3 * i + 3])
                touched[i] = 2
        prev[:n_now] = now[:n_now]
        n_listed[0] = n_now
        return
    touched[:n_owned] = 0
    n_now = mark_touched(n_owned, pa, pb, live, touched, listed[0])
    for c in prange((n_owned + CHUNK - 1) // CHUNK):
        a = c * CHUNK
        b = min(a + CHUNK, n_owned)
        _gravity_only(b - a, flags[a:b], mass[a:b], gx, gy, gz, fo[3 * a:3 * b],
                      to[3 * a:3 * b])
        for i in range(a, b):
            if touched[i] != 0:
                _body_sum(i, ptr, entry, live, False, pf, pta, ptb, flags, mass, gx, gy, gz,
                          force, torque)
            else:
                touched[i] = 2
    n_listed[0] = n_now if keep else -1


#: how many pairs ahead :func:`sphere_pairs_in_play` asks for the rows it will read (32 was
#: the best of 8, 16, 32 and 64, caches flushed, 2026-11-29) ...
AHEAD = 32
#: ... when a rank stores at least this many bodies (below, the rows stay in the caches: the
#: loop that asks took 5 % more time, 8,000-sphere gas, 19-22 us per step)
FAR_ROWS = 32768
_FAR = False        # see sphere_pairs_in_play


def _sphere_pairs_in_play(n_sel, every, sel, pa, pb, hist, shape, params, position, image, box,
                          live, touching, gap, lim, out):
    """The pairs among the ``n_sel`` of ``sel`` (all of them when ``every``) that
    :func:`sphere_pair_forces` has to handle: those in contact now, and those whose stored state
    (``live``, ``touching``) it must clear. Writes their pair indices into ``out`` in increasing
    order (a ``sel`` for the force kernel, with ``every`` False) and returns their number.

    For the others the force kernel computes a distance and does nothing else; in a gas they are
    nearly all of the list (64,000 spheres: ~550 in contact of ~47,000 candidates). This loop
    does only that distance test, with no force code around it, and the force kernel then runs
    on the short list, in the same order: the same bits, since the pairs left out add nothing.
    The test is the force kernel's own (same expressions), so a pair it finds touching is
    listed.

    ``gap`` (:func:`parsim.neighbours._pair_gaps`): each pair's gap at the reference poses;
    ``lim``: a bound on twice the largest distance any body has moved since those poses (the
    step's ``moved``, over all ranks, plus a rounding hair; ``inf`` when unknown). Two bodies
    that each moved at most D have closed their gap by at most 2 D, so a pair with
    ``gap > lim`` that is neither live nor touching is left out without reading the bodies:
    its test would fail. After a rebuild D starts at 0 and grows to half the skin before the
    next one, so on average about half the candidates are read.

    The test reads the two bodies' rows at random places. When they are not in the caches (a
    large rank: the 125,000-sphere gas's step streams 40 MB before this loop) each pair waited
    for memory in turn. The build with ``_FAR`` (a constant) asks for the rows of the pair
    :data:`AHEAD` places on: 1.1-1.6 ms -> 0.47-0.57 ms on 52,677 candidates of that gas with
    the caches flushed, 0.93-1.05 -> 0.30-0.39 ms per step in the run."""
    # first the candidates by their gap, branch-free (about half are kept on average, in no
    # pattern a branch predictor could follow), then the test of those, compacted in place
    m = 0
    for q in range(n_sel):
        p = np.int64(q) if every else np.int64(sel[q])
        h = p if every else np.int64(hist[p])
        out[m] = p
        m += np.int64((gap[p] <= lim) | (live[p] != 0) | touching[h])
    k = 0
    xs, rs = position.reshape(-1), params.reshape(-1)
    for t in range(m):
        if _FAR and t + AHEAD < m:
            f = out[t + AHEAD]
            fa, fb = pa[f], pb[f]
            prefetch(xs, 3 * fa)
            prefetch(xs, 3 * fb)
            prefetch(rs, 3 * fa)
            prefetch(rs, 3 * fb)
        p = out[t]
        h = p if every else np.int64(hist[p])
        a = pa[p]
        b = pb[p]
        ra = params[a, 0]
        if shape[b] == PLANE:
            nx, ny, nz = params[b, 0], params[b, 1], params[b, 2]
            d = ((position[a, 0] - position[b, 0]) * nx + (position[a, 1] - position[b, 1]) * ny
                 + (position[a, 2] - position[b, 2]) * nz)
            hit = ra - d > 0.0
        else:
            rb = params[b, 0]
            sx, sy, sz = relative_shift(image[a], image[b], box[0], box[1], box[2])
            dx = position[a, 0] - (position[b, 0] + sx)
            dy = position[a, 1] - (position[b, 1] + sy)
            dz = position[a, 2] - (position[b, 2] + sz)
            rsum = ra + rb
            # the force kernel's condition (rsq < rsum^2, then rsum - r > 0); a listed pair that
            # turns out not to touch is merely handled as open there
            hit = dx * dx + dy * dy + dz * dz < rsum * rsum
        if hit or live[p] != 0 or touching[h]:
            out[k] = p
            k += 1
    return k


_in_play_near = variant(_sphere_pairs_in_play, "_near", _FAR=False)
#: the listing of the pairs in play (the build without ``_FAR``); ``Simulation._forces`` takes
#: :data:`_in_play_far` instead on ranks of :data:`FAR_ROWS` bodies or more
sphere_pairs_in_play = _in_play_near
_in_play_far = variant(_sphere_pairs_in_play, "_far", _FAR=True)


sphere_pair_forces = dual(_sphere_pair_forces)
#: the serial build that asks for the rows of the pair :data:`AHEAD` places on (the pairs in
#: play of ranks of :data:`FAR_ROWS` bodies or more; ``Simulation._forces`` picks it)
_pair_forces_far = variant(_sphere_pair_forces, "_far", _FAR=True)
accumulate = dual(_accumulate)
#: the serial build whose listed pass asks for the rows of the bodies :data:`AHEAD` places on
#: (sparse sums of ranks of :data:`FAR_ROWS` bodies or more; ``Simulation._forces`` picks it):
#: 125,000-sphere gas, caches flushed, 0.44-0.45 -> 0.32-0.36 ms
_accumulate_far = variant(_accumulate, "_far", _FAR=True)
