"""Open-addressing hash map from 64-bit ids to int32 slots, as numba kernels over flat arrays.

Every broad-phase structure maps the caller's body ids (arbitrary non-negative int64 uids, sparse
across a parallel run) to its own dense storage slots. A typed dict would work, but it is slow to
build and cannot be shared between kernels cheaply; this table is two numpy arrays with linear
probing and backward-shift deletion (no tombstones), so insert, lookup and delete are O(1) on
average and the table never degrades under add/remove churn.

Layout: ``keys`` int64[2**b] (``-1`` marks an empty bucket), ``vals`` int32[2**b]. The load factor
is kept at or below 1/2 by the Python owner (:class:`IdMap`), which doubles the table before an
insertion batch could exceed it.
"""

from __future__ import annotations

import numpy as np
from numba import njit

EMPTY = -1


@njit(cache=True, inline="always")
def _bucket(key, mask):
    # Fibonacci hashing: multiply by 2**64 / phi and keep high bits, so that structured ids
    # (strides, blocks of uids per rank) spread evenly over the table.
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64((h >> np.uint64(32)) ^ h) & mask


@njit(cache=True)
def map_lookup(keys, vals, ids, out):
    """Write the slot of each id into ``out`` (``-1`` where absent). Reads keys, vals."""
    mask = keys.shape[0] - 1
    for i in range(ids.shape[0]):
        key = ids[i]
        b = _bucket(key, mask)
        res = -1
        while True:
            k = keys[b]
            if k == key:
                res = vals[b]
                break
            if k == EMPTY:
                break
            b = (b + 1) & mask
        out[i] = res


@njit(cache=True)
def map_insert(keys, vals, ids, slots):
    """Insert ``ids[i] -> slots[i]``; return the index of the first id already present, or -1.

    Stops at the first duplicate without inserting it (earlier ids of the batch stay inserted;
    the Python owner validates batches before calling, so this is a safety net).
    """
    mask = keys.shape[0] - 1
    for i in range(ids.shape[0]):
        key = ids[i]
        b = _bucket(key, mask)
        while True:
            k = keys[b]
            if k == EMPTY:
                keys[b] = key
                vals[b] = slots[i]
                break
            if k == key:
                return i
            b = (b + 1) & mask
    return -1


@njit(cache=True)
def map_claim(keys, vals, ids, first):
    """Insert ``ids[i] -> first + i`` as one all-or-nothing batch.

    Returns ``(-1, False)`` when every id was new. Otherwise ``(i, present)`` for the first id
    met again -- ``present`` when it was in the map before this batch, else it repeats an
    earlier id of the batch -- after deleting what the batch had inserted. One probe per id
    replaces the sort (uniqueness) plus lookup (absence) plus insert it stands for.
    """
    mask = keys.shape[0] - 1
    for i in range(ids.shape[0]):
        key = ids[i]
        b = _bucket(key, mask)
        while True:
            k = keys[b]
            if k == EMPTY:
                keys[b] = key
                vals[b] = first + i
                break
            if k == key:
                present = vals[b] < first
                for j in range(i):
                    map_delete(keys, vals, ids[j])
                return i, present
            b = (b + 1) & mask
    return -1, False


@njit(cache=True)
def map_set(keys, vals, key, slot):
    """Overwrite the slot of a present key (used when swap-remove moves a body)."""
    mask = keys.shape[0] - 1
    b = _bucket(key, mask)
    while keys[b] != key:
        b = (b + 1) & mask
    vals[b] = slot


@njit(cache=True)
def map_delete(keys, vals, key):
    """Delete a present key with backward-shift deletion (keeps probe chains tombstone-free)."""
    mask = keys.shape[0] - 1
    b = _bucket(key, mask)
    while keys[b] != key:
        b = (b + 1) & mask
    hole = b
    j = (hole + 1) & mask
    while keys[j] != EMPTY:
        home = _bucket(keys[j], mask)
        # Move entry j into the hole if its home bucket is not cyclically in (hole, j].
        if ((j - home) & mask) >= ((j - hole) & mask):
            keys[hole] = keys[j]
            vals[hole] = vals[j]
            hole = j
        j = (j + 1) & mask
    keys[hole] = EMPTY


@njit(cache=True)
def for_each_delete(keys, vals, ids):
    for i in range(ids.shape[0]):
        map_delete(keys, vals, ids[i])


class IdMap:
    """uid -> slot map owned by a broad-phase structure (Python wrapper over the kernels)."""

    def __init__(self, capacity: int = 64):
        size = 16
        while size < 2 * capacity:
            size *= 2
        self.keys = np.full(size, EMPTY, dtype=np.int64)
        self.vals = np.zeros(size, dtype=np.int32)
        self.count = 0

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.vals.nbytes

    def reserve(self, n_total: int) -> None:
        """Grow (rehash) so that ``n_total`` entries keep the load factor <= 1/2."""
        if 2 * n_total <= self.keys.shape[0]:
            return
        size = self.keys.shape[0]
        while 2 * n_total > size:
            size *= 2
        live = self.keys != EMPTY
        old_keys, old_vals = self.keys[live], self.vals[live]
        self.keys = np.full(size, EMPTY, dtype=np.int64)
        self.vals = np.zeros(size, dtype=np.int32)
        map_insert(self.keys, self.vals, old_keys, old_vals)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        out = np.empty(ids.shape[0], dtype=np.int64)
        map_lookup(self.keys, self.vals, ids, out)
        return out

    def claim(self, ids: np.ndarray, first: int) -> tuple[int, bool]:
        """Insert ``ids[i] -> first + i`` unless one is present or repeated (see map_claim)."""
        self.reserve(self.count + ids.shape[0])
        bad, present = map_claim(self.keys, self.vals, ids, first)
        if bad < 0:
            self.count += ids.shape[0]
        return int(bad), bool(present)

    def delete(self, ids: np.ndarray) -> None:
        """Delete present ids."""
        for_each_delete(self.keys, self.vals, ids)
        self.count -= ids.shape[0]

    def insert(self, ids: np.ndarray, slots: np.ndarray) -> None:
        self.reserve(self.count + ids.shape[0])
        bad = map_insert(self.keys, self.vals, ids, slots.astype(np.int32, copy=False))
        if bad >= 0:  # pragma: no cover - owners validate first
            raise ValueError(f"id {int(ids[bad])} is already present")
        self.count += ids.shape[0]
