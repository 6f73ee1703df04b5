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


#: the integer fields narrower than 8 bytes; every other field is made of 8-byte values
NARROW = ("image", "shape", "flags", "material", "wraps")
#: the 8-byte fields (float64, and the int64 uid), in :data:`FIELDS` order
WORD_FIELDS = tuple(name for name in FIELDS if name not in NARROW)
assert all(np.dtype(FIELDS[n][0]).itemsize == 8 for n in WORD_FIELDS)
#: int64 words per body of :meth:`BodyStorage.pack_rows`: the 8-byte fields' bits, then image,
#: shape, flags, material and the three wraps, one word each
ROW_WORDS = sum(int(np.prod(FIELDS[n][1], dtype=np.int64)) for n in WORD_FIELDS) + 7
#: column of the image code in those rows
IMAGE_WORD = ROW_WORDS - 7


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

    def _words(self) -> tuple:
        """The 8-byte fields as int64 (capacity, width) views, for the row kernels (made per
        call: ``reserve`` replaces the arrays)."""
        cap = self.capacity
        return tuple(getattr(self, n).reshape(cap, -1).view(np.int64) for n in WORD_FIELDS)

    def pack_rows(self, slots: np.ndarray) -> np.ndarray:
        """Every field of slots ``slots`` as int64[k, :data:`ROW_WORDS`] (bit copies; the
        message format of shadow creation and migration). One kernel call: a structured record
        per body cost 3-4x as much (20 numpy field copies per message)."""
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        out = np.empty((slots.shape[0], ROW_WORDS), dtype=np.int64)
        if slots.shape[0] == 0:          # (most migrations: the views alone cost 6 us)
            return out
        _pack_rows(self._words(), self.image, self.shape, self.flags, self.material, self.wraps,
                   slots, out)
        return out

    def _index(self, sl: slice) -> np.ndarray:
        """Give slots ``sl`` (fields written) their keys in the key -> slot map; returns them."""
        self.key[sl] = keys_of(self.uid[sl], self.image[sl])
        slots = np.arange(sl.start, sl.stop, dtype=np.int64)
        self.map.insert(self.key[sl], slots)
        return slots

    def _put_rows(self, rows: np.ndarray) -> slice:
        """Write rows of :meth:`pack_rows` to the slots after the last one; returns them."""
        k = rows.shape[0]
        start = self.n
        self.reserve(start + k)
        _unpack_rows(np.ascontiguousarray(rows, dtype=np.int64), self._words(), self.image,
                     self.shape, self.flags, self.material, self.wraps, start)
        return slice(start, start + k)

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
        slots = self._index(sl)
        self.n_owned += k
        return slots

    def append_owned_rows(self, rows: np.ndarray) -> None:
        """Append owned bodies given as rows of :meth:`pack_rows` (migrants; requires no
        shadows)."""
        if self.n_shadow:
            raise RuntimeError("clear the shadow copies before adding owned bodies")
        if rows.shape[0] == 0:
            return
        sl = self._put_rows(rows)
        self.image[sl] = NO_SHIFT
        self._index(sl)
        self.n_owned += sl.stop - sl.start

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
        # one kernel over the rows (sources are below ``start``): packing them into rows and
        # putting those back took twice as long (2,600 images: 0.23 against 0.11 ms)
        _copy_body_rows(self._words(), self.image, self.shape, self.flags, self.material,
                        self.wraps, np.ascontiguousarray(src_slots, dtype=np.int64), start)
        self.image[sl] = image
        self.flags[sl] |= SHADOW
        self._index(sl)
        self.n_shadow += k

    def append_shadow_rows(self, rows: np.ndarray) -> None:
        """Append shadow copies received from another rank (rows of :meth:`pack_rows`, image
        codes already shifted by the sender)."""
        if rows.shape[0] == 0:
            return
        sl = self._put_rows(rows)
        self.flags[sl] |= SHADOW
        self._index(sl)
        self.n_shadow += sl.stop - sl.start


@njit(cache=True)
def _pack_rows(words, image, shape, flags, material, wraps, slots, out):
    """Row k of ``out``: the words of slot ``slots[k]`` (see :data:`ROW_WORDS`)."""
    for k in range(slots.shape[0]):
        s = slots[k]
        o = 0
        for f in words:
            for c in range(f.shape[1]):
                out[k, o + c] = f[s, c]
            o += f.shape[1]
        out[k, o] = image[s]
        out[k, o + 1] = shape[s]
        out[k, o + 2] = flags[s]
        out[k, o + 3] = material[s]
        for c in range(3):
            out[k, o + 4 + c] = wraps[s, c]


@njit(cache=True)
def _unpack_rows(rows, words, image, shape, flags, material, wraps, start):
    """Slot ``start + k`` takes row k of ``rows`` (the inverse of :func:`_pack_rows`)."""
    for k in range(rows.shape[0]):
        d = start + k
        o = 0
        for f in words:
            for c in range(f.shape[1]):
                f[d, c] = rows[k, o + c]
            o += f.shape[1]
        image[d] = rows[k, o]
        shape[d] = rows[k, o + 1]
        flags[d] = rows[k, o + 2]
        material[d] = rows[k, o + 3]
        for c in range(3):
            wraps[d, c] = rows[k, o + 4 + c]


@njit(cache=True)
def _copy_body_rows(words, image, shape, flags, material, wraps, src, start):
    """Slot ``start + k`` takes every field of slot ``src[k]``."""
    for k in range(src.shape[0]):
        s = src[k]
        d = start + k
        for f in words:
            for c in range(f.shape[1]):
                f[d, c] = f[s, c]
        image[d] = image[s]
        shape[d] = shape[s]
        flags[d] = flags[s]
        material[d] = material[s]
        for c in range(3):
            wraps[d, c] = wraps[s, c]


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
