"""Canonical orders of the neighbour list by counting sorts, as numba kernels.

A rebuild orders its pairs several times: by key (or by slot) for the pair sweep, by history
key to carry the springs over, and by (body, partner key) for the per-body sums. With
``np.lexsort`` these were a quarter of a rebuild of the 8,000-sphere gas (2.2 of 9 ms). Each is
here two stable counting sorts by small integers (a slot, or the rank of a key among the
stored copies, :func:`key_ranks`): O(items + groups + ranks), and the same permutation as
the stable ``np.lexsort`` of the same keys (tested).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: bits per digit of :func:`radix_argsort`
DIGIT = 11


@njit(cache=True)
def radix_argsort(keys):
    """Stable argsort of non-negative int64 ``keys``: LSD radix sort, 11-bit digits, as many
    passes as the largest key needs (two for keys below 2**22)."""
    n = keys.shape[0]
    src = np.arange(n)
    if n < 2:
        return src
    kmax = keys.max()
    dst = np.empty(n, dtype=np.int64)
    mask = (np.int64(1) << DIGIT) - 1
    cnt = np.empty(mask + 1, dtype=np.int64)
    shift = 0
    while (kmax >> shift) > 0:
        cnt[:] = 0
        for i in range(n):
            cnt[(keys[src[i]] >> shift) & mask] += 1
        total = 0
        for b in range(mask + 1):
            c = cnt[b]
            cnt[b] = total
            total += c
        for i in range(n):
            s = src[i]
            d = (keys[s] >> shift) & mask
            dst[cnt[d]] = s
            cnt[d] += 1
        src, dst = dst, src
        shift += DIGIT
    return src


@njit(cache=True)
def key_ranks(keys):
    """(rank, uid rank) of every copy: the position of its key among all keys, and the dense
    rank of its uid (``key // 27``; the images of one body share it). Keys are distinct."""
    n = keys.shape[0]
    order = radix_argsort(keys)
    rank = np.empty(n, dtype=np.int64)
    urank = np.empty(n, dtype=np.int64)
    u = -1
    prev = np.int64(-1)
    for i in range(n):
        s = order[i]
        rank[s] = i
        uid = keys[s] // 27
        if uid != prev:
            u += 1
            prev = uid
        urank[s] = u
    return rank, urank


@njit(cache=True)
def rank_order(group, n_groups, r, n_r, tie):
    """Stable order of items by (``group``, ``r``, ``tie``): the permutation of
    ``np.lexsort((tie, r, group))``, for ``group`` in ``0..n_groups-1`` and ``r`` in
    ``0..n_r-1`` (a rank: ordering items by it orders them by the key it ranks, e.g.
    ``key_ranks``' rank of a partner's key).

    Two stable counting sorts, by ``r`` and then by ``group``: O(items + groups + ranks), no
    comparisons (until 2026-11-28 a counting sort by group and an insertion sort of each group
    by comparisons, a mispredicted branch or two per item: the demo's neighbour phase is ~8 %
    faster without, same permutation). Items equal in (group, r) (repeated pairs; in the
    history order, the contacts of one pair of bodies through several images) are then
    ordered by ``tie`` by insertion, stably; the second sort sees them (an item placed after
    one of the same group and rank), so without them there is no such pass."""
    m = group.shape[0]
    cnt_r = np.zeros(n_r + 1, dtype=np.int64)
    cnt_g = np.zeros(n_groups + 1, dtype=np.int64)
    for i in range(m):
        cnt_r[r[i] + 1] += 1
        cnt_g[group[i] + 1] += 1
    for k in range(n_r):
        cnt_r[k + 1] += cnt_r[k]
    for g in range(n_groups):
        cnt_g[g + 1] += cnt_g[g]
    by_r = np.empty(m, dtype=np.int64)
    for i in range(m):
        k = r[i]
        by_r[cnt_r[k]] = i
        cnt_r[k] += 1
    out = np.empty(m, dtype=np.int64)
    last = np.full(n_groups, -1, dtype=np.int64)   # the rank of each group's last item placed
    ties = False
    for j in range(m):
        i = by_r[j]
        g = group[i]
        k = r[i]
        ties |= last[g] == k
        last[g] = k
        out[cnt_g[g]] = i
        cnt_g[g] += 1
    if not ties:
        return out
    # runs of equal (group, r): ordered by tie (stable insertion)
    a = 0
    while a < m:
        ga = group[out[a]]
        ra = r[out[a]]
        b = a + 1
        while b < m and group[out[b]] == ga and r[out[b]] == ra:
            b += 1
        for i in range(a + 1, b):
            x = out[i]
            t = tie[x]
            j = i - 1
            while j >= a and t < tie[out[j]]:
                out[j + 1] = out[j]
                j -= 1
            out[j + 1] = x
        a = b
    return out
