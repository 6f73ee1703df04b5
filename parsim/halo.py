"""Shadow copies and migration between blocks, in three sweeps (x, then y, then z).

*Shadows.* At a neighbour-list rebuild every rank sends a copy of each body whose centre lies
within its *halo* of a block face to the neighbour behind that face: in sweep x its owned bodies,
in sweep y its owned bodies and the copies received in sweep x, in sweep z all of those. Bodies
near an edge or corner thus reach the 2 or 7 blocks around it with 6 messages per rank, as in pe.
A copy sent across the periodic seam carries the shift in its image code (positions are stored
unshifted); with one block along a periodic axis the rank sends to itself, which makes the
periodic images of the serial run. The halo of a body is
``bounding radius + largest bounding radius + skin`` (plus a rounding hair): everything whose
skin-enlarged AABB can overlap the enlarged AABB of a body owned by the receiver.

Shadows are fixed until the next rebuild; every step :meth:`Halo.refresh` replays the three
sweeps with the pose and velocities only (fixed-size messages into preallocated buffers), and
without the orientation when every movable body is a sphere (9 float64 per copy instead of 13),
for the shadows some candidate pair reads (:meth:`Halo.prune`, at each rebuild).

*Migration.* At a rebuild, before the shadows are made, an owned body whose centre has left the
block goes to the neighbour along the first axis on which it is outside, and so on in the next
sweeps (a body crossing a corner takes up to three hops within one rebuild). It takes its
tangential spring histories along (:meth:`NeighbourList.export_history`). Removal and insertion
are O(1) per body (swap-remove in the storage, the hash grid is updated incrementally).
"""

from __future__ import annotations

import time
from collections.abc import MutableMapping

import numpy as np
from numba import njit

from .bodies import FIELDS, GLOBAL, IMAGE_WORD, NO_SHIFT, REPLICATED, ROW_WORDS, BodyStorage
from . import native_mpi as nm
from .comm import _TAG, Net
from .decomposition import NONE, Decomposition

#: one body as a record (all storage fields): the rows of checkpoints
BODY = np.dtype([(name, dtype, shape) for name, (dtype, shape) in FIELDS.items()])
#: one body in the messages of shadow creation and migration: the words of
#: :meth:`BodyStorage.pack_rows`
ROW = np.dtype((np.int64, (ROW_WORDS,)))
#: pose + velocities: what a shadow refresh sends per copy (position, velocity, angular
#: velocity, orientation) ...
STATE_WIDTH = 13
#: ... and without the orientation when no movable body anywhere needs one: every movable body
#: is a sphere (no contact reads a sphere's orientation, and a fixed body's never changes)
SPHERE_WIDTH = 9


_NO_SLOTS = np.empty(0, dtype=np.int64)


class MigrationError(RuntimeError):
    """A body moved further than one block between two rebuilds."""


def records(st: BodyStorage, slots: np.ndarray) -> np.ndarray:
    rec = np.empty(slots.shape[0], dtype=BODY)
    for name in FIELDS:
        rec[name] = getattr(st, name)[slots]
    return rec


@njit(cache=True)
def _pack_state(slots, position, orientation, velocity, angular_velocity, buf):
    """Rows of ``buf``: position, velocity, angular velocity and, if ``buf`` has
    :data:`STATE_WIDTH` columns, the orientation of slots ``slots``."""
    turning = buf.shape[1] >= STATE_WIDTH
    for k in range(slots.shape[0]):
        i = slots[k]
        for d in range(3):
            buf[k, d] = position[i, d]
            buf[k, 3 + d] = velocity[i, d]
            buf[k, 6 + d] = angular_velocity[i, d]
        if turning:
            for d in range(4):
                buf[k, 9 + d] = orientation[i, d]


