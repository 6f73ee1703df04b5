"""The counting-sort kernels of parsim.orders give the permutations of numpy's stable sorts."""

import numpy as np
import pytest

from parsim.orders import INSERTION_MAX, group_order, key_ranks, radix_argsort


@pytest.mark.parametrize("seed", range(40))
def test_group_order_is_lexsort(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(0, 2000))
    n_groups = int(rng.integers(1, 300))
    group = rng.integers(0, n_groups, m)
    if seed % 5 == 0:
        group[:] = 0            # one group far above INSERTION_MAX: the merge-sort branch
    # small ranges make ties in k1 and in (k1, k2): stability decides their order
    k1 = rng.integers(0, int(rng.choice([3, 50, 2**40])), m)
    k2 = rng.integers(0, int(rng.choice([2, 7, 2**62])), m)
    got = group_order(group, n_groups, k1, k2)
    assert np.array_equal(got, np.lexsort((k2, k1, group)))


def test_group_order_sizes_around_insertion_limit():
    rng = np.random.default_rng(7)
    for size in (0, 1, 2, INSERTION_MAX, INSERTION_MAX + 1, 5 * INSERTION_MAX):
        group = np.zeros(size, dtype=np.int64)
        k1 = rng.integers(0, 4, size)
        k2 = rng.integers(0, 4, size)
        assert np.array_equal(group_order(group, 1, k1, k2), np.lexsort((k2, k1, group)))


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
