"""The id -> slot map of every broad-phase structure, in both layouts, against a dict.

Direct mode (a table indexed by id) is used while the ids are dense; the first id that is too
large turns the map into a hash table, which must keep every entry.
"""

from __future__ import annotations

import numpy as np
import pytest

from parsim.broadphase.idmap import IdMap


def _check(m: IdMap, ref: dict, probe: np.ndarray) -> None:
    got = m.lookup(probe)
    want = np.array([ref.get(int(i), -1) for i in probe], dtype=np.int64)
    np.testing.assert_array_equal(got, want)
    assert m.count == len(ref)
    # find: the same slots and the index of the first absent id
    slots, miss = m.find(probe)
    np.testing.assert_array_equal(slots, want)
    absent = np.flatnonzero(want < 0)
    assert miss == (int(absent[0]) if absent.size else -1)
    if ref:
        present = np.array(list(ref), dtype=np.int64)
        slots, miss = m.find(present)
        assert miss == -1 and slots.tolist() == [ref[int(i)] for i in present]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "hash"])
@pytest.mark.parametrize("seed", range(3))
def test_claim_delete_insert_lookup_match_a_dict(direct, seed):
    rng = np.random.default_rng(seed)
    m = IdMap(16, direct=direct)
    ref: dict[int, int] = {}
    free = list(rng.permutation(1000))   # below the direct table's floor of 1,024 ids
    for step in range(60):
        op = rng.integers(0, 3)
        if op == 0 and free:                       # claim a batch of new ids
            k = int(rng.integers(1, 80))
            ids = np.array(free[:k], dtype=np.int64)
            del free[:k]
            first = int(rng.integers(0, 10**6))
            bad, _ = m.claim(ids, first)
            assert bad == -1
            ref.update({int(i): first + j for j, i in enumerate(ids)})
        elif op == 1 and ref:                      # delete some present ids
            keys = np.array(list(ref), dtype=np.int64)
            ids = rng.choice(keys, size=min(keys.size, int(rng.integers(1, 60))), replace=False)
            m.delete(ids)
            for i in ids:
                del ref[int(i)]
            free += [int(i) for i in ids]
        elif free:                                 # insert with explicit slots
            k = int(rng.integers(1, 40))
            ids = np.array(free[:k], dtype=np.int64)
            del free[:k]
            slots = rng.integers(0, 10**6, k)
            m.insert(ids, slots)
            ref.update({int(i): int(s) for i, s in zip(ids, slots)})
        _check(m, ref, rng.integers(0, 1200, 400))   # ids >= 0: validated by the owners
    assert m.direct == direct                     # dense ids never leave the direct table


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "hash"])
def test_claim_refuses_present_and_repeated_ids_and_gives_the_batch_back(direct):
    m = IdMap(16, direct=direct)
    assert m.claim(np.arange(10, dtype=np.int64), 0) == (-1, False)
    bad, present = m.claim(np.array([20, 21, 5, 22], dtype=np.int64), 10)
    assert (bad, present) == (2, True)
    bad, present = m.claim(np.array([30, 31, 30], dtype=np.int64), 10)
    assert (bad, present) == (2, False)
    _check(m, {i: i for i in range(10)}, np.arange(0, 40))


def test_a_sparse_id_switches_to_hashing_and_keeps_every_entry():
    m = IdMap(16, direct=True)
    ids = np.random.default_rng(7).permutation(100_000).astype(np.int64)
    m.claim(ids, 0)
    assert m.direct and m.nbytes == 4 * 2**17     # 4 bytes per id: 131,072 entries
    ref = {int(i): k for k, i in enumerate(ids)}
    big = np.array([10**15, 3 * 10**12], dtype=np.int64)
    m.claim(big, 100_000)
    ref.update({10**15: 100_000, 3 * 10**12: 100_001})
    assert not m.direct
    _check(m, ref, np.concatenate([ids[:5000], big, np.array([5 * 10**14, 100_000])]))
    m.delete(ids[:50_000])
    for i in ids[:50_000]:
        del ref[int(i)]
    _check(m, ref, ids[::7])


def test_few_entries_with_large_ids_start_hashing():
    """The direct table holds at most 4 ids per entry (plus 1,024): 10 ids up to 10**6 are
    hashed."""
    m = IdMap(16, direct=True)
    ids = np.arange(10, dtype=np.int64) * 100_000
    m.claim(ids, 0)
    assert not m.direct
    _check(m, {int(i): k for k, i in enumerate(ids)}, np.arange(0, 10**6, 50_000))
