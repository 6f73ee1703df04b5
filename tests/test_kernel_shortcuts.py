"""The step kernels' shortcuts change no result.

* The per-body sums add every pair's row in "dense" mode and skip pairs that are not live in
  "sparse" mode, where bodies without a live pair (``mark_touched``) skip their lists
  altogether; all must give the same bits, which rests on the invariant that a pair out of
  contact has an all-zero output row.
* The general pair kernel skips the narrow phase when the bounding spheres (or bounding sphere
  and plane) are apart; the narrow phase must then find no contact, including for the
  orientations that bring a shape's farthest point (box corner, capsule tip) onto the line of
  centres, where the bounding sphere is tight.
"""

from __future__ import annotations

import numpy as np
import pytest

import parsim
from parsim.contacts import accumulate, mark_touched
from parsim.contacts_general import _apart
from parsim.narrowphase import MAX_CONTACTS, collide
from parsim.shapes import BOX, CAPSULE, PLANE, SPHERE, bounding_radius


def _box_with_floor(seed, layers, shuffle=False):
    """A box periodic in x and y with a floor plane, and 6 x 6 x ``layers`` jittered lattice
    sites for bodies (in random order if ``shuffle``: uids then lie scattered in space)."""
    rng = np.random.default_rng(seed)
    sim = parsim.Simulation(dt=2e-5, gravity=(0, 0, -9.81), domain=((0, 0, 0), (3, 3, 10)),
                            periodic=(True, True, False))
    m = sim.add_material("m", density=1000.0, restitution=0.4, collision_time=1e-3, friction=0.5,
                         rolling_friction=0.01)
    sim.add_plane((0, 0, 0), (0, 0, 1), m)
    g = np.stack(np.meshgrid(np.arange(6), np.arange(6), np.arange(layers), indexing="ij"),
                 -1).reshape(-1, 3)
    if shuffle:
        g = g[rng.permutation(len(g))]
    pos = (g + 0.5) * 0.5 + rng.uniform(-0.02, 0.02, g.shape)
    return sim, m, rng, g, pos


def _pile(seed=4):
    sim, m, rng, g, pos = _box_with_floor(seed, 8)
    q = rng.normal(size=(len(g), 4))
    q /= np.linalg.norm(q, axis=1)[:, None]
    third = len(g) // 3
    sim.add_spheres(pos[:third], rng.uniform(0.2, 0.26, third), m,
                    velocities=rng.uniform(-0.5, 0.5, (third, 3)))
    sim.add_boxes(pos[third:2 * third], np.full((third, 3), 0.17), m, orientations=q[:third])
    rest = len(g) - 2 * third
    sim.add_capsules(pos[2 * third:], np.full(rest, 0.1), np.full(rest, 0.12), m,
                     orientations=q[:rest])
    return sim


