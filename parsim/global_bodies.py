"""Forces on global bodies: bodies too large for the blocks, kept and integrated by every rank.

Every rank holds a global body (and all its periodic images). A contact between a global body G
and a body X owned by some rank is evaluated by X's owner only; its share for G is an *entry*
``(uid of G, partner key, force, torque)``. Contacts of G with other replicated bodies (planes,
global bodies) are evaluated alike on every rank and taken from rank 0. All entries are gathered
on every rank, sorted by (G, partner key) and summed in that order, then gravity is added: the
same arithmetic, in the same order, as :func:`parsim.contacts.accumulate` for a body owned by one
rank, so G moves identically on every rank and as in a serial run.

A contact of G's image ``j`` with X is the contact of G with X's image ``-j`` (same relative
shift, same floats), whose partner key is ``uid_X * 27 + (26 - j)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .bodies import FIXED, GLOBAL, REPLICATED

ENTRY = np.dtype([("g", np.int64), ("key", np.int64), ("f", np.float64, (3,)),
                  ("t", np.float64, (3,))])


def local_entries(st, nl, rank: int) -> np.ndarray:
    """This rank's entries for the global bodies' force sums."""
    no = st.n_owned
    pa, pb = nl.pa, nl.pb
    fa, fb = st.flags[pa], st.flags[pb]
    ga, gb = (fa & GLOBAL) != 0, (fb & GLOBAL) != 0
    rep_a, rep_b = (fa & REPLICATED) != 0, (fb & REPLICATED) != 0
    own_a, own_b = pa < no, pb < no
    root = rank == 0
    side_a = np.flatnonzero(ga & ((own_b & ~rep_b) | (root & own_a & rep_b)))
    side_b = np.flatnonzero(gb & ((own_a & ~rep_a) | (root & own_b & rep_a)))
    out = np.empty(side_a.size + side_b.size, dtype=ENTRY)
    k = side_a.size
    a, b = pa[side_a], pb[side_a]
    out["g"][:k] = st.uid[a]
    out["key"][:k] = st.uid[b] * 27 + (26 - st.image[a].astype(np.int64) + st.image[b] - 13)
    out["f"][:k] = nl.pf[side_a]
    out["t"][:k] = nl.pta[side_a]
    a, b = pa[side_b], pb[side_b]
    out["g"][k:] = st.uid[b]
    out["key"][k:] = st.uid[a] * 27 + (26 - st.image[b].astype(np.int64) + st.image[a] - 13)
    out["f"][k:] = -nl.pf[side_b]
    out["t"][k:] = nl.ptb[side_b]
    return out


@njit(cache=True)
def _sums(g, f, t, uids, force, torque):
    """Sequential sums of the sorted entries per global body (``uids`` sorted)."""
    j = 0
    for i in range(uids.shape[0]):
        fx = fy = fz = 0.0
        tx = ty = tz = 0.0
        while j < g.shape[0] and g[j] < uids[i]:
            j += 1
        while j < g.shape[0] and g[j] == uids[i]:
            fx += f[j, 0]
            fy += f[j, 1]
            fz += f[j, 2]
            tx += t[j, 0]
            ty += t[j, 1]
            tz += t[j, 2]
            j += 1
        force[i, 0], force[i, 1], force[i, 2] = fx, fy, fz
        torque[i, 0], torque[i, 1], torque[i, 2] = tx, ty, tz


def assemble(st, nl, net, gravity) -> None:
    """Overwrite force and torque of the owned global bodies with their sums over all ranks."""
    no = st.n_owned
    slots = np.flatnonzero(st.flags[:no] & GLOBAL)
    if slots.size == 0:
        return
    e = net.allgather_records(local_entries(st, nl, net.rank), ENTRY)
    order = np.lexsort((e["key"], e["g"]))
    e = e[order]
    slots = slots[np.argsort(st.uid[slots])]
    uids = st.uid[slots]
    force = np.empty((slots.size, 3))
    torque = np.empty((slots.size, 3))
    _sums(np.ascontiguousarray(e["g"]), np.ascontiguousarray(e["f"]),
          np.ascontiguousarray(e["t"]), uids, force, torque)
    fixed = (st.flags[slots] & FIXED) != 0
    force[~fixed] += st.mass[slots][~fixed, None] * gravity[None, :]
    force[fixed] = 0.0
    torque[fixed] = 0.0
    st.force[slots] = force
    st.torque[slots] = torque
