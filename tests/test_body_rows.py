"""The message rows of shadow creation and migration (``BodyStorage.pack_rows``) carry every
field of a body bit for bit, and the storage takes them back as owned bodies or as shadows
(and copies its own rows as periodic images) with the same bits and a consistent key map."""

from __future__ import annotations

import numpy as np

from parsim.bodies import FIELDS, IMAGE_WORD, NO_SHIFT, SHADOW, BodyStorage


def _bodies(n, seed):
    rng = np.random.default_rng(seed)
    vals = {}
    for name, (dtype, shape) in FIELDS.items():
        if np.dtype(dtype).kind == "f":
            vals[name] = rng.standard_normal((n,) + shape) * 1e3
        else:
            info = np.iinfo(dtype)
            vals[name] = rng.integers(info.min, info.max, (n,) + shape, dtype=dtype,
                                      endpoint=True)
    vals["uid"] = np.arange(n, dtype=np.int64) * 7 + 5
    vals["flags"] = rng.integers(0, 16, n).astype(np.uint8) & ~SHADOW
    vals["position"][5, 1] = np.nan
    vals["mass"][7] = -0.0
    vals["velocity"][9] = [np.inf, -np.inf, 5e-324]
    st = BodyStorage(16)
    st.append_owned(vals)
    return st


def _bits(a):
    return np.ascontiguousarray(a).tobytes()


def _map_consistent(st):
    return np.array_equal(st.slots_of_keys(st.key[: st.n]), np.arange(st.n))


def test_rows_carry_every_field_bit_for_bit():
    st = _bodies(300, seed=3)
    slots = np.random.default_rng(4).permutation(300)[:120]
    rows = st.pack_rows(slots)
    got = BodyStorage(16)                 # grows while taking them (capacity 16 -> 128)
    got.append_owned_rows(rows)
    assert got.n_owned == 120
    for name in FIELDS:
        want = getattr(st, name)[slots]
        if name == "image":
            want = np.full(120, NO_SHIFT, np.int8)        # owned bodies are unshifted
        assert _bits(getattr(got, name)[:120]) == _bits(want), name
    assert _map_consistent(got)
    assert np.array_equal(got.slots_of_uids(st.uid[slots]), np.arange(120))


def test_shadow_rows_and_local_images_keep_the_bits():
    st = _bodies(200, seed=5)
    slots = np.arange(0, 200, 3)
    k = slots.size
    before = {name: getattr(st, name)[slots].copy() for name in FIELDS}
    rows = st.pack_rows(slots)
    rows[:, IMAGE_WORD] = 4               # as a sender shifts them (image codes differ)
    st.append_shadow_rows(rows)
    st.append_shadows(slots, np.full(k, 22, np.int8))
    assert (st.n_owned, st.n_shadow) == (200, 2 * k)
    for first, image in ((200, 4), (200 + k, 22)):
        part = slice(first, first + k)
        for name in FIELDS:
            got = getattr(st, name)[part]
            if name == "image":
                assert (got == image).all()
            elif name == "flags":
                assert np.array_equal(got, before[name] | SHADOW)
            else:
                assert _bits(got) == _bits(before[name]), name
    assert _map_consistent(st)
