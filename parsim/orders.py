"""Canonical orders of the neighbour list by counting sorts, as numba kernels.

A rebuild orders its pairs several times: by key (or by slot) for the pair sweep, by history
key to carry the springs over, and by (body, partner key) for the per-body sums. With
``np.lexsort`` these were a quarter of a rebuild of the 8,000-sphere gas (2.2 of 9 ms). Each is
here a counting sort by a small integer group (a slot, or the rank of a key among the stored
copies) followed by an insertion sort of each group's few items: O(items + groups), and the
same permutation as the stable ``np.lexsort`` of the same keys (tested).
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: bits per digit of :func:`radix_argsort`
DIGIT = 11
#: groups longer than this are ordered by two stable merge sorts instead of insertion
INSERTION_MAX = 32


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


@njit(cache=True, inline="always")
def _before(k1a, k2a, k1b, k2b):
    """(k1a, k2a) < (k1b, k2b). Scalars, not the key arrays and two indices: a helper taking
    arrays costs two atomic reference-count updates per array and call (on 2026-11-28 the
    most frequent ones of a demo run)."""
    return k1a < k1b or (k1a == k1b and k2a < k2b)


@njit(cache=True)
def group_order(group, n_groups, k1, k2):
    """Stable order of items by (``group``, ``k1``, ``k2``): the permutation of
    ``np.lexsort((k2, k1, group))``. ``group`` in ``0..n_groups-1``."""
    m = group.shape[0]
    start = np.zeros(n_groups + 1, dtype=np.int64)
    for i in range(m):
        start[group[i] + 1] += 1
    for g in range(n_groups):
        start[g + 1] += start[g]
    fill = start[:-1].copy()
    out = np.empty(m, dtype=np.int64)
    for i in range(m):
        g = group[i]
        out[fill[g]] = i
        fill[g] += 1
    for g in range(n_groups):
        a = start[g]
        b = start[g + 1]
        if b - a <= 1:
            continue
        if b - a <= INSERTION_MAX:
            for i in range(a + 1, b):
                x = out[i]
                kx1 = k1[x]
                kx2 = k2[x]
                j = i - 1
                while j >= a and _before(kx1, kx2, k1[out[j]], k2[out[j]]):
                    out[j + 1] = out[j]
                    j -= 1
                out[j + 1] = x
        else:
            seg = out[a:b].copy()
            o2 = np.argsort(k2[seg], kind="mergesort")
            seg = seg[o2]
            o1 = np.argsort(k1[seg], kind="mergesort")
            out[a:b] = seg[o1]
    return out
