"""The counting-sort kernels of parsim.orders give the permutations of numpy's stable sorts."""

import numpy as np
import pytest

from parsim.orders import key_ranks, radix_argsort, rank_order


@pytest.mark.parametrize("bits", [1, 5, 11, 12, 22, 23, 40, 62])
def test_radix_argsort_is_stable_argsort(bits):
    rng = np.random.default_rng(bits)
    keys = rng.integers(0, 2**bits, 5000).astype(np.int64)   # with repeats
    assert np.array_equal(radix_argsort(keys), np.argsort(keys, kind="stable"))


def test_key_ranks():
    rng = np.random.default_rng(3)
    uids = rng.choice(10**12, size=3000, replace=False)
    keys = np.unique(np.concatenate([uids * 27 + 13, uids[:500] * 27 + rng.integers(0, 27, 500)]))
    rng.shuffle(keys)
    rank, urank = key_ranks(keys)
    assert np.array_equal(rank, np.argsort(np.argsort(keys)))
    assert np.array_equal(urank, np.unique(keys // 27, return_inverse=True)[1])


def test_exact_sum_is_the_correctly_rounded_sum_in_any_split():
    """Net.exact_sum equals math.fsum (the correctly rounded sum) for values of both signs over
    600 binades, in any order and any split into parts (as over ranks): what makes
    Simulation.kinetic_energy independent of the rank count."""
    import math

    from parsim.comm import Net, exact_partial_sums

    rng = np.random.default_rng(5)
    x = rng.standard_normal(20000) * 2.0 ** rng.integers(-300, 300, 20000)
    x[1::7] = -x[::7][: x[1::7].size]            # cancellations
    x[5] = 0.0
    net = Net(None)
    assert net.exact_sum(x) == math.fsum(x)
    assert net.exact_sum(rng.permutation(x)) == math.fsum(x)
    for cut in (1, 977, 15000):
        parts = exact_partial_sums(x[:cut]) + exact_partial_sums(x[cut:])
        low = min(e for e, _ in parts)
        total = sum(m << (e - low) for e, m in parts)
        assert total / (1 << -low) == math.fsum(x)
    small = rng.uniform(0.0, 1.0, 1000)
    assert net.exact_sum(small) == math.fsum(small) and net.exact_sum(np.zeros(3)) == 0.0
    with pytest.raises(ValueError, match="finite"):
        net.exact_sum(np.array([1.0, np.inf]))


@pytest.mark.parametrize("seed", range(40))
def test_rank_order_is_lexsort(seed):
    """rank_order's two counting sorts (and the tie pass) give np.lexsort's permutation, with
    repeated (group, r) items, empty groups and ranks, and one item or none."""
    rng = np.random.default_rng(100 + seed)
    m = int(rng.integers(0, 3000)) if seed > 1 else seed
    n_groups = int(rng.integers(1, 400))
    n_r = int(rng.integers(1, 400))
    group = rng.integers(0, n_groups, m)
    r = rng.integers(0, int(rng.choice([1, 3, n_r])), m)
    tie = rng.integers(0, int(rng.choice([1, 4, 2**62])), m)
    got = rank_order(group, n_groups, r, n_r, tie)
    assert np.array_equal(got, np.lexsort((tie, r, group)))


def test_rank_order_by_the_rank_of_a_key_is_the_order_by_the_key():
    """As the rebuild uses it: groups by slot, r the rank of the partner's key (key_ranks), so
    the order is that of the key itself (repeated pairs kept in their order)."""
    rng = np.random.default_rng(4)
    keys = rng.choice(10**15, size=2000, replace=False)
    rank, _ = key_ranks(keys)
    m = 20000
    a = rng.integers(0, 2000, m)
    b = rng.integers(0, 2000, m)
    want = np.lexsort((keys[b], a))
    assert np.array_equal(rank_order(a, 2000, rank[b], 2000, b), want)