def test_dense_and_sparse_sums_give_the_same_bits_and_open_pairs_have_zero_rows():
    sim = _pile()
    sim.run(200)
    opened = 0            # pairs that left contact since the last rebuild (rows zeroed in place)
    for step in range(400):
        st, nl = sim.st, sim.nl
        builds, was_live = nl.builds, nl.live.astype(bool).copy()
        sim.step()
        st, nl = sim.st, sim.nl
        live = nl.live.astype(bool)
        if nl.builds == builds:
            opened += int(np.count_nonzero(was_live & ~live))
        assert np.all(nl.pout[~live] == 0.0), "a pair out of contact kept a non-zero row"
        if step % 40:
            continue
        assert 0 < live.sum() < live.size     # both branches of the sums are exercised
        touched = np.full(st.n_owned, 2, dtype=np.uint8)
        listed = np.full(st.n_owned, -1, dtype=np.int64)
        k = mark_touched(st.n_owned, nl.pa, nl.pb, nl.live, touched, listed)
        # the bodies of live pairs, by brute force
        expect = np.zeros(st.n_owned, dtype=np.uint8)
        for p in np.flatnonzero(live):
            for b in (nl.pa[p], nl.pb[p]):
                if b < st.n_owned:
                    expect[b] = 1
        assert np.array_equal(touched, expect | 2)      # bit 1 (kept rows) left as it was
        assert np.array_equal(np.sort(listed[:k]), np.flatnonzero(expect))   # each once
        assert 0 < expect.sum() < st.n_owned
        out = {}
        for dense in (False, True):          # the sparse pass marks the bodies itself
            f = np.full_like(st.force, np.nan)
            t = np.full_like(st.torque, np.nan)
            accumulate[0](st.n_owned, nl.ptr, nl.entry, nl.live, dense, touched, nl.pout,
                          st.flags, st.mass, sim.gravity, f, t, False,
                          np.full(3, np.nan), nl.pa, nl.pb, np.empty((2, st.n_owned), np.int64),
                          np.full(1, -1))
            out[dense] = (f[: st.n_owned], t[: st.n_owned])
        assert np.array_equal(out[False][0], out[True][0])
        assert np.array_equal(out[False][1], out[True][1])
        # the engine's own sums of this step (whichever mode it chose) are the same bits
        assert np.array_equal(out[True][0], st.force[: st.n_owned])
        assert np.array_equal(out[True][1], st.torque[: st.n_owned])
    assert opened > 0, "no contact opened between rebuilds: the zero-row invariant went untested"


def _farthest_direction(shape, params, q, u):
    """Orientation q of the shape rotated so that its point farthest from the centre (box
    corner, capsule tip) lies along the unit vector u (spheres: q unchanged)."""
    if shape == SPHERE:
        return q
    if shape == BOX:
        local = params / np.linalg.norm(params)
    else:
        local = np.array([1.0, 0.0, 0.0])     # capsule axis is the body x axis
    # quaternion rotating `local` onto u
    c = np.cross(local, u)
    w = 1.0 + float(np.dot(local, u))
    if w < 1e-12:                              # opposite: any perpendicular axis, 180 degrees
        axis = np.cross(local, [0.0, 0.0, 1.0])
        if np.linalg.norm(axis) < 1e-9:
            axis = np.cross(local, [0.0, 1.0, 0.0])
        axis /= np.linalg.norm(axis)
        return np.array([0.0, *axis])
    r = np.array([w, *c])
    return r / np.linalg.norm(r)


def _params(shape, rng):
    if shape == SPHERE:
        return np.array([rng.uniform(0.1, 1.0), 0.0, 0.0])
    if shape == BOX:
        return rng.uniform(0.05, 1.0, 3)
    return np.array([rng.uniform(0.05, 0.5), rng.uniform(0.0, 1.0), 0.0])


