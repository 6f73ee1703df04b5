"""Hypothesis draws of boxes, box mutations and queries for the broad-phase property tests.

All coordinates are dyadic (multiples of 1/16, halves and quarters of those after mutations) of
moderate bit length, and ray directions have components in {0, +-1/2, +-1, +-2}: every operation
a broad phase or the oracle performs on them (comparisons, differences, products, divisions by a
direction component) is exact. So the oracle answers carry no tolerance, and the cases where a
closed interval matters -- shared faces, points on faces, rays grazing a face, a ray entering a
box exactly at ``t_max``, a box at exactly distance ``r`` -- are generated on purpose.

The ``draw_*`` functions take a hypothesis ``draw`` callable (inside ``st.composite``) and a list
of reference boxes (boxes already present or drawn earlier in the batch) to touch, duplicate or
aim at; the composite strategies at the end wrap them so a test needs one ``data.draw`` per batch
or query (each ``data.draw`` is costly, and the failure report then shows whole batches).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

Q = 1.0 / 16.0  # coordinate quantum

BOX_KINDS = ("poly", "cluster", "elongated", "far", "negative", "touch", "point", "dup")
MUTATIONS = ("move", "rotate", "teleport", "same", "collapse", "touch", "dup")

# Far-away regions (|x| ~ 1e6, sizes ~ 1): several boxes land near the same anchor and overlap.
FAR_ANCHORS = (
    (1.0e6, 1.0e6, 1.0e6),
    (-1.0e6, 2.0e6, -1.0e6),
    (1048576.0, -1048576.0, 0.0),
)


COMPONENT = st.sampled_from((0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0))
NONZERO_COMPONENT = st.sampled_from((1.0, -1.0, 0.5, -0.5, 2.0, -2.0))


def _qint(draw, lo: int, hi: int) -> float:
    return draw(st.integers(lo, hi)) * Q


def _ref(draw, refs: list):
    return refs[draw(st.integers(0, len(refs) - 1))]


def _center(draw, lo: int, hi: int) -> np.ndarray:
    return np.array([_qint(draw, lo, hi) for _ in range(3)])


def _box_from(center: np.ndarray, ext: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return center - ext / 2, center + ext / 2


def draw_box(draw, kind: str, refs: list) -> tuple[np.ndarray, np.ndarray]:
    """One closed box ``(lo, hi)`` of the given kind."""
    if kind in ("touch", "dup") and not refs:
        kind = "poly"
    if kind == "poly":
        # polydisperse: edge 1/16 .. 64 (ratio 1024), mildly anisotropic
        base = 2.0 ** draw(st.integers(0, 10)) * Q
        ext = np.array([base * draw(st.sampled_from((0.5, 0.75, 1.0))) for _ in range(3)])
        return _box_from(_center(draw, -1024, 1024), ext)
    if kind == "cluster":
        # many boxes in a 2 x 2 x 2 region
        base = 2.0 ** draw(st.integers(0, 4)) * Q
        ext = np.array([base * draw(st.sampled_from((0.5, 1.0))) for _ in range(3)])
        return _box_from(_center(draw, 0, 32), ext)
    if kind == "elongated":
        scale = draw(st.sampled_from((0.5, 1.0, 2.0)))
        ext = np.full(3, scale)
        ext[draw(st.integers(0, 2))] = 10 * scale
        return _box_from(_center(draw, -256, 256), ext)
    if kind == "far":
        anchor = np.array(draw(st.sampled_from(FAR_ANCHORS)))
        ext = np.array([draw(st.sampled_from((0.5, 1.0, 1.5))) for _ in range(3)])
        return _box_from(anchor + _center(draw, -48, 48), ext)
    if kind == "negative":
        ext = np.array([draw(st.sampled_from((0.25, 1.0, 2.0))) for _ in range(3)])
        return _box_from(_center(draw, -1600, -48), ext)
    if kind == "point":
        where = draw(st.sampled_from(("free", "corner", "face"))) if refs else "free"
        if where == "free":
            p = _center(draw, -128, 128)
        else:
            rlo, rhi = _ref(draw, refs)
            pick = [draw(st.booleans()) for _ in range(3)]
            p = np.where(pick, rhi, rlo).astype(float)
            if where == "face":  # on one face, inside the other two ranges
                a = draw(st.integers(0, 2))
                for b in range(3):
                    if b != a:
                        p[b] = (rlo[b] + rhi[b]) / 2
        return p.copy(), p.copy()
    if kind == "dup":
        rlo, rhi = _ref(draw, refs)
        return rlo.copy(), rhi.copy()
    if kind == "touch":
        rlo, rhi = _ref(draw, refs)
        ext = np.array([draw(st.sampled_from((0.0, 0.5, 1.0, 3.0))) for _ in range(3)])
        lo = np.empty(3)
        a = draw(st.integers(0, 2))
        mode = draw(st.sampled_from(("face", "face", "edge", "gap")))
        for b in range(3):
            if b == a or mode == "edge":
                # shared face plane (or edge/corner when every axis does it); "gap": 1/16 apart
                above = draw(st.booleans())
                gap = Q if (mode == "gap" and b == a) else 0.0
                lo[b] = rhi[b] + gap if above else rlo[b] - ext[b] - gap
            else:
                lo[b] = rlo[b] + _qint(draw, -16, 16)
        return lo, lo + ext
    raise ValueError(kind)


def draw_mutation(draw, lo: np.ndarray, hi: np.ndarray, refs: list) -> tuple[np.ndarray, np.ndarray]:
    """A new AABB for a body that had ``[lo, hi]``: moved, rotated (resized), teleported, ..."""
    kind = draw(st.sampled_from(MUTATIONS))
    if kind == "move":
        d = _center(draw, -32, 32)
        return lo + d, hi + d
    if kind == "rotate":
        # the AABB of a rotating body grows or shrinks (by up to sqrt(3) for a cube, more for
        # elongated bodies): enough to move it to another grid of the hierarchy
        c = (lo + hi) / 2
        half = (hi - lo) / 2
        fac = np.array([draw(st.sampled_from((0.25, 0.5, 0.75, 1.25, 1.75, 2.0, 4.0)))
                        for _ in range(3)])
        half = np.where(half > 0, half * fac, Q * fac)
        half = np.clip(half, Q / 4, 128.0)  # sizes stay within a realistic range (ratio 2^15)
        return c - half, c + half
    if kind == "teleport":
        return draw_box(draw, draw(st.sampled_from(BOX_KINDS)), refs)
    if kind == "same":
        return lo.copy(), hi.copy()
    if kind == "collapse":
        c = (lo + hi) / 2
        return c.copy(), c.copy()
    return draw_box(draw, kind, refs)


def draw_direction(draw) -> np.ndarray:
    d = np.array([draw(COMPONENT) for _ in range(3)])
    if not d.any():
        d[draw(st.integers(0, 2))] = draw(NONZERO_COMPONENT)
    return d


def draw_box_query(draw, refs: list) -> tuple[np.ndarray, np.ndarray]:
    mode = draw(st.sampled_from(("random", "exact", "point", "touch", "huge"))) if refs else "random"
    if mode == "random":
        return draw_box(draw, draw(st.sampled_from(BOX_KINDS)), refs)
    if mode == "exact":
        rlo, rhi = _ref(draw, refs)
        return rlo.copy(), rhi.copy()
    if mode == "point":
        return draw_box(draw, "point", refs)
    if mode == "touch":
        return draw_box(draw, "touch", refs)
    return np.full(3, -4.0e6), np.full(3, 4.0e6)


def draw_radius_query(draw, refs: list) -> tuple[np.ndarray, float]:
    mode = draw(st.sampled_from(("random", "face", "corner", "inside"))) if refs else "random"
    if mode == "random":
        p = _center(draw, -1024, 1024)
        r = draw(st.sampled_from((0.0, Q, 0.5, 1.0, 2.5, 8.0, 40.0, 100.0)))
        return p, r
    rlo, rhi = _ref(draw, refs)
    c = (rlo + rhi) / 2
    if mode == "inside":
        return c, draw(st.sampled_from((0.0, Q)))
    k = draw(st.integers(0, 16))
    delta = draw(st.sampled_from((-1, 0, 0, 1)))  # r just short of, at, or past the box
    if mode == "face":
        a = draw(st.integers(0, 2))
        p = c.copy()
        p[a] = rhi[a] + k * Q
        return p, max(0.0, (k + delta) * Q)
    # corner: offset (3k, 4k, 0) from the upper corner, distance exactly 5k
    p = rhi + np.array([3.0, 4.0, 0.0]) * k * Q
    return p, max(0.0, (5 * k + delta) * Q)


def draw_ray(draw, refs: list) -> tuple[np.ndarray, np.ndarray, float]:
    d = draw_direction(draw)
    mode = draw(st.sampled_from(("random", "inside", "aim", "graze", "tmax"))) if refs else "random"
    t_max = draw(st.sampled_from((np.inf, np.inf, 0.0, 1.0, 2.5, 10.0, 1000.0)))
    if mode == "random":
        return _center(draw, -512, 512), d, t_max
    rlo, rhi = _ref(draw, refs)
    c = (rlo + rhi) / 2
    if mode == "inside":
        return c, d, t_max
    back = draw(st.integers(0, 64)) * Q
    if mode == "aim":
        # origin such that the ray passes through the box centre (after t = back)
        return c - back * d, d, t_max
    if mode == "graze":
        # travel along an axis in the plane of a face of the box (closed: it hits)
        a = draw(st.integers(0, 2))
        dd = np.zeros(3)
        dd[a] = draw(st.sampled_from((1.0, -1.0, 2.0)))
        o = c - back * dd
        b = (a + 1) % 3
        o[b] = draw(st.sampled_from([rlo[b], rhi[b]]))
        return o, dd, t_max
    # tmax: axis ray that reaches the face of the box exactly at t_max
    a = draw(st.integers(0, 2))
    dd = np.zeros(3)
    s = draw(st.sampled_from((1.0, 2.0, 0.5)))
    dd[a] = s
    o = c.copy()
    o[a] = rlo[a] - back
    return o, dd, back / s


# --------------------------------------------------------------------------------------------
# composite strategies (one data.draw each)
# --------------------------------------------------------------------------------------------

@st.composite
def box_batch(draw, refs: list, n: int):
    """``(kind, lo[n, 3], hi[n, 3])``: n boxes of one kind, or of mixed kinds."""
    kind = draw(st.sampled_from(BOX_KINDS + ("mixed",)))
    refs = list(refs)
    lo, hi = [], []
    for _ in range(n):
        k = draw(st.sampled_from(BOX_KINDS)) if kind == "mixed" else kind
        a, b = draw_box(draw, k, refs)
        refs.append((a, b))
        lo.append(a)
        hi.append(b)
    return kind, np.array(lo), np.array(hi)


@st.composite
def mutation_batch(draw, boxes: list, refs: list):
    """New ``(lo[n, 3], hi[n, 3])`` for the bodies whose current boxes are ``boxes``."""
    lo, hi = [], []
    for a, b in boxes:
        x, y = draw_mutation(draw, a, b, refs)
        lo.append(x)
        hi.append(y)
    return np.array(lo).reshape(-1, 3), np.array(hi).reshape(-1, 3)


@st.composite
def queries(draw, refs: list):
    """``(box query, radius query, ray query)`` aimed at the reference boxes."""
    return draw_box_query(draw, refs), draw_radius_query(draw, refs), draw_ray(draw, refs)