@njit(cache=True)
def _unpack_state(buf, dst, position, orientation, velocity, angular_velocity):
    """The inverse of :func:`_pack_state`: row k of ``buf`` into slot ``dst[k]``."""
    turning = buf.shape[1] >= STATE_WIDTH
    for k in range(buf.shape[0]):
        j = dst[k]
        for d in range(3):
            position[j, d] = buf[k, d]
            velocity[j, d] = buf[k, 3 + d]
            angular_velocity[j, d] = buf[k, 6 + d]
        if turning:
            for d in range(4):
                orientation[j, d] = buf[k, 9 + d]


@njit(cache=True)
def _copy_rows(src, dst, position, orientation, velocity, angular_velocity, turning):
    """Slots ``dst[k]`` take the position and velocities (and, if ``turning``, the orientation)
    of slots ``src[k]``, in the order of k (a copy may read a row an earlier one wrote, as the
    sweeps do). Flat views: a 2-d row index has a run-time row stride (see the integrator)."""
    x, q = position.reshape(-1), orientation.reshape(-1)
    v, w = velocity.reshape(-1), angular_velocity.reshape(-1)
    for k in range(src.shape[0]):
        i = 3 * src[k]
        j = 3 * dst[k]
        x[j], x[j + 1], x[j + 2] = x[i], x[i + 1], x[i + 2]
        v[j], v[j + 1], v[j + 2] = v[i], v[i + 1], v[i + 2]
        w[j], w[j + 1], w[j + 2] = w[i], w[i + 1], w[i + 2]
        if turning:
            i = 4 * src[k]
            j = 4 * dst[k]
            q[j], q[j + 1], q[j + 2], q[j + 3] = q[i], q[i + 1], q[i + 2], q[i + 3]


@njit(cache=True)
def _leaving(n, flags, position, cuts, d, c, up_to, down_to, out):
    """Where each of the first ``n`` (owned) bodies goes along axis ``d`` at a migration:
    ``out[i]`` 0 stays (or is replicated), 1 to the lower neighbour (block coordinate
    ``down_to``), 2 to the upper one (``up_to``; first when both are the same block), 3
    further (an error). The block coordinate as :meth:`Decomposition.owner_coords`. Returns
    the counts of 1, 2 and 3. One pass without temporaries: the numpy masks it replaces cost
    about 120 us per rebuild of 8,000 bodies on 2 ranks (fresh arrays), this a few."""
    n_down = n_up = n_far = 0
    for i in range(n):
        out[i] = 0
        if flags[i] & REPLICATED:
            continue
        o = np.searchsorted(cuts, position[i, d], side="right")
        if o == c:
            continue
        if o == up_to:
            out[i] = 2
            n_up += 1
        elif o == down_to:
            out[i] = 1
            n_down += 1
        else:
            out[i] = 3
            n_far += 1
    return n_down, n_up, n_far


@njit(cache=True)
def _prune_copies(src, dst, needed, keep):
    """Backwards over one copy step: ``keep[k]`` if slot ``dst[k]`` is ``needed``, and then its
    source is needed too (a copy may read a row an earlier copy of the step wrote). Returns
    the number kept."""
    m = 0
    for k in range(src.shape[0] - 1, -1, -1):
        keep[k] = needed[dst[k]]
        if keep[k]:
            needed[src[k]] = True
            m += 1
    return m


#: the columns of a step of :func:`_run_program` (one row of ``ops``)
_KIND, _A0, _A1, _B0, _B1, _DOWN, _UP, _FIRST, _FROM_DOWN, _TAG_A, _TAG_B, _WIDTH = range(12)
#: kinds of step: local copies, one message each way with the same rank on both sides, a
#: message each way with each of two neighbours
_COPY, _WHOLE, _PAIR = 0, 1, 2


