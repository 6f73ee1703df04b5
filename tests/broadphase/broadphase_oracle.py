"""Pure-numpy brute-force oracle for the broad-phase tests (independent of ``parsim``).

Everything here is written from the contract alone (closed AABBs, infinite bodies pair with every
finite body and with nothing infinite, results sorted), with plain vectorised numpy:

* :func:`pairs` -- closed-interval overlap of all pairs, chunked so a few thousand boxes stay
  within a few MB;
* :func:`query_box`, :func:`query_radius`, :func:`raycast` -- linear scans;
* :class:`Model` -- the expected state (finite boxes by id, infinite ids) a test mutates in step
  with the structure under test;
* ``assert_*`` helpers that compare a structure's answers with the oracle and print the boxes
  involved when they differ.

Float answers that depend on rounding (radius and ray queries on arbitrary floats) come with an
"ambiguous" mask: a body whose exact answer lies within a relative ``tol`` of the decision
boundary may be reported either way. With ``tol=0`` (tests on dyadic coordinates, where every
operation is exact) there is no slack at all.
"""

from __future__ import annotations

import numpy as np

EMPTY_IDS = np.empty(0, dtype=np.int64)


# --------------------------------------------------------------------------------------------
# the expected state
# --------------------------------------------------------------------------------------------

