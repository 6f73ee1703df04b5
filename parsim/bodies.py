"""Struct-of-arrays body storage: owned bodies first, shadow copies after, one uid -> slot map.

Every body has a global 64-bit ``uid``. A rank stores the bodies it owns in slots
``0 .. n_owned-1`` and shadow copies (of bodies owned elsewhere, or periodic images of its own) in
slots ``n_owned .. n-1``. A stored copy is identified by its *key* ``uid * 27 + image``, where
``image`` encodes the periodic shift of the copy (:func:`image_code`; 13 = no shift), so a rank can
hold a body and its periodic images at once. The key -> slot map is an open-addressing hash table
(:class:`parsim.broadphase.idmap.IdMap`); removal swaps the last body of the same range into the
hole, so adding and removing are O(1) per body.

Shadows are rebuilt as a whole (:meth:`BodyStorage.clear_shadows`, :meth:`append_shadows`) when the
neighbour lists are rebuilt, and owned bodies are only added or removed while there are no
shadows, which keeps the owned range contiguous without moving shadows around.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .broadphase.idmap import IdMap, map_set
from .unmanaged import unmanaged

#: flag bits
FIXED = np.uint8(1)      #: takes part in contacts but never moves
INFINITE = np.uint8(2)   #: unbounded (planes); not in the hash grid
SHADOW = np.uint8(4)     #: a copy of a body owned elsewhere (or a periodic image)
GLOBAL = np.uint8(8)     #: finite but kept by every rank (too large for the blocks)
REPLICATED = np.uint8(INFINITE | GLOBAL)   #: kept by every rank: planes and global bodies

NO_SHIFT = 13            #: image code of an unshifted copy
MAX_UID = (2**63 - 1) // 27 - 1

#: name -> (dtype, trailing shape). Order is the order of the HDF5 checkpoint fields.
FIELDS = {
    "uid": (np.int64, ()),
    "image": (np.int8, ()),
    "shape": (np.int8, ()),
    "flags": (np.uint8, ()),
    "material": (np.int32, ()),
    "params": (np.float64, (3,)),
    "mass": (np.float64, ()),
    "inv_mass": (np.float64, ()),
    "inertia": (np.float64, (3,)),
    "inv_inertia": (np.float64, (3,)),
    "bounding_radius": (np.float64, ()),
    "position": (np.float64, (3,)),
    "orientation": (np.float64, (4,)),
    "velocity": (np.float64, (3,)),
    "angular_velocity": (np.float64, (3,)),
    "force": (np.float64, (3,)),
    "torque": (np.float64, (3,)),
    # pose at the last neighbour-list build (decides when the next one is due)
    "ref_position": (np.float64, (3,)),
    "ref_orientation": (np.float64, (4,)),
    # periodic wraps so far (unwrapped position = position + wraps * box length), as LAMMPS's
    # image flags; they keep a contact's identity when one of its bodies is wrapped
    "wraps": (np.int32, (3,)),
}


def image_code(shift: np.ndarray) -> np.ndarray:
    """Code 0..26 of integer periodic shifts in {-1, 0, 1}^3 (int[n, 3]); 13 is no shift."""
    s = np.asarray(shift, dtype=np.int64) + 1
    return (s[..., 0] + 3 * s[..., 1] + 9 * s[..., 2]).astype(np.int8)


def keys_of(uid: np.ndarray, image: np.ndarray) -> np.ndarray:
    return uid.astype(np.int64) * 27 + image.astype(np.int64)


class BodyStorage:
    """Owned bodies and shadow copies of one rank, as numpy arrays indexed by slot."""

    def __init__(self, capacity: int = 256):
        self.capacity = max(int(capacity), 16)
        for name, (dtype, shape) in FIELDS.items():
            setattr(self, name, np.zeros((self.capacity,) + shape, dtype=dtype))
        self.key = np.zeros(self.capacity, dtype=np.int64)
        self.map = IdMap(self.capacity)
        self.n_owned = 0
        self.n_shadow = 0

    @property
    def n(self) -> int:
        return self.n_owned + self.n_shadow

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, f).nbytes for f in FIELDS) + self.key.nbytes + self.map.nbytes

    def reserve(self, n_total: int) -> None:
        if n_total <= self.capacity:
            return
        cap = self.capacity
        while cap < n_total:
            cap *= 2
        n = self.n
        for name in (*FIELDS, "key"):
            old = getattr(self, name)
            new = np.zeros((cap,) + old.shape[1:], dtype=old.dtype)
            new[:n] = old[:n]
            setattr(self, name, new)
        self.capacity = cap

    # ---- lookup -----------------------------------------------------------------------------
    def slots_of_keys(self, keys: np.ndarray) -> np.ndarray:
        """Slot of each key (-1 where absent)."""
        return self.map.lookup(np.ascontiguousarray(keys, dtype=np.int64))

    def slots_of_uids(self, uids) -> np.ndarray:
        """Slot of the unshifted copy (owned, or an unshifted shadow) of each uid; -1 if absent."""
        u = np.ascontiguousarray(uids, dtype=np.int64)
        return self.slots_of_keys(u * 27 + NO_SHIFT)

    # ---- owned bodies ------------------------------------------------------------------------
    def append_owned(self, values: dict) -> np.ndarray:
        """Append owned bodies (requires no shadows). ``values`` maps field names to arrays of
        length k (missing fields are zero); returns the new slots."""
        if self.n_shadow:
            raise RuntimeError("clear the shadow copies before adding owned bodies")
        k = len(values["uid"])
        self.reserve(self.n_owned + k)
        sl = slice(self.n_owned, self.n_owned + k)
        for name, arr in values.items():
            getattr(self, name)[sl] = arr
        self.image[sl] = NO_SHIFT
        self.key[sl] = keys_of(self.uid[sl], self.image[sl])
        slots = np.arange(sl.start, sl.stop, dtype=np.int64)
        self.map.insert(self.key[sl], slots)
        self.n_owned += k
        return slots

    def remove_owned(self, slots: np.ndarray) -> None:
        """Remove owned bodies (requires no shadows); O(1) per body: the owned bodies from the
        end of the range fill the holes."""
        if self.n_shadow:
            raise RuntimeError("clear the shadow copies before removing owned bodies")
        slots = np.unique(np.asarray(slots, dtype=np.int64))
        if slots.size == 0:
            return
        n, k = self.n_owned, slots.size
        self.map.delete(self.key[slots])
        holes = slots[slots < n - k]
        tail = np.ones(k, dtype=bool)
        tail[slots[slots >= n - k] - (n - k)] = False
        movers = np.arange(n - k, n)[tail]
        for name in (*FIELDS, "key"):
            arr = getattr(self, name)
            arr[holes] = arr[movers]
        _set_slots(self.map.keys, self.map.vals, self.key[holes], holes)
        self.n_owned = n - k

    def permute_owned(self, order: np.ndarray) -> None:
        """Reorder the owned bodies (requires no shadows): slot i receives the body that was in
        slot ``order[i]`` (a permutation of 0..n_owned-1). Results do not depend on slots, so
        this only changes memory locality."""
        if self.n_shadow:
            raise RuntimeError("clear the shadow copies before reordering owned bodies")
        n = self.n_owned
        order = np.asarray(order, dtype=np.int64)
        if order.shape != (n,):
            raise ValueError(f"order must hold {n} slots, got shape {order.shape}")
        for name in (*FIELDS, "key"):
            arr = getattr(self, name)
            if arr.ndim == 2:
                tmp = np.empty((n, arr.shape[1]), dtype=arr.dtype)
                _take_rows(arr, order, tmp)
                arr[:n] = tmp
            else:
                arr[:n] = arr[order]
        _set_slots(self.map.keys, self.map.vals, self.key[:n], np.arange(n, dtype=np.int64))

    # ---- shadows -----------------------------------------------------------------------------
    def clear_shadows(self) -> None:
        if self.n_shadow:
            keys = self.key[self.n_owned : self.n]
            self.map.delete(keys)
            self.n_shadow = 0

    def append_shadows(self, src_slots: np.ndarray, image: np.ndarray) -> None:
        """Append shadow copies of local bodies ``src_slots`` with image codes ``image`` (the
        serial periodic images). Positions are stored unshifted: a copy's place in space is its
        position plus the shift of its image code."""
        k = src_slots.shape[0]
        if k == 0:
            return
        start = self.n
        self.reserve(start + k)
        sl = slice(start, start + k)
        src = np.ascontiguousarray(src_slots, dtype=np.int64)
        for name in FIELDS:
            arr = getattr(self, name)
            if arr.ndim == 2:
                _take_rows(arr, src, arr[sl])      # sources are rows below ``start``
            else:
                arr[sl] = arr[src]
        self.image[sl] = image
        self.flags[sl] |= SHADOW
        self.key[sl] = keys_of(self.uid[sl], self.image[sl])
        self.map.insert(self.key[sl], np.arange(start, start + k, dtype=np.int64))
        self.n_shadow += k

    def append_shadow_records(self, rec: np.ndarray) -> None:
        """Append shadow copies received from another rank (records of
        :data:`parsim.halo.BODY`, image codes already shifted by the sender)."""
        k = rec.shape[0]
        if k == 0:
            return
        start = self.n
        self.reserve(start + k)
        sl = slice(start, start + k)
        for name in FIELDS:
            getattr(self, name)[sl] = rec[name]
        self.flags[sl] |= SHADOW
        self.key[sl] = keys_of(self.uid[sl], self.image[sl])
        self.map.insert(self.key[sl], np.arange(start, start + k, dtype=np.int64))
        self.n_shadow += k


@njit(cache=True)
def _take_rows(a, src, out):
    """``out[i] = a[src[i]]`` for the rows of a 2-d array: numpy's fancy indexing of (n, 3)
    rows took 3-6x this loop (8,000 rows: 150 us against 25-55 us), and a sort or a halo build
    moves twelve such fields."""
    w = a.shape[1]
    for i in range(src.shape[0]):
        s = src[i]
        for c in range(w):
            out[i, c] = a[s, c]


@njit(cache=True)
def _set_slots(keys, vals, present, slots):
    keys = unmanaged(keys)
    vals = unmanaged(vals)
    for i in range(present.shape[0]):
        map_set(keys, vals, present[i], slots[i])