@njit(cache=True)
def _run_program(ops, idx, buf, hr, tim, position, orientation, velocity, angular_velocity):
    """The whole per-step refresh in one call (:mod:`parsim.native_mpi`): the steps of
    :meth:`Halo._program` as rows of ``ops`` (see ``_KIND`` ...), their slots in ``idx``, the
    message buffers in ``buf`` (out, then in), ``hr`` the MPI handles then four requests;
    ``tim`` accumulates the seconds of packing, messages and unpacking (then two words for
    the clock), and ``tim[5:7]`` are the two check values every message carries ahead of its
    rows: this rank's on the way in, the largest of every rank the messages reached on the
    way out (a message carries the largest of those received in the sweeps before it).
    Returns MPI's error code (0: none)."""
    h, reqs, ts, flags = hr[:4], hr[4:], tim[3:5].view(np.int64), tim[5:7]
    for s in range(ops.shape[0]):
        op = ops[s]
        src = idx[op[_A0]:op[_A1]]
        dst = idx[op[_B0]:op[_B1]]
        w = op[_WIDTH]
        if op[_KIND] == _COPY:
            _copy_rows(src, dst, position, orientation, velocity, angular_velocity, w > 9)
            continue
        ns, nr = src.shape[0], dst.shape[0]
        # out: [flags, rows of the first part, flags, the other rows], in: likewise (the first
        # part: from below); a whole step sends its first part only, all rows in it
        nf = ns if op[_KIND] == _WHOLE else op[_FIRST]
        nd = nr if op[_KIND] == _WHOLE else op[_FROM_DOWN]
        n_out = 4 + ns * w
        out = buf[:n_out]
        inbuf = buf[n_out: n_out + 4 + nr * w]
        t0 = nm.now(ts)
        a, b = 2 + nf * w, 2 + nd * w
        out[0], out[1], out[a], out[a + 1] = flags[0], flags[1], flags[0], flags[1]
        _pack_state(src[:nf], position, orientation, velocity, angular_velocity,
                    out[2:a].reshape((nf, w)))
        _pack_state(src[nf:], position, orientation, velocity, angular_velocity,
                    out[a + 2:].reshape((ns - nf, w)))
        inbuf[0] = inbuf[1] = inbuf[b] = inbuf[b + 1] = 0.0    # neutral where none arrives
        t1 = nm.now(ts)
        if op[_KIND] == _WHOLE:
            e = nm.sendrecv(out[:a], inbuf[:b], op[_UP], op[_TAG_A], h)
        else:
            e = nm.exchange(out, a, inbuf, b, op[_DOWN], op[_UP], op[_TAG_A], op[_TAG_B], NONE,
                            reqs, h)
        if e:
            return e
        t2 = nm.now(ts)
        flags[0] = max(flags[0], inbuf[0], inbuf[b])
        flags[1] = max(flags[1], inbuf[1], inbuf[b + 1])
        _unpack_state(inbuf[2:b].reshape((nd, w)), dst[:nd], position, orientation, velocity,
                      angular_velocity)
        _unpack_state(inbuf[b + 2:].reshape((nr - nd, w)), dst[nd:], position, orientation,
                      velocity, angular_velocity)
        tim[0] += t1 - t0
        tim[1] += t2 - t1
        tim[2] += nm.now(ts) - t2
    return 0


def _shifted(image: np.ndarray, axis: int, delta: int) -> np.ndarray:
    """Image codes ``image`` with ``delta`` (-1, 0, +1) added to the periodic shift along
    ``axis``."""
    return (image.astype(np.int64) + int(delta) * 3**axis).astype(np.int8)


def _shift_image(rows: np.ndarray, axis: int, delta: int) -> None:
    """Add ``delta`` (+-1) to the periodic shift along ``axis`` of the copies ``rows`` (of
    :meth:`BodyStorage.pack_rows`)."""
    if rows.shape[0]:
        rows[:, IMAGE_WORD] = _shifted(rows[:, IMAGE_WORD], axis, delta)


class _Seconds(MutableMapping):
    """Named float64 entries of an array (that kernels add to), as a mapping."""

    def __init__(self, values: np.ndarray, names):
        self._values, self._index = values, {k: i for i, k in enumerate(names)}

    def __getitem__(self, key):
        return float(self._values[self._index[key]])

    def __setitem__(self, key, value):
        self._values[self._index[key]] = value

    def __delitem__(self, key):
        raise TypeError("the refresh's timers cannot be removed")

    def __iter__(self):
        return iter(self._index)

    def __len__(self):
        return len(self._index)