class Model:
    """Expected contents: finite boxes ``id -> (lo, hi)`` and a set of infinite ids."""

    def __init__(self):
        self.boxes: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.infinite: set[int] = set()

    def copy(self) -> "Model":
        m = Model()
        m.boxes = {k: (v[0].copy(), v[1].copy()) for k, v in self.boxes.items()}
        m.infinite = set(self.infinite)
        return m

    def __len__(self) -> int:
        return len(self.boxes) + len(self.infinite)

    def present(self, i: int) -> bool:
        return i in self.boxes or i in self.infinite

    def add(self, ids, lo, hi) -> None:
        for i, a, b in zip(np.asarray(ids).tolist(), np.asarray(lo, float), np.asarray(hi, float)):
            assert not self.present(i), f"test bug: id {i} added twice"
            self.boxes[int(i)] = (a.copy(), b.copy())

    def update(self, ids, lo, hi) -> None:
        for i, a, b in zip(np.asarray(ids).tolist(), np.asarray(lo, float), np.asarray(hi, float)):
            assert i in self.boxes, f"test bug: update of absent id {i}"
            self.boxes[int(i)] = (a.copy(), b.copy())

    def remove(self, ids) -> None:
        for i in np.asarray(ids).tolist():
            if i in self.infinite:
                self.infinite.discard(i)
            else:
                del self.boxes[i]

    def add_infinite(self, ids) -> None:
        for i in np.asarray(ids).tolist():
            assert not self.present(i), f"test bug: id {i} added twice"
            self.infinite.add(int(i))

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Finite bodies as (ids sorted, lo, hi)."""
        ids = np.array(sorted(self.boxes), dtype=np.int64)
        if ids.size == 0:
            return ids, np.empty((0, 3)), np.empty((0, 3))
        lo = np.array([self.boxes[i][0] for i in ids.tolist()], dtype=np.float64)
        hi = np.array([self.boxes[i][1] for i in ids.tolist()], dtype=np.float64)
        return ids, lo, hi

    def inf_ids(self) -> np.ndarray:
        return np.array(sorted(self.infinite), dtype=np.int64)

    # convenience wrappers over the module functions
    def pairs(self) -> np.ndarray:
        ids, lo, hi = self.arrays()
        return pairs(ids, lo, hi, self.inf_ids())

    def query_box(self, qlo, qhi) -> np.ndarray:
        ids, lo, hi = self.arrays()
        return query_box(ids, lo, hi, qlo, qhi, self.inf_ids())

    def query_radius(self, p, r, tol=0.0):
        ids, lo, hi = self.arrays()
        return query_radius(ids, lo, hi, p, r, self.inf_ids(), tol)

    def raycast(self, o, d, t_max=np.inf, tol=0.0):
        ids, lo, hi = self.arrays()
        return raycast(ids, lo, hi, o, d, t_max, self.inf_ids(), tol)


# --------------------------------------------------------------------------------------------
# oracle functions
# --------------------------------------------------------------------------------------------

def canonical_pairs(p: np.ndarray) -> np.ndarray:
    """Rows sorted lexicographically (no other change)."""
    p = np.asarray(p, dtype=np.int64).reshape(-1, 2)
    if p.shape[0] == 0:
        return p
    order = np.lexsort((p[:, 1], p[:, 0]))
    return p[order]


def finite_pairs(ids, lo, hi, chunk: int = 256) -> np.ndarray:
    """All overlapping pairs of closed boxes as rows (a, b), a < b, sorted."""
    ids = np.asarray(ids, dtype=np.int64)
    lo = np.asarray(lo, dtype=np.float64).reshape(-1, 3)
    hi = np.asarray(hi, dtype=np.float64).reshape(-1, 3)
    n = ids.shape[0]
    out = []
    for s in range(0, n, chunk):
        e = min(n, s + chunk)
        # rows s..e-1 against columns s..n-1 (keep column index > row index)
        ov = np.ones((e - s, n - s), dtype=bool)
        for d in range(3):
            ov &= lo[s:e, None, d] <= hi[None, s:, d]
            ov &= lo[None, s:, d] <= hi[s:e, None, d]
        r, c = np.nonzero(ov)
        keep = c > r
        i = s + r[keep]
        j = s + c[keep]
        a, b = ids[i], ids[j]
        out.append(np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1))
    if not out:
        return np.empty((0, 2), dtype=np.int64)
    return canonical_pairs(np.concatenate(out))


def pairs(ids, lo, hi, inf_ids=EMPTY_IDS) -> np.ndarray:
    """Finite-finite overlaps plus (infinite, finite) for every infinite and finite body."""
    fp = finite_pairs(ids, lo, hi)
    inf_ids = np.asarray(inf_ids, dtype=np.int64)
    ids = np.asarray(ids, dtype=np.int64)
    if inf_ids.size == 0 or ids.size == 0:
        return fp
    a = np.repeat(inf_ids, ids.size)
    b = np.tile(ids, inf_ids.size)
    ip = np.stack([np.minimum(a, b), np.maximum(a, b)], axis=1)
    return canonical_pairs(np.concatenate([fp, ip]))


def query_box(ids, lo, hi, qlo, qhi, inf_ids=EMPTY_IDS) -> np.ndarray:
    ids = np.asarray(ids, dtype=np.int64)
    qlo = np.asarray(qlo, dtype=np.float64)
    qhi = np.asarray(qhi, dtype=np.float64)
    if ids.size:
        hit = np.all((lo <= qhi) & (qlo <= hi), axis=1)
        found = ids[hit]
    else:
        found = EMPTY_IDS
    return np.sort(np.concatenate([found, np.asarray(inf_ids, dtype=np.int64)]))


def query_radius(ids, lo, hi, p, r, inf_ids=EMPTY_IDS, tol: float = 0.0):
    """(sure ids sorted, ambiguous ids): boxes whose distance to p is <= r.

    ``tol`` > 0 marks boxes with ``|dist - r| <= tol * scale`` as ambiguous (either answer is
    accepted); ``scale`` is the magnitude of the coordinates involved.
    """
    ids = np.asarray(ids, dtype=np.int64)
    p = np.asarray(p, dtype=np.float64)
    r = float(r)
    if ids.size == 0:
        return np.sort(np.asarray(inf_ids, dtype=np.int64)), EMPTY_IDS
    gap = np.maximum(np.maximum(lo - p, p - hi), 0.0)
    dist2 = np.sum(gap * gap, axis=1)
    inside = dist2 <= r * r
    if tol > 0:
        dist = np.sqrt(dist2)
        scale = 1.0 + r + np.abs(p).max() + np.maximum(np.abs(lo).max(axis=1), np.abs(hi).max(axis=1))
        amb = np.abs(dist - r) <= tol * scale
    else:
        amb = np.zeros(ids.size, dtype=bool)
    sure = ids[inside & ~amb]
    return np.sort(np.concatenate([sure, np.asarray(inf_ids, dtype=np.int64)])), np.sort(ids[amb])


def ray_enter(lo, hi, o, d, t_max):
    """Per box: (t_enter, t_exit) of the segment o + t d, 0 <= t <= t_max; hit iff enter <= exit."""
    lo = np.asarray(lo, dtype=np.float64).reshape(-1, 3)
    hi = np.asarray(hi, dtype=np.float64).reshape(-1, 3)
    n = lo.shape[0]
    t_in = np.zeros(n)
    t_out = np.full(n, float(t_max))
    for k in range(3):
        if d[k] == 0.0:
            outside = (o[k] < lo[:, k]) | (o[k] > hi[:, k])
            t_in[outside] = np.inf
            t_out[outside] = -np.inf
            continue
        ta = (lo[:, k] - o[k]) / d[k]
        tb = (hi[:, k] - o[k]) / d[k]
        t_in = np.maximum(t_in, np.minimum(ta, tb))
        t_out = np.minimum(t_out, np.maximum(ta, tb))
    return t_in, t_out


def raycast(ids, lo, hi, o, d, t_max=np.inf, inf_ids=EMPTY_IDS, tol: float = 0.0):
    """(ids, t_enter) of sure hits sorted by (t, id), plus (ids, t_enter) of ambiguous boxes.

    Infinite bodies are sure hits with t = 0. With ``tol`` > 0, a box whose entry and exit
    parameters (or entry and ``t_max``) agree within ``tol`` relative is ambiguous.
    """
    ids = np.asarray(ids, dtype=np.int64)
    o = np.asarray(o, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    inf_ids = np.asarray(inf_ids, dtype=np.int64)
    if ids.size:
        t_in, t_out = ray_enter(lo, hi, o, d, t_max)
        hit = t_in <= t_out
        if tol > 0:
            fin = np.isfinite(t_in) & np.isfinite(t_out)
            scale = 1.0 + np.abs(np.where(fin, t_in, 0)) + np.abs(np.where(fin, t_out, 0))
            # slabs of a zero direction component are exact comparisons: never ambiguous
            amb = fin & (np.abs(t_in - t_out) <= tol * scale)
        else:
            amb = np.zeros(ids.size, dtype=bool)
        sure = hit & ~amb
        s_ids, s_t = ids[sure], t_in[sure]
        a_ids, a_t = ids[amb], t_in[amb]
    else:
        s_ids, s_t = EMPTY_IDS, np.empty(0)
        a_ids, a_t = EMPTY_IDS, np.empty(0)
    s_ids = np.concatenate([inf_ids, s_ids])
    s_t = np.concatenate([np.zeros(inf_ids.size), s_t])
    order = np.lexsort((s_ids, s_t))
    return (s_ids[order], s_t[order]), (a_ids, a_t)


# --------------------------------------------------------------------------------------------
# comparisons
# --------------------------------------------------------------------------------------------

def _describe(model: Model | None, idlist) -> str:
    if model is None:
        return ""
    lines = []
    for i in idlist[:6]:
        if i in model.boxes:
            lo, hi = model.boxes[i]
            lines.append(f"    {i}: lo={lo.tolist()} hi={hi.tolist()}")
        elif i in model.infinite:
            lines.append(f"    {i}: infinite")
        else:
            lines.append(f"    {i}: not present")
    return "\n" + "\n".join(lines) if lines else ""


def check_pair_array(got) -> np.ndarray:
    """Shape/dtype/exactly-once/a<b checks; returns the rows sorted."""
    got = np.asarray(got)
    assert got.dtype == np.int64, f"pairs() dtype {got.dtype}, expected int64"
    assert got.ndim == 2 and got.shape[1] == 2, f"pairs() shape {got.shape}, expected (m, 2)"
    if got.shape[0]:
        bad = got[:, 0] >= got[:, 1]
        assert not bad.any(), f"pairs() rows with a >= b: {got[bad][:10].tolist()}"
    srt = canonical_pairs(got)
    if srt.shape[0] > 1:
        dup = np.all(srt[1:] == srt[:-1], axis=1)
        assert not dup.any(), f"pairs() repeats rows: {srt[1:][dup][:10].tolist()}"
    return srt


def assert_pairs_equal(got, expected, model: Model | None = None, label: str = "") -> None:
    srt = check_pair_array(got)
    exp = canonical_pairs(expected)
    if srt.shape == exp.shape and np.array_equal(srt, exp):
        return
    gs = set(map(tuple, srt.tolist()))
    es = set(map(tuple, exp.tolist()))
    missing = sorted(es - gs)
    extra = sorted(gs - es)
    msg = [f"{label}pairs() differs from the oracle: {len(gs)} vs {len(es)} pairs"]
    if missing:
        msg.append(f"  missing ({len(missing)}): {missing[:10]}")
        msg.append(_describe(model, [x for pr in missing[:3] for x in pr]))
    if extra:
        msg.append(f"  extra ({len(extra)}): {extra[:10]}")
        msg.append(_describe(model, [x for pr in extra[:3] for x in pr]))
    raise AssertionError("\n".join(msg))


def assert_ids_equal(got, expected, ambiguous=EMPTY_IDS, model: Model | None = None,
                     label: str = "query") -> None:
    """Sorted int64 ids, no repeats; equal to expected up to the ambiguous ids."""
    got = np.asarray(got)
    assert got.dtype == np.int64, f"{label}: dtype {got.dtype}, expected int64"
    assert got.ndim == 1, f"{label}: shape {got.shape}, expected 1-D"
    if got.size > 1:
        assert np.all(got[1:] > got[:-1]), f"{label}: ids not strictly increasing: {got.tolist()[:20]}"
    g = set(got.tolist())
    e = set(np.asarray(expected).tolist())
    amb = set(np.asarray(ambiguous).tolist())
    missing = sorted(e - g)
    extra = sorted(g - e - amb)
    if missing or extra:
        raise AssertionError(
            f"{label} differs from the oracle: missing {missing[:10]}, extra {extra[:10]}"
            + _describe(model, (missing + extra)[:6])
        )


def assert_ray_equal(got, expected, ambiguous=(EMPTY_IDS, np.empty(0)), model: Model | None = None,
                     label: str = "raycast", rtol: float = 1e-12) -> None:
    gids, gt = got
    gids = np.asarray(gids)
    gt = np.asarray(gt)
    assert gids.dtype == np.int64, f"{label}: ids dtype {gids.dtype}"
    assert gt.dtype == np.float64, f"{label}: t_enter dtype {gt.dtype}"
    assert gids.shape == gt.shape and gids.ndim == 1, f"{label}: shapes {gids.shape} {gt.shape}"
    assert len(set(gids.tolist())) == gids.size, f"{label}: repeated ids {gids.tolist()[:20]}"
    # sorted by t_enter, ties by id
    if gids.size > 1:
        ok = (gt[1:] > gt[:-1]) | ((gt[1:] == gt[:-1]) & (gids[1:] > gids[:-1]))
        assert ok.all(), (f"{label}: not sorted by (t_enter, id): "
                          f"{list(zip(gids.tolist(), gt.tolist()))[:20]}")
    eids, et = expected
    aids, at = ambiguous
    exp_t = dict(zip(np.asarray(eids).tolist(), np.asarray(et).tolist()))
    amb_t = dict(zip(np.asarray(aids).tolist(), np.asarray(at).tolist()))
    got_t = dict(zip(gids.tolist(), gt.tolist()))
    missing = sorted(set(exp_t) - set(got_t))
    extra = sorted(set(got_t) - set(exp_t) - set(amb_t))
    if missing or extra:
        raise AssertionError(
            f"{label} differs from the oracle: missing {missing[:10]}, extra {extra[:10]}"
            + _describe(model, (missing + extra)[:6])
        )
    for i, t in got_t.items():
        ref = exp_t.get(i, amb_t.get(i))
        if not (t == ref or abs(t - ref) <= rtol * abs(ref)):
            raise AssertionError(f"{label}: id {i} t_enter {t!r}, oracle {ref!r}" + _describe(model, [i]))


def random_queries(model: Model, rng: np.random.Generator, n: int):
    """n box, radius and ray queries around the model's boxes (continuous random floats)."""
    ids, lo, hi = model.arrays()
    if ids.size == 0:
        lo = hi = np.zeros((1, 3))
    span_lo, span_hi = lo.min(axis=0), hi.max(axis=0)
    out = []
    for _ in range(n):
        k = rng.integers(lo.shape[0])
        c = (lo[k] + hi[k]) / 2 + rng.normal(size=3) * (1 + hi[k] - lo[k])
        half = rng.exponential(1.0 + 0.02 * (span_hi - span_lo).max(), size=3)
        box = (c - half, c + half)
        rad = ((lo[k] + hi[k]) / 2 + rng.normal(size=3) * 2, float(rng.exponential(2.0)))
        d = rng.normal(size=3)
        d[rng.random(3) < 0.2] = 0.0
        if not d.any():
            d[0] = 1.0
        o = rng.uniform(span_lo, span_hi) if rng.random() < 0.5 else (lo[k] + hi[k]) / 2 - 5 * d
        t_max = float(rng.choice([np.inf, rng.exponential(20.0)]))
        out.append((box, rad, (o, d, t_max)))
    return out


