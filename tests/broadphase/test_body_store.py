"""The body store shared by every structure: swap-remove in any order, against a plain model.

The moves it reports are replayed on a per-slot array, as the structures do with theirs; the
replayed array must hold the store's ids afterwards. Descending batches (the order
``removal_order`` gives large ones) take a path without the id resolution of other orders.
"""

from __future__ import annotations

import numpy as np
import pytest

from parsim.broadphase.base import BodyStore, _same_ids


def _store(rng, n, sparse):
    st = BodyStore(8)
    ids = rng.choice(10**12 if sparse else 4 * n, size=n, replace=False).astype(np.int64)
    lo = rng.random((n, 3))
    st.claim(ids)
    st.append(ids, lo, lo + 1.0)
    return st


@pytest.mark.parametrize("order", ["random", "descending", "ascending", "removal_order"])
@pytest.mark.parametrize("sparse", [False, True], ids=["direct", "hashed"])
def test_swap_remove_matches_a_model_and_its_moves_replay(order, sparse):
    rng = np.random.default_rng(7)
    st = _store(rng, 3000, sparse)
    model = {int(i): st.lo[k].copy() for k, i in enumerate(st.ids[: st.n])}
    shadow = st.ids[: st.n].copy()          # a per-slot array kept up to date by the moves
    for m in (1, 5, 70, 400, 1000, 1524):
        slots = rng.choice(st.n, size=min(m, st.n), replace=False).astype(np.int64)
        if order == "descending":
            slots = np.sort(slots)[::-1].copy()
        elif order == "ascending":
            slots = np.sort(slots)
        elif order == "removal_order":
            slots = st.removal_order(slots)
        gone = st.ids[slots].copy()
        src, dst = st.swap_remove(slots)
        assert src.shape == dst.shape and (src >= 0).all() and (dst >= 0).all()
        for s, d in zip(src, dst):
            shadow[d] = shadow[s]
        shadow = shadow[: st.n]
        for i in gone:
            del model[int(i)]
        n = st.n
        assert n == len(model) == st.map.count
        np.testing.assert_array_equal(shadow, st.ids[:n])
        assert sorted(model) == sorted(st.ids[:n].tolist())
        np.testing.assert_array_equal(st.map.lookup(st.ids[:n]), np.arange(n))
        assert (st.map.lookup(gone) == -1).all()
        for k in rng.choice(n, size=min(n, 50), replace=False):
            np.testing.assert_array_equal(st.lo[k], model[int(st.ids[k])])
            np.testing.assert_array_equal(st.hi[k], model[int(st.ids[k])] + 1.0)
    assert st.n == 0


def test_removing_everything_from_the_top_moves_nothing():
    rng = np.random.default_rng(3)
    st = _store(rng, 500, False)
    src, dst = st.swap_remove(np.arange(499, -1, -1, dtype=np.int64))
    assert src.size == dst.size == 0 and st.n == 0 and st.map.count == 0


@pytest.mark.parametrize("n", [1, 4095, 4096, 4097, 10000])
def test_slots_of_in_stored_order_and_one_id_out_of_place(n):
    """``slots_of`` takes a shortcut when the ids are the stored ones in stored order (checked
    chunk by chunk, ``_same_ids``): it must answer 0..n-1 then, and the slots through the id map
    when one pair of ids anywhere is swapped (first, last, either side of a chunk border)."""
    rng = np.random.default_rng(n)
    st = _store(rng, n, sparse=True)
    ids = st.ids[:n].copy()
    assert _same_ids(ids, st.ids) and (st.slots_of(ids) == np.arange(n)).all()
    for i in sorted({0, n - 1, 4095 % n, 4096 % n, n // 2}):
        j = (i + 1) % n
        if j == i:
            continue
        other = ids.copy()
        other[i], other[j] = other[j], other[i]
        assert not _same_ids(other, st.ids)
        want = np.arange(n)
        want[i], want[j] = want[j], want[i]
        assert (st.slots_of(other) == want).all()
    assert _same_ids(ids[: n // 2], st.ids)  # a prefix of the store in order is the same too