class Halo:
    """The shadow copies of one rank and the plan to refresh them every step."""

    def __init__(self, net: Net, dec: Decomposition):
        self.net = net
        self.dec = dec
        self.global_src = np.empty(0, dtype=np.int64)   # global bodies' images: sources
        self.global_start = 0                             # ... and their first slot
        #: per axis: (send_down, send_up, first slot from below, first from above, end)
        self.plan = []
        self.local = None          # (src, dst) when the refresh needs no message
        self._where = np.empty(0, dtype=np.int8)   # migration: where each owned body goes
        self.program = []          # the refresh, step by step (see _program)
        self.migrated = 0          # bodies this rank sent away at the last rebuild
        self.migrated_total = 0    # ... and over the run
        self.shadows_made = 0
        self.received = 0          # shadows made from other ranks' messages at the last build
        self.refreshed = 0         # shadows the per-step refresh writes (see prune)
        #: whether a rebuild calls :meth:`prune` (the simulation's; off: every shadow is
        #: refreshed every step, as before 2026-11-27). Set it on every rank or none: the
        #: pruning exchanges messages with the neighbours.
        self.pruning = True
        #: whether the refresh carries the orientation (:data:`SPHERE_WIDTH`; set by build)
        self.turning = True
        # the program as arrays for _run_program (with native MPI): (ops, idx, buf, hr, bytes,
        # messages)
        self._native = None
        # the refresh's seconds (pack, exchange, unpack; then two words for the kernel's clock),
        # then the two check values of the messages (see _run_program)
        self._tim = np.zeros(7)
        #: the two check values the kernels' refresh carries (set before :meth:`refresh`, the
        #: largest over the ranks after it; see ``Simulation._advance``)
        self.flags = self._tim[5:]
        #: seconds spent in the per-step shadow refresh: packing, the exchange (sending and
        #: waiting for the neighbours), unpacking (a mapping; setting a value resets it)
        self.timers = _Seconds(self._tim, ("pack", "exchange", "unpack"))

    # ---- shadows -----------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the shadows (they were cleared from the storage)."""
        self.plan = []
        self.global_src = np.empty(0, dtype=np.int64)
        self.local = None
        self.program = []
        self._native = None
        self.received = self.refreshed = 0

    def build(self, st: BodyStorage, reach: float, turning: bool = True) -> None:
        """Make the shadow copies (requires none present). ``reach`` is the halo beyond a body's
        own bounding radius: largest bounding radius + skin + rounding hair (global).
        ``turning``: whether any rank has a movable non-sphere (the same on every rank); if
        not, the per-step refresh leaves out the orientation, which no contact of a sphere
        reads (the copies keep the orientation they were made with)."""
        dec, net = self.dec, self.net
        self.turning = bool(turning)
        self.plan = []
        self.received = 0
        for d in range(3):
            if dec.down[d] == NONE and dec.up[d] == NONE:
                self.plan.append(None)
                continue
            n = st.n
            cand = np.flatnonzero((st.flags[:n] & REPLICATED) == 0)
            x = st.position[cand, d]
            h = st.bounding_radius[cand] + reach
            send_down = cand[x - dec.block_lo[d] < h] if dec.down[d] != NONE else cand[:0]
            send_up = cand[dec.block_hi[d] - x < h] if dec.up[d] != NONE else cand[:0]
            start_down = st.n
            if dec.down[d] == net.rank and dec.up[d] == net.rank:
                # one block along this periodic axis: the copies are this rank's own rows
                # (the same rows, in the same order, as the messages below would bring)
                st.append_shadows(send_up, _shifted(st.image[send_up], d, -dec.seam_up[d]))
                start_up = st.n
                st.append_shadows(send_down, _shifted(st.image[send_down], d,
                                                      dec.seam_down[d]))
            else:
                rec_down = st.pack_rows(send_down)
                rec_up = st.pack_rows(send_up)
                if dec.seam_down[d]:        # arrives at the top end: seen one box length higher
                    _shift_image(rec_down, d, +1)
                if dec.seam_up[d]:
                    _shift_image(rec_up, d, -1)
                got_down, got_up = net.exchange(d, dec.down[d], dec.up[d], rec_down, rec_up,
                                                ROW)
                st.append_shadow_rows(got_down)
                start_up = st.n
                st.append_shadow_rows(got_up)
                self.received += got_down.shape[0] + got_up.shape[0]
            self.plan.append((send_down.astype(np.int64), send_up.astype(np.int64),
                              start_down, start_up, st.n))
        self._global_images(st)
        self.shadows_made = st.n_shadow
        self._program()

    def _program(self) -> None:
        """The per-step refresh as a short list of steps, in the order the sweeps make them
        (``self.program``):

        * ``("copy", src, dst)``: slots ``dst`` take the rows of slots ``src``, in order; one
          :func:`_copy_rows` call for all the local copies between two messages, whatever
          sweeps (one block along a periodic axis) and global images they span;
        * ``("send", axis, slots, out, inbuf, rows, whole, views, n_first, n_from_down,
          run)``: one :func:`_pack_state` call for both directions into ``out``, the exchange, one
          :func:`_unpack_state` call from ``inbuf`` into slots ``rows`` (the copies from below,
          then those from above). ``whole``: the same rank is the neighbour on both sides
          (two blocks along a periodic axis), so one message goes each way, packed as [to up;
          to down], which that rank receives as its [from below; from above]. ``views``: the
          four directions' parts of ``out`` and ``inbuf``; ``run()`` exchanges them
          (:meth:`parsim.comm.Net.prepare_fixed`; None with the kernels' MPI).

        :meth:`prune` then leaves out the copies nothing reads.

        On the 8,000-sphere periodic gas on one rank the six copy calls per step and their
        Python loop cost more than the copies; on two ranks split along x the refresh was nine
        kernel calls and four messages per step, now three calls and two messages."""
        dec, rank = self.dec, self.net.rank
        steps = []
        src = [self.global_src]         # global images: independent of the sweeps
        dst = [self.global_start + np.arange(self.global_src.size, dtype=np.int64)]

        def flush():
            if sum(a.size for a in src):
                steps.append(("copy", np.concatenate(src).astype(np.int64),
                              np.concatenate(dst).astype(np.int64)))
            src.clear()
            dst.clear()

        for d, p in enumerate(self.plan):
            if p is None:
                continue
            send_down, send_up, start_down, start_up, end = p
            n_from_down, n_from_up = start_up - start_down, end - start_up
            if dec.down[d] == rank:                  # one block along this periodic axis
                src += [send_up, send_down]
                dst += [start_down + np.arange(send_up.size, dtype=np.int64),
                        start_up + np.arange(send_down.size, dtype=np.int64)]
                continue
            flush()
            whole = dec.down[d] == dec.up[d]
            first, second = (send_up, send_down) if whole else (send_down, send_up)
            slots = np.concatenate([first, second])
            rows = start_down + np.arange(n_from_down + n_from_up, dtype=np.int64)
            steps.append(self._send_step(d, slots, first.size, rows, n_from_down, whole))
        flush()
        self._set_program(steps)

    def _send_step(self, d, slots, n_first, rows, n_from_down, whole):
        """A ``("send", ...)`` step of :meth:`_program` with its buffers: ``slots`` sent
        (the first ``n_first`` to the up neighbour if ``whole``, else to the down one),
        ``rows`` received (the first ``n_from_down`` from below)."""
        width = STATE_WIDTH if self.turning else SPHERE_WIDTH
        out = np.empty((slots.size, width))
        inbuf = np.empty((rows.size, width))
        if whole:
            views = (out[n_first:], out[:n_first], inbuf[:n_from_down], inbuf[n_from_down:])
        else:
            views = (out[:n_first], out[n_first:], inbuf[:n_from_down], inbuf[n_from_down:])
        dec = self.dec
        # (with the kernels' MPI the refresh runs _run_program: no mpi4py call to prepare)
        run = (None if self.net.native is not None else
               self.net.prepare_fixed(d, dec.down[d], dec.up[d], whole, out, inbuf, views))
        return ("send", d, slots.astype(np.int64), out, inbuf, rows.astype(np.int64), whole,
                views, n_first, n_from_down, run)

    def _set_program(self, steps) -> None:
        self.program = steps
        self.local = steps[0][1:] if len(steps) == 1 and steps[0][0] == "copy" else None
        if not steps:
            self.local = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
        self.refreshed = sum(s[2].size if s[0] == "copy" else s[5].size for s in steps)
        self._native = None
        if self.net.native is not None and self.local is None:
            self._native = self._arrays(steps)

    def _arrays(self, steps):
        """The program as :func:`_run_program` takes it, with the bytes and messages each call
        sends."""
        dec = self.dec
        width = STATE_WIDTH if self.turning else SPHERE_WIDTH
        ops = np.zeros((len(steps), 12), dtype=np.int64)
        parts, at, size, nbytes, messages = [], 0, 0, 0, 0
        for k, step in enumerate(steps):
            a, b = (step[1], step[2]) if step[0] == "copy" else (step[2], step[5])
            ops[k, _A0:_B1 + 1] = at, at + a.size, at + a.size, at + a.size + b.size
            parts += [a, b]
            at += a.size + b.size
            ops[k, _WIDTH] = width
            if step[0] == "copy":
                ops[k, _KIND] = _COPY
                continue
            d, whole, n_first, n_from_down = step[1], step[6], step[8], step[9]
            ops[k, _DOWN:_TAG_B + 1] = (dec.down[d], dec.up[d], n_first, n_from_down,
                                       *((_TAG + 200 + d, 0) if whole else
                                         (_TAG + 100 + 2 * d, _TAG + 101 + 2 * d)))
            ops[k, _KIND] = _WHOLE if whole else _PAIR
            size = max(size, (a.size + b.size) * width + 8)
            sends = ([a.size] if whole else
                     [n for n, peer in ((n_first, dec.down[d]), (a.size - n_first, dec.up[d]))
                      if peer != NONE])
            nbytes += 8 * width * sum(sends)
            messages += sum(1 for n in sends if n)
        idx = np.concatenate(parts).astype(np.int64) if parts else np.empty(0, dtype=np.int64)
        hr = np.zeros(8, dtype=np.int32)
        hr[:4] = self.net.native
        return ops, idx, np.empty(size), hr, nbytes, messages

    def prune(self, needed: np.ndarray) -> None:
        """Collective (neighbours along each axis with messages): leave out of the per-step
        refresh every shadow that nothing reads until the next rebuild. ``needed[j]``: slot j is
        read (a body of a candidate pair); a shadow is refreshed if it is needed or is the
        source of a later copy or message whose destination is refreshed. Between two rebuilds
        only the pairs' kernels read shadows, and no pair appears before the next rebuild, so
        this changes no bit; a left-out shadow keeps the state it was made with.

        The program is walked backwards. A message's rows: the receiver tells the sender,
        with one mask message back along the same axis, which of them it needs; the sender
        then needs the slots it still sends (a shadow received in an earlier sweep). On the
        8,000-sphere gas on two ranks one shadow in eight is read (330 of 2,648; the others are
        within the halo but have no candidate partner): the refresh writes 485 rows instead of
        2,648 and sends 10.9 kB per step instead of 58.4 kB."""
        needed = np.array(needed, dtype=np.bool_)     # a copy: the walk marks sources
        dec, net = self.dec, self.net
        steps = []
        for step in reversed(self.program):
            if step[0] == "copy":
                _, src, dst = step
                keep = np.empty(src.size, dtype=np.bool_)
                if _prune_copies(src, dst, needed, keep):
                    steps.append(("copy", src[keep], dst[keep]))
                continue
            _, d, slots, _, _, rows, whole, _, n_first, n_from_down, _ = step
            got = needed[rows].astype(np.uint8)
            back = np.empty(slots.size, dtype=np.uint8)
            if whole:
                net.sendrecv_fixed(d, dec.up[d], got, back)
            else:
                # rows from below go back down and tell that rank about its to_up, ...
                net.exchange_fixed(d, dec.down[d], dec.up[d], got[:n_from_down],
                                   got[n_from_down:], back[:n_first], back[n_first:])
            send = back.astype(np.bool_)
            needed[slots[send]] = True
            take = got.astype(np.bool_)     # (a step never sends a row it receives)
            steps.append(self._send_step(d, slots[send], int(send[:n_first].sum()), rows[take],
                                         int(take[:n_from_down].sum()), whole))
        self._set_program(steps[::-1])

    def _global_images(self, st: BodyStorage) -> None:
        """Every periodic image of the global bodies, made locally (every rank has them)."""
        self.global_src = np.empty(0, dtype=np.int64)
        self.global_start = st.n
        per = self.dec.periodic
        glob = np.flatnonzero(st.flags[: st.n_owned] & GLOBAL)
        if glob.size == 0 or not per.any():
            return
        codes = []
        for code in range(27):
            s = (code % 3 - 1, (code // 3) % 3 - 1, code // 9 - 1)
            if code != NO_SHIFT and all(per[d] or s[d] == 0 for d in range(3)):
                codes.append(code)
        src = np.repeat(glob, len(codes))
        img = np.tile(np.array(codes, dtype=np.int8), glob.size)
        st.append_shadows(src, img)
        self.global_src = src

    def refresh(self, st: BodyStorage) -> None:
        """Shadows take the current pose and velocities of their originals (the three sweeps,
        as the steps of :meth:`_program`)."""
        if self.local is not None:
            src, dst = self.local
            if src.size:
                _copy_rows(src, dst, st.position, st.orientation, st.velocity,
                           st.angular_velocity, self.turning)
            return
        if self._native is not None:
            ops, idx, buf, hr, nbytes, messages = self._native
            e = _run_program(ops, idx, buf, hr, self._tim, st.position, st.orientation,
                             st.velocity, st.angular_velocity)
            if e:
                raise RuntimeError(f"parsim: MPI error {e} in the shadow refresh")
            self.net.bytes_sent += nbytes
            self.net.messages_sent += messages
            return
        tm = self._tim
        for step in self.program:
            if step[0] == "copy":
                _copy_rows(step[1], step[2], st.position, st.orientation, st.velocity,
                           st.angular_velocity, self.turning)
                continue
            slots, out, inbuf, rows, run = step[2], step[3], step[4], step[5], step[10]
            t0 = time.perf_counter()
            _pack_state(slots, st.position, st.orientation, st.velocity, st.angular_velocity,
                        out)
            t1 = time.perf_counter()
            run()
            t2 = time.perf_counter()
            _unpack_state(inbuf, rows, st.position, st.orientation, st.velocity,
                          st.angular_velocity)
            tm[0] += t1 - t0
            tm[1] += t2 - t1
            tm[2] += time.perf_counter() - t2

    # ---- migration ---------------------------------------------------------------------------
    def migrate(self, st: BodyStorage, nl) -> str | None:
        """Hand owned bodies that left the block to their new owners (requires no shadows).
        Returns an error message (a body moved more than one block) or None."""
        dec, net = self.dec, self.net
        self.migrated = 0
        error = None
        for d in range(3):
            n = dec.dims[d]
            if n == 1:
                continue
            no = st.n_owned
            c = dec.coords[d]
            up_to = (c + 1) % n if dec.periodic[d] else c + 1
            down_to = (c - 1) % n if dec.periodic[d] else c - 1
            if self._where.shape[0] < no:
                self._where = np.empty(2 * no, dtype=np.int8)
            where = self._where[:no]
            k_down, k_up, k_far = _leaving(no, st.flags, st.position, dec.cuts[d], d, c, up_to,
                                           down_to, where)
            if k_far and error is None:
                i = int(np.flatnonzero(where == 3)[0])
                error = (f"body uid {int(st.uid[i])} at {tuple(st.position[i])} moved more than "
                         f"one block along {'xyz'[d]} between two neighbour-list rebuilds (its "
                         f"block: {dec.describe()}); the time step is too large")
            # (most rebuilds move no body: no packing, removal or history for nobody)
            s_down = np.flatnonzero(where == 1) if k_down else _NO_SLOTS
            s_up = np.flatnonzero(where == 2) if k_up else _NO_SLOTS
            rec_down, rec_up = st.pack_rows(s_down), st.pack_rows(s_up)
            h_down = nl.export_history(st.uid[s_down]) if nl is not None else None
            h_up = nl.export_history(st.uid[s_up]) if nl is not None else None
            if k_down + k_up:
                st.remove_owned(np.concatenate([s_down, s_up]))
            self.migrated += s_down.size + s_up.size
            self.migrated_total += s_down.size + s_up.size
            got_down, got_up = net.exchange(d, dec.down[d], dec.up[d], rec_down, rec_up, ROW)
            for got in (got_down, got_up):
                st.append_owned_rows(got)
            if nl is not None:
                from .neighbours import HISTORY

                hd, hu = net.exchange(d, dec.down[d], dec.up[d], h_down, h_up, HISTORY)
                if hd.size + hu.size:
                    nl.import_history(np.concatenate([hd, hu]))
        return net.first_error(error)


def warm_up() -> None:
    """Compile (or load) this module's kernels in this process. Launchers call it before
    starting several ranks on a cold cache (see :mod:`parsim.warmup`)."""
    st = BodyStorage(16)
    slots = np.zeros(1, dtype=np.int64)
    buf = np.zeros((1, STATE_WIDTH))
    _pack_state(slots, st.position, st.orientation, st.velocity, st.angular_velocity, buf)
    _unpack_state(buf, slots + 1, st.position, st.orientation, st.velocity, st.angular_velocity)
    _copy_rows(slots, slots + 1, st.position, st.orientation, st.velocity, st.angular_velocity,
               True)
    _prune_copies(slots, slots + 1, np.zeros(16, dtype=np.bool_), np.zeros(1, dtype=np.bool_))
    st.append_shadow_rows(st.pack_rows(slots))
    _leaving(1, st.flags, st.position, np.zeros(1), 0, 0, 1, 1, np.zeros(1, dtype=np.int8))
    _warm_up_native(st)


def _warm_up_native(st: BodyStorage) -> None:
    """The kernels that call MPI (:mod:`parsim.native_mpi`), in a process where MPI is running
    (a rank), called so that they send nothing: with ``MPI_PROC_NULL`` or no message step.
    Without MPI they cannot even be compiled (their MPI functions are not found)."""
    import sys

    if "mpi4py.MPI" not in sys.modules:
        return
    MPI = sys.modules["mpi4py.MPI"]
    if not MPI.Is_initialized() or MPI.Is_finalized():
        return
    h = nm.handles(MPI, MPI.COMM_WORLD)
    if h is None:
        return
    hr = np.zeros(8, dtype=np.int32)
    hr[:4] = h
    x = np.zeros(2)
    nm.pair_max(x, x.copy(), MPI.PROC_NULL, _TAG, h)
    nm.all_max(x, x.copy(), nm.handles(MPI, MPI.COMM_SELF))   # over this rank only
    ops = np.zeros((1, 12), dtype=np.int64)
    ops[0, _KIND], ops[0, _DOWN], ops[0, _UP], ops[0, _WIDTH] = _PAIR, NONE, NONE, SPHERE_WIDTH
    _run_program(ops, np.empty(0, dtype=np.int64), np.zeros(8), hr, np.zeros(7), st.position,
                 st.orientation, st.velocity, st.angular_velocity)