@pytest.mark.parametrize("seed", range(3))
def test_bounding_sphere_pretest_never_skips_a_contact(seed):
    rng = np.random.default_rng(seed)
    finite = (SPHERE, BOX, CAPSULE)
    skipped = touching = 0
    for trial in range(1500):
        sa = finite[trial % 3]
        sb = (SPHERE, BOX, CAPSULE, PLANE)[(trial // 3) % 4]
        pa = _params(sa, rng)
        u = rng.normal(size=3)
        u /= np.linalg.norm(u)
        tight = trial % 2 == 0                 # farthest points on the line of centres
        qa = rng.normal(size=4)
        qa /= np.linalg.norm(qa)
        if tight:
            qa = _farthest_direction(sa, pa, qa, -u)
        xa = rng.uniform(-5, 5, 3)
        ra = bounding_radius(np.array([sa]), pa[None])[0]
        if sb == PLANE:
            pb = u.copy()                      # plane normal, pointing toward A
            rb = 0.0
            qb = np.array([1.0, 0.0, 0.0, 0.0])
        else:
            pb = _params(sb, rng)
            qb = rng.normal(size=4)
            qb /= np.linalg.norm(qb)
            if tight:
                qb = _farthest_direction(sb, pb, qb, u)
            rb = bounding_radius(np.array([sb]), pb[None])[0]
        # centre distance around the bounding-sphere sum: just outside, just inside, or near
        gap = (ra + rb) * rng.choice([1 + 2e-9, 1 + 1e-6, 1 - 1e-8, 1 - 1e-6, 1 - 1e-3,
                                      rng.uniform(0.9, 1.1)])
        xb = xa - gap * u
        apart = _apart(sb, tuple(xa), tuple(xb), tuple(pb), ra, rb)
        n = np.zeros((MAX_CONTACTS, 3))
        p = np.zeros((MAX_CONTACTS, 3))
        dep = np.zeros(MAX_CONTACTS)
        k = collide(sa, pa, xa, qa, sb, pb, xb, qb, n, p, dep)
        if apart:
            skipped += 1
            assert k == 0, (f"pre-test skipped a contact: shapes {sa}/{sb}, params {pa}/{pb}, "
                            f"gap {gap / (ra + rb) - 1:+.3e}, depths {dep[:k]}")
        touching += k > 0
    # the cases are not vacuous: many pairs skipped, many in contact
    assert skipped > 300 and touching > 300


def test_storage_order_changes_no_bit():
    """The same bodies (same uids) inserted in two different orders give bit-identical runs,
    though their slots differ throughout (bodies are sorted in space at rebuilds, with ties
    kept in insertion order, and the pairs follow the slots)."""
    rng = np.random.default_rng(11)
    g = np.stack(np.meshgrid(np.arange(8), np.arange(8), np.arange(7), indexing="ij"),
                 -1).reshape(-1, 3)
    n = len(g)
    # a slightly compressed lattice: every sphere starts with ~6 contacts, so its force is a
    # sum of many terms and the order of summation would show in the bits
    pos = (g + 0.5) * 0.318 + rng.uniform(-3e-4, 3e-4, (n, 3))
    rad = rng.uniform(0.159, 0.161, n)
    vel = rng.uniform(-0.1, 0.1, (n, 3))
    uid = np.arange(100, 100 + n, dtype=np.int64)
    finals, slots = [], []
    for order in (np.arange(n), rng.permutation(n)):
        sim = parsim.Simulation(dt=5e-5, gravity=(0, 0, -9.81), domain=((0, 0, 0), (4, 4, 20)),
                                periodic=(True, True, False))
        m = sim.add_material("m", density=1000.0, restitution=0.5, collision_time=1e-2,
                             friction=0.4)
        sim.add_plane((0, 0, 0), (0, 0, 1), m)
        sim.add_spheres(pos[order], rad[order], m, velocities=vel[order], uids=uid[order])
        seen = []
        sim.run(3000, callback=lambda s: seen.append(s.n_contacts), every=10)
        assert max(seen) > 2 * n               # several contacts per sphere at times
        finals.append(sim.state())
        slots.append(sim.st.uid[: sim.st.n_owned].copy())
    assert not np.array_equal(slots[0], slots[1]), "the two runs ended with the same slots"
    assert sim.nl.builds > 2
    for k in ("uid", "position", "velocity", "angular_velocity", "orientation"):
        assert np.array_equal(finals[0][k], finals[1][k]), k


def test_second_kick_reports_the_first_bad_body_as_the_state_check_does():
    """The second half kick checks the kicked state in the same pass; serial and threaded
    builds must name the same first bad body and cause as :func:`check_state`."""
    from parsim import integrator as I
    from parsim.bodies import FIXED

    n = 10_000
    rng = np.random.default_rng(3)
    lo, hi = np.zeros(3), np.full(3, 10.0)
    walled = np.array([True, True, False])

    def state():
        s = dict(flags=np.zeros(n, np.uint8), shape=np.full(n, SPHERE, np.int8),
                 inv_mass=np.ones(n), inertia=np.ones((n, 3)), inv_inertia=np.ones((n, 3)),
                 orientation=np.tile([1.0, 0, 0, 0], (n, 1)),
                 velocity=rng.uniform(-1, 1, (n, 3)), angular_velocity=rng.uniform(-1, 1, (n, 3)),
                 force=rng.uniform(-1, 1, (n, 3)), torque=rng.uniform(-1, 1, (n, 3)),
                 position=rng.uniform(1, 9, (n, 3)))
        s["shape"][::3] = BOX                       # the anisotropic branch too
        s["inertia"][::3] = [1.0, 2.0, 3.0]
        s["inv_inertia"][::3] = [1.0, 0.5, 1.0 / 3.0]
        return s

    cases = []
    s = state()
    cases.append((s, (-1, 0)))
    s = state()
    s["position"][7000, 0] = -0.5                  # outside on a walled axis
    s["force"][7500, 1] = np.inf                   # becomes a non-finite velocity
    s["position"][2000, 2] = 50.0                  # outside on the open axis: fine
    s["flags"][1000] = FIXED
    s["position"][1000, 0] = 20.0                  # a fixed body outside: not reported
    cases.append((s, (7000, 2)))
    s = state()
    s["torque"][4321, 2] = np.nan
    s["position"][4321, 0] = -3.0                  # both at one body: non-finite wins
    s["position"][9000, 1] = 11.0
    cases.append((s, (4321, 1)))
    for s, expect in cases:
        results = []
        for build in (0, 1):
            c = {k: v.copy() for k, v in s.items()}
            got = I.second_half[build](
                n, 1e-3, c["flags"], c["shape"], c["inv_mass"], c["inertia"], c["inv_inertia"],
                np.ascontiguousarray(c["inv_inertia"][:, 0]), c["orientation"], c["velocity"], c["angular_velocity"], c["force"], c["torque"],
                c["position"], lo, hi, walled)
            results.append(((int(got[0]), int(got[1])), c))
        (g0, c0), (g1, c1) = results
        assert g0 == g1 == expect
        ref = I.check_state(n, c0["flags"], c0["position"], c0["velocity"],
                            c0["angular_velocity"], lo, hi, walled)
        assert (int(ref[0]), int(ref[1])) == expect
        for k in ("velocity", "angular_velocity"):
            assert np.array_equal(c0[k], c1[k], equal_nan=True)


def _sphere_pile(order):
    sim, m, rng, g, pos = _box_with_floor(11, 10, shuffle=True)
    sim.add_spheres(pos, rng.uniform(0.2, 0.26, len(g)), m,
                    velocities=rng.uniform(-0.5, 0.5, (len(g), 3)))
    sim.add_sphere((1.5, 1.5, 0.3), 0.3, m, fixed=True)
    sim.pair_order = order
    return sim


def test_sums_in_the_pair_sweep_equal_the_canonical_sums():
    """With only sphere (and plane) pairs in key order, the serial pair kernel adds each
    contact to its bodies' sums in the sweep (``summed``) and writes no pair rows. Its sums
    must be the bits of :func:`accumulate` over the rows of the same pairs in slot order, which
    adds each body's contributions in the order of its partners' keys. Bodies are stored in
    space order and uids are shuffled, so slot order and key order differ; periodic images, a
    plane, a fixed sphere and rolling friction take part."""
    key, slot = _sphere_pile("key"), _sphere_pile("slot")
    checked = 0
    for step in range(600):
        key.step()
        slot.step()
        if step < 300 or step % 30:
            continue
        assert key.nl.key_order and not slot.nl.key_order
        assert key.nl.simple_idx.size == key.nl.n_pairs   # the summed path is taken
        assert (key.st.image[: key.st.n] != 13).any()      # periodic images are in the sums
        no = key.st.n_owned
        assert np.array_equal(key.st.uid[:no], slot.st.uid[:no])
        assert not np.array_equal(np.argsort(key.st.uid[:no]), np.arange(no))
        live = slot.nl.live.astype(bool)
        assert 0 < live.sum() < live.size
        assert np.all(key.nl.pout == 0.0)                   # no rows written
        f = np.full_like(slot.st.force, np.nan)
        t = np.full_like(slot.st.torque, np.nan)
        accumulate[0](no, slot.nl.ptr, slot.nl.entry, slot.nl.live, True,
                      slot.nl.touched.copy(), slot.nl.pout, slot.st.flags, slot.st.mass, slot.gravity, f, t, False, np.zeros(3),
                      slot.nl.pa, slot.nl.pb, np.empty((2, no), np.int64), np.full(1, -1))
        assert np.array_equal(f[:no], slot.st.force[:no])
        assert np.array_equal(key.st.force[:no], slot.st.force[:no])
        assert np.array_equal(key.st.torque[:no], slot.st.torque[:no])
        checked += 1
    assert checked == 10


def test_pair_order_changes_no_bit():
    """Key order (sums in the pair sweep) and slot order (sums by ``accumulate``), and the
    timed choice between them, give the same trajectory."""
    out = {}
    for order in ("key", "slot", "auto"):
        sim = _pile()
        sim.pair_order = order
        sim.run(400)
        s = sim.state()
        out[order] = s
        assert sim.nl.builds >= 3
    for order in ("slot", "auto"):
        for k in ("uid", "position", "velocity", "orientation", "angular_velocity"):
            assert np.array_equal(out["key"][k], out[order][k]), (order, k)


def test_the_measured_pair_order_is_reused_then_measured_again(monkeypatch):
    """``pair_order = "auto"`` measures the locality of key order (a sort by key) at one
    rebuild and reuses the choice for AUTO_REUSE more; a sort of the owned bodies in memory
    (``forget_order``, called by ``_sort_owned``) makes the next rebuild measure again."""
    import parsim.neighbours as nb

    at = []                            # the rebuilds (counted before each) that measured
    real = nb._key_order_is_local
    sim = _sphere_pile("auto")
    monkeypatch.setattr(nb, "_key_order_is_local", lambda s: at.append(sim.nl.builds) or real(s))
    sim.sort_interval = 10**9          # no sort after the first: only the reuse counts
    while sim.nl is None or sim.nl.builds < 2 * nb.AUTO_REUSE + 5:
        sim.step()
    k = nb.AUTO_REUSE + 1
    assert at == [0, k, 2 * k], at     # the first rebuild (which sorts), then every k-th
    sim.nl.forget_order()
    b = sim.nl.builds
    while sim.nl.builds == b:
        sim.step()
    assert at[-1] == b
    sim.sort_interval = 1              # a sort at the next rebuild forgets the choice too
    b = sim.nl.builds
    while sim.nl.builds == b:
        sim.step()
    assert at[-1] == b


def test_unknown_pair_order_is_refused():
    sim = _pile()
    sim.pair_order = "random"
    with pytest.raises(ValueError, match="pair_order must be 'auto', 'key' or 'slot'"):
        sim.run(1)


def _sparse_gas(seed=7):
    """Small spheres far apart (few of the candidates touch), fast, with friction and rolling
    friction: contacts open and close, springs are carried, spheres hit the floor plane."""
    sim, m, rng, g, pos = _box_with_floor(seed, 10, shuffle=True)
    sim.add_spheres(pos, rng.uniform(0.2, 0.24, len(g)), m,
                    velocities=rng.uniform(-4.0, 4.0, (len(g), 3)))
    return sim


@pytest.mark.parametrize("build, order", [(_sparse_gas, "slot"), (_sparse_gas, "key"),
                                          (_pile, "slot")])
def test_listing_the_pairs_in_play_first_changes_no_bit(build, order):
    """The force kernel run on the pairs in play only (a bare distance test lists them first)
    gives the trajectory of the kernel run on the whole list: the same bits, for sphere-only
    lists in slot and key order (sums in the sweep) and for a list that also holds boxes and
    capsules (the sphere pairs then are a selection of it)."""
    out, contacts = {}, {}
    for pre in (False, True, None):
        sim = build()
        sim.pair_order = order
        sim._prefilter = pre
        seen, lists = [], []
        sim.run(400, callback=lambda s: (seen.append(s.n_contacts), lists.append(s.nl.n_pairs)),
                every=1)
        out[pre], contacts[pre] = sim.state(), seen
        assert sim.nl.builds >= 2
    assert max(contacts[True]) > 0 and min(contacts[True]) < max(contacts[True])
    if build is _sparse_gas:  # few candidates touch: the automatic choice lists them every step
        assert all(8 * c < n for c, n in zip(contacts[None], lists))
    for pre in (True, None):
        assert contacts[pre] == contacts[False]
        for k in ("uid", "position", "velocity", "orientation", "angular_velocity"):
            assert np.array_equal(out[False][k], out[pre][k]), (pre, k)


@pytest.mark.parametrize("build, order", [(_sparse_gas, "slot"), (_sparse_gas, "key"),
                                          (_pile, "slot")])
def test_skipping_pairs_by_their_gap_changes_no_bit(build, order):
    """The listing of the pairs in play skips candidates whose gap at the reference poses is
    more than twice the largest displacement since then. Trajectories with and without the
    skip must be the same bits."""
    out = {}
    for gaps in (False, True):
        sim = build()
        sim.pair_order = order
        sim._prefilter = True
        sim._gaps = gaps
        sim.run(400)
        out[gaps] = sim.state()
        assert sim.nl.builds >= 2
    for k in ("uid", "position", "velocity", "orientation", "angular_velocity"):
        assert np.array_equal(out[False][k], out[True][k]), k


def test_pairs_skipped_by_their_gap_are_not_in_play():
    """At every step of a fast sparse gas, the listing with the gap bound (twice the largest
    displacement since the reference poses, plus the rounding hair) equals the listing without
    it, while it does skip pairs; and the build that asks for rows ahead (large ranks) lists
    the same pairs as the other."""
    from parsim.contacts import _in_play_far, _in_play_near

    sim = _sparse_gas(seed=9)
    sim._prefilter = True
    skipped = []

    def check(s):
        st, nl = s.st, s.nl
        no = st.n_owned
        d = np.sqrt(((st.position[:no] - st.ref_position[:no]) ** 2).sum(axis=1)).max()
        lim = 2.0 * d * (1.0 + 1e-9) + nl.hair
        n = nl.simple_idx.size
        got = []
        for bound in (lim, np.inf):
            for build in (_in_play_near, _in_play_far):
                sel = np.empty(n, np.int64)
                m = build(n, n == nl.n_pairs, nl.simple_idx, nl.pa, nl.pb, nl.hist, st.shape,
                          st.params, st.position, st.image, s.box, nl.live, nl.touching,
                          nl.gap, bound, sel)
                got.append(sel[:m].copy())
        assert all(np.array_equal(got[0], g) for g in got[1:]), s.step_count
        skipped.append(np.count_nonzero(nl.gap[nl.simple_idx] > lim))

    sim.run(600, callback=check, every=1)
    assert sim.nl.builds >= 3
    assert min(skipped) >= 0 and sum(skipped) > 0


def test_a_large_rank_lists_the_pairs_in_play_with_the_same_bits(monkeypatch):
    """The engine takes the listing, force kernel and sums that ask for rows ahead from FAR_ROWS
    stored bodies; with the threshold lowered so that this gas takes them, the run gives the
    bits of the others."""
    import parsim.contacts as C

    calls = {"_in_play_far": 0, "_pair_forces_far": 0, "_accumulate_far": 0}

    def counted(name):
        kernel = getattr(C, name)

        def f(*a):
            calls[name] += 1
            return kernel(*a)
        return f
    for name in list(calls):
        monkeypatch.setattr(C, name, counted(name))
    out = []
    for rows in (C.FAR_ROWS, 1):
        monkeypatch.setattr(C, "FAR_ROWS", rows)
        sim = _sparse_gas(seed=4)
        sim._prefilter = True
        sim.run(300)
        out.append((sim.state(), dict(calls)))
    assert set(out[0][1].values()) == {0}
    assert min(out[1][1].values()) >= 290
    for k in ("uid", "position", "velocity", "orientation", "angular_velocity"):
        assert np.array_equal(out[0][0][k], out[1][0][k]), k


def _periodic_gas(seed=5):
    """A sparse gas with no global body (so the sums may keep rows between steps): periodic on
    every axis, tilted gravity, fast spheres among a few fixed ones and some boxes."""
    rng = np.random.default_rng(seed)
    sim = parsim.Simulation(dt=2e-5, gravity=(0.4, -0.3, -9.81), domain=((0, 0, 0), (3, 3, 3)),
                            periodic=(True, True, True), skin=0.15)
    m = sim.add_material("m", density=1000.0, restitution=0.4, collision_time=1e-3, friction=0.5)
    g = np.stack(np.meshgrid(*[np.arange(6)] * 3, indexing="ij"), -1).reshape(-1, 3)
    g = g[rng.permutation(len(g))]
    pos = (g + 0.5) * 0.5 + rng.uniform(-0.02, 0.02, g.shape)
    sim.add_spheres(pos[:180], rng.uniform(0.2, 0.245, 180), m,
                    velocities=rng.uniform(-12.0, 12.0, (180, 3)))
    sim.add_spheres(pos[180:190], np.full(10, 0.2), m, fixed=True)
    sim.add_boxes(pos[190:], np.full((len(g) - 190, 3), 0.12), m,
                  velocities=rng.uniform(-2.0, 2.0, (len(g) - 190, 3)))
    return sim


def test_kept_gravity_rows_change_no_bit():
    """The sparse sums leave the rows of bodies with no pair force as they are when they
    already hold 0 + m g: the forces at every step, and the trajectory, are the bits of sums
    that write every row, also across a change of gravity between two runs."""
    forces, states, kept = {}, {}, []
    for keep in (False, True):
        sim = _periodic_gas()
        sim._keep_rows = keep
        seen = []

        def look(s):
            no = s.st.n_owned
            seen.append((s.st.force[:no].copy(), s.st.torque[:no].copy()))
            if keep and 8 * s.n_contacts < s.nl.n_pairs:    # the sparse sums ran
                kept.append(np.count_nonzero(s.nl.touched[:no] == 2) * (s.nl.n_listed[0] >= 0))
        sim.run(300, callback=look, every=1)
        sim.gravity[:] = (0.0, 0.2, -3.0)
        sim.run(300, callback=look, every=1)
        assert sim.nl.builds >= 3
        forces[keep], states[keep] = seen, sim.state()
    for (fa, ta), (fb, tb) in zip(forces[False], forces[True]):
        assert np.array_equal(fa.view(np.uint64), fb.view(np.uint64))
        assert np.array_equal(ta.view(np.uint64), tb.view(np.uint64))
    for k in ("uid", "position", "velocity", "orientation", "angular_velocity"):
        assert np.array_equal(states[False][k], states[True][k]), k
    assert len(kept) > 500 and max(kept) > 150   # most rows kept: the shortcut was exercised


def test_sort_interval_changes_no_bit():
    """Sorting the owned bodies in space at every rebuild (``sort_interval = 0``), every 1000
    steps, or only at the first build changes where bodies are stored, not the trajectory."""
    out, slots = {}, {}
    for interval in (0, 1000, 10**9):
        sim = _periodic_gas()
        sim.sort_interval = interval
        sim.run(4000)
        assert sim.nl.builds >= 10
        out[interval] = sim.state()
        slots[interval] = sim.st.uid[: sim.st.n_owned].copy()
    assert not np.array_equal(slots[0], slots[10**9]), "sorting moved no body"
    for interval in (1000, 10**9):
        for k in ("uid", "position", "velocity", "orientation", "angular_velocity"):
            assert np.array_equal(out[0][k], out[interval][k]), (interval, k)
