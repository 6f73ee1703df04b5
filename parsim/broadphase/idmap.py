"""Open-addressing hash map from 64-bit ids to int32 slots, as numba kernels over flat arrays.

Every broad-phase structure maps the caller's body ids (arbitrary non-negative int64 uids, sparse
across a parallel run) to its own dense storage slots. A typed dict would work, but it is slow to
build and cannot be shared between kernels cheaply; this table is two numpy arrays with linear
probing and backward-shift deletion (no tombstones), so insert, lookup and delete are O(1) on
average and the table never degrades under add/remove churn.

Layout: ``keys`` int64[2**b] (``-1`` marks an empty bucket), ``vals`` int32[2**b]. The load factor
is kept at or below 1/2 by the Python owner (:class:`IdMap`), which doubles the table before an
insertion batch could exceed it.

*Direct mode* (an owner's choice, :class:`IdMap` ``direct=True``): while every id is below a few
times the number of entries (ids 0..n-1 in any order, the usual case of a broad phase used on
its own), ``keys`` is empty and ``vals[id]`` is the slot (``-1``: absent), as LAMMPS's
``atom_modify map array``: one access per operation in a table of 4 bytes per id instead of a
probe in 24 bytes per entry (at 1e6 bodies, 4 MB instead of 48 MB, so lookups stay in cache).
Every kernel takes both layouts (``keys.shape[0] == 0`` selects the direct one); the owner
switches to hashing, once and for good, when an id comes that is too large.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..unmanaged import unmanaged
from .prefetch import prefetch

EMPTY = -1
#: how many ids ahead :func:`map_lookup` asks for the bucket it will read
LOOKAHEAD = 32


@njit(cache=True, inline="always")
def _bucket(key, mask):
    # Fibonacci hashing: multiply by 2**64 / phi and keep high bits, so that structured ids
    # (strides, blocks of uids per rank) spread evenly over the table.
    h = np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64((h >> np.uint64(32)) ^ h) & mask


@njit(cache=True)
def map_lookup(keys, vals, ids, out):
    """Write the slot of each id into ``out`` (``-1`` where absent); return the index of the
    first absent id, or -1. Reads keys, vals.

    In hash mode the ids of a batch hit the table at random places, so the loop asks for the
    bucket of the id :data:`LOOKAHEAD` places on: 140,000 entries, caches flushed, 11 -> 5 ns
    per id; 1e6 entries 18-19 -> 9 ns; 10,000 in the caches 1.5 -> 1.7 ns. (The engine's
    rebuild looks up every stored body and both bodies of every candidate.) Not in direct
    mode: 0.3-0.4 ns per id dearer in the caches, 0.7 ns cheaper at 1e6 ids flushed."""
    miss = -1
    n = ids.shape[0]
    if keys.shape[0] == 0:
        d = vals.shape[0]
        for i in range(n):
            key = ids[i]
            out[i] = vals[key] if 0 <= key < d else -1
            if out[i] < 0 and miss < 0:
                miss = i
        return miss
    mask = keys.shape[0] - 1
    for i in range(n):
        if i + LOOKAHEAD < n:
            ahead = _bucket(ids[i + LOOKAHEAD], mask)
            prefetch(keys, ahead)
            prefetch(vals, ahead)
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
        if res < 0 and miss < 0:
            miss = i
    return miss


@njit(cache=True)
def id_extremes(ids):
    """(min, max) of a non-empty int64 array in one pass (a numba call costs ~0.25 us, each
    of numpy's ``min`` and ``max`` ~1 us: most of a small batch's fixed cost)."""
    lo = ids[0]
    hi = ids[0]
    for i in range(1, ids.shape[0]):
        v = ids[i]
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi


@njit(cache=True)
def map_insert(keys, vals, ids, slots):
    """Insert ``ids[i] -> slots[i]``; return the index of the first id already present, or -1.

    Stops at the first duplicate without inserting it (earlier ids of the batch stay inserted;
    the Python owner validates batches before calling, so this is a safety net).
    """
    if keys.shape[0] == 0:       # direct: the owner made room for every id
        for i in range(ids.shape[0]):
            if vals[ids[i]] >= 0:
                return i
            vals[ids[i]] = slots[i]
        return -1
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
    if keys.shape[0] == 0:       # direct: the owner made room for every id
        for i in range(ids.shape[0]):
            key = ids[i]
            if vals[key] >= 0:
                present = vals[key] < first
                for j in range(i):
                    vals[ids[j]] = EMPTY
                return i, present
            vals[key] = first + i
        return -1, False
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


# map_set and map_delete are inlined into their callers (numba IR): as calls, each cost about
# 6 ns per key, 12 times the store it does in direct mode (a swap-remove of every body of a
# store: 7.6 -> 1.9 ns per body at 1e4 bodies, 10.0 -> 2.3 at 1e6; 2026-11-29)
@njit(cache=True, inline="always")
def map_set(keys, vals, key, slot):
    """Overwrite the slot of a present key (used when swap-remove moves a body)."""
    if keys.shape[0] == 0:
        vals[key] = slot
        return
    mask = keys.shape[0] - 1
    b = _bucket(key, mask)
    while keys[b] != key:
        b = (b + 1) & mask
    vals[b] = slot


@njit(cache=True, inline="always")
def map_delete(keys, vals, key):
    """Delete a present key with backward-shift deletion (keeps probe chains tombstone-free)."""
    if keys.shape[0] == 0:
        vals[key] = EMPTY
        return
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
    keys = unmanaged(keys)          # no atomic reference counts per call (parsim.unmanaged)
    vals = unmanaged(vals)
    for i in range(ids.shape[0]):
        map_delete(keys, vals, ids[i])


class IdMap:
    """uid -> slot map owned by a broad-phase structure (Python wrapper over the kernels).

    ``direct=True``: start in direct mode (see the module docstring) and stay there while every
    id is below :meth:`_direct_limit`; the first id beyond it turns the map into a hash table
    for good. The engine's key map (sparse keys uid * 27 + image) uses hashing from the start."""

    def __init__(self, capacity: int = 64, direct: bool = False):
        self.count = 0
        self.direct = bool(direct)
        if self.direct:
            self.keys = np.empty(0, dtype=np.int64)
            self.vals = np.full(16, EMPTY, dtype=np.int32)
            return
        size = 16
        while size < 2 * capacity:
            size *= 2
        self.keys = np.full(size, EMPTY, dtype=np.int64)
        self.vals = np.zeros(size, dtype=np.int32)

    @property
    def nbytes(self) -> int:
        return self.keys.nbytes + self.vals.nbytes

    @staticmethod
    def _direct_limit(n_total: int) -> int:
        """Ids below this fit the direct table of a map of ``n_total`` entries (at most 16 bytes
        of table per entry, less than the hash table's 24)."""
        return 4 * n_total + 1024

    def reserve(self, n_total: int, max_id: int = -1) -> None:
        """Make room for ``n_total`` entries with ids up to ``max_id``: grow the direct table,
        switch to hashing if ``max_id`` is too large for it, or grow (rehash) the hash table so
        that the load factor stays <= 1/2."""
        if self.direct:
            if max_id < self.vals.shape[0]:
                return
            if max_id < self._direct_limit(n_total):
                size = self.vals.shape[0]
                while size <= max_id:
                    size *= 2
                vals = np.full(size, EMPTY, dtype=np.int32)
                vals[: self.vals.shape[0]] = self.vals
                self.vals = vals
                return
            # too sparse for a table: hash from now on
            ids = np.flatnonzero(self.vals >= 0).astype(np.int64)
            slots = self.vals[ids]
            self.direct = False
            self.keys = np.full(16, EMPTY, dtype=np.int64)
            self.vals = np.zeros(16, dtype=np.int32)
            self._rehash(max(n_total, ids.shape[0]), ids, slots)
            return
        if 2 * n_total <= self.keys.shape[0]:
            return
        live = self.keys != EMPTY
        self._rehash(n_total, self.keys[live], self.vals[live])

    def _rehash(self, n_total: int, ids: np.ndarray, slots: np.ndarray) -> None:
        size = max(self.keys.shape[0], 16)
        while 2 * n_total > size:
            size *= 2
        self.keys = np.full(size, EMPTY, dtype=np.int64)
        self.vals = np.zeros(size, dtype=np.int32)
        map_insert(self.keys, self.vals, ids, slots)

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        out = np.empty(ids.shape[0], dtype=np.int64)
        map_lookup(self.keys, self.vals, ids, out)
        return out

    def find(self, ids: np.ndarray) -> tuple[np.ndarray, int]:
        """:meth:`lookup` and the index of the first absent id (-1 if none)."""
        out = np.empty(ids.shape[0], dtype=np.int64)
        return out, int(map_lookup(self.keys, self.vals, ids, out))

    def claim(self, ids: np.ndarray, first: int) -> tuple[int, bool]:
        """Insert ``ids[i] -> first + i`` unless one is present or repeated (see map_claim)."""
        self.reserve(self.count + ids.shape[0], int(id_extremes(ids)[1]) if ids.shape[0] else -1)
        bad, present = map_claim(self.keys, self.vals, ids, first)
        if bad < 0:
            self.count += ids.shape[0]
        return int(bad), bool(present)

    def delete(self, ids: np.ndarray) -> None:
        """Delete present ids."""
        for_each_delete(self.keys, self.vals, ids)
        self.count -= ids.shape[0]

    def insert(self, ids: np.ndarray, slots: np.ndarray) -> None:
        self.reserve(self.count + ids.shape[0], int(id_extremes(ids)[1]) if ids.shape[0] else -1)
        bad = map_insert(self.keys, self.vals, ids, slots.astype(np.int32, copy=False))
        if bad >= 0:  # pragma: no cover - owners validate first
            raise ValueError(f"id {int(ids[bad])} is already present")
        self.count += ids.shape[0]
