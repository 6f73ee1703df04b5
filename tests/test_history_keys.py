"""``parsim.neighbours.history_keys``: the contact identity (uid A, uid B, relative unwrapped
image), computed by a kernel, equals its definition in numpy expressions."""

from __future__ import annotations

import types

import numpy as np

from parsim.neighbours import history_keys


def _reference(st, pa, pb):
    ia = st.image[pa].astype(np.int64)
    ib = st.image[pb].astype(np.int64)
    rel = np.empty((pa.size, 3), dtype=np.int64)
    rel[:, 0] = ib % 3 - ia % 3
    rel[:, 1] = (ib // 3) % 3 - (ia // 3) % 3
    rel[:, 2] = ib // 9 - ia // 9
    rel += st.wraps[pb].astype(np.int64) - st.wraps[pa].astype(np.int64)
    off = 1 << 20
    packed = ((rel[:, 0] + off) << 42) | ((rel[:, 1] + off) << 21) | (rel[:, 2] + off)
    return st.uid[pa], st.uid[pb], packed


def test_history_keys_equal_their_definition():
    rng = np.random.default_rng(3)
    n, m = 500, 4000
    st = types.SimpleNamespace(
        uid=rng.choice(np.int64(1) << 40, n, replace=False).astype(np.int64),
        image=rng.integers(0, 27, n).astype(np.int8),
        wraps=rng.integers(-(2**19), 2**19, (n, 3)).astype(np.int32))
    st.wraps[:50] = rng.integers(-3, 4, (50, 3))       # small wraps, as in a run
    pa = rng.integers(0, n, m)
    pb = rng.integers(0, n, m)
    got = history_keys(st, pa, pb)
    want = _reference(st, pa, pb)
    for g, w in zip(got, want):
        assert g.dtype == np.int64 and np.array_equal(g, w)
    # not a degenerate case: the random wraps give mostly distinct packed keys
    assert np.unique(got[2]).size > m // 2