def assert_matches(bp, model: Model, rng: np.random.Generator | None = None, n_queries: int = 0,
                   tol: float = 1e-9, label: str = "") -> None:
    """len, pairs() and (optionally) random box / radius / ray queries equal the oracle's."""
    assert len(bp) == len(model), f"{label}len {len(bp)}, expected {len(model)}"
    assert_pairs_equal(bp.pairs(), model.pairs(), model, label)
    if rng is None or n_queries == 0:
        return
    ids, lo, hi = model.arrays()
    inf = model.inf_ids()
    for (qlo, qhi), (p, r), (o, d, t_max) in random_queries(model, rng, n_queries):
        assert_ids_equal(bp.query_box(qlo, qhi), query_box(ids, lo, hi, qlo, qhi, inf), model=model,
                         label=f"{label}query_box({qlo.tolist()}, {qhi.tolist()})")
        exp, amb = query_radius(ids, lo, hi, p, r, inf, tol)
        assert_ids_equal(bp.query_radius(p, r), exp, amb, model=model,
                         label=f"{label}query_radius({p.tolist()}, {r})")
        exp, amb = raycast(ids, lo, hi, o, d, t_max, inf, tol)
        assert_ray_equal(bp.raycast(o, d, t_max), exp, amb, model=model,
                         label=f"{label}raycast({o.tolist()}, {d.tolist()}, {t_max})")
