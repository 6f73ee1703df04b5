"""HDF5 checkpoints: everything needed to continue a run bit for bit, written atomically.

Format version 2: a small *manifest* ``DIR/checkpoints/checkpoint_<step:010d>.h5`` (rank 0) and
one file per rank ``checkpoint_<step:010d>.parts/rank<r:05d>.h5`` with that rank's bodies and
springs, so no body goes through rank 0::

    manifest /         attrs: format = "parsim-checkpoint", format_version = 2, parsim_version,
                              created, step, time, next_uid, deleted, ranks, blocks,
                              config_path, shape_counts, complete = 1 (set last)
             /config            the run's TOML text ("" for a scripted run)
             /materials/names, /materials/table          (checked against the restart)
             /bodies/<field>    the replicated bodies (planes, global bodies), once
             /parts/bodies, /parts/history               int64[ranks]: records per part
             /rains/<i>         attrs remaining, rng_state (JSON): pending poured insertions
    part     /         attrs: format = "parsim-checkpoint-part", step, rank
             /bodies/<field>    every storage field (:data:`parsim.bodies.FIELDS`: pose,
                                velocities, forces of the last step, reference poses, wrap
                                counters, ...) of the rank's other owned bodies, sorted by uid
             /history/<field>   the springs of the rank's touching contacts
                                (:data:`parsim.neighbours.HISTORY`)

Atomic: every rank writes and fsyncs its part in ``checkpoint_<step>.parts.tmp/``; when all have
succeeded, rank 0 renames the directory to ``.parts``, then writes the manifest to
``<name>.tmp``, fsyncs it and renames it to its final name. A checkpoint exists only once its
manifest does, so a crash (or ``kill -9``) at any point leaves the previous checkpoints intact;
:func:`prune` removes leftovers. (Version 1, one file with all bodies gathered on rank 0, is no
longer read.)

A restart builds the simulation from the stored config without its body generators, then
:func:`restore` loads the bodies: on the same decomposition each rank reads the manifest and its
own part only; on another one each rank reads the parts of the old blocks that overlap its new
rank ``r`` reads the old parts ``r, r + P, ...`` and sends each body to its new owner, and each
spring with its bodies (:func:`load_routed`; the old owner of a body evaluated all of its
contacts, so they are in its part). The first rebuild after it neither wraps bodies nor moves the
reference poses, so the run continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
from pathlib import Path

import h5py
import numpy as np

from . import __version__
from .bodies import FIELDS, GLOBAL, REPLICATED
from .halo import BODY, records
from .neighbours import HISTORY

FORMAT = "parsim-checkpoint"
FORMAT_VERSION = 2
PART_FORMAT = "parsim-checkpoint-part"


class CheckpointError(ValueError):
    """A checkpoint file is missing, foreign, incomplete or does not fit the simulation."""


def parts_dir(path) -> Path:
    """The directory of the per-rank files of the checkpoint (manifest) ``path``."""
    path = Path(path)
    return path.with_name(path.stem + ".parts")


def part_path(path, rank: int) -> Path:
    return parts_dir(path) / f"rank{rank:05d}.h5"


def _fsync(path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _local_state(sim):
    """This rank's (replicated bodies (rank 0 only), other owned bodies, springs)."""
    st = sim.st
    no = st.n_owned
    rep = (st.flags[:no] & REPLICATED) != 0
    replicated = records(st, np.flatnonzero(rep)) if sim.net.rank == 0 else records(st, np.empty(0, dtype=np.int64))
    owned = records(st, np.flatnonzero(~rep))
    owned = owned[np.argsort(owned["uid"], kind="stable")]
    replicated = replicated[np.argsort(replicated["uid"], kind="stable")]
    hist = sim.nl.export_touching() if sim.nl is not None else np.empty(0, dtype=HISTORY)
    return replicated, owned, hist


def _write_part(path: Path, step: int, rank: int, bodies, hist) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["format"] = PART_FORMAT
        f.attrs["step"] = step
        f.attrs["rank"] = rank
        g = f.create_group("bodies")
        for name in FIELDS:
            g.create_dataset(name, data=bodies[name])
        g = f.create_group("history")
        for name in HISTORY.names:
            g.create_dataset(name, data=hist[name])
    _fsync(path)


def write(sim, path, config_text: str = "", config_path: str = "", rains=(),
          run: dict | None = None) -> Path | None:
    """Write a checkpoint of ``sim`` (collective) to ``path`` (the manifest) and its parts,
    atomically. Returns the path on rank 0, None elsewhere. An error on any rank (disk full)
    raises the same error on every rank and leaves no trace of this checkpoint. ``run``: the
    run's ``target_steps`` and ``checkpoint_every``, the defaults of a restart."""
    if not sim._ready:
        sim._setup()
    net = sim.net
    path = Path(path)
    final_parts = parts_dir(path)
    tmp_parts = final_parts.with_name(final_parts.name + ".tmp")
    replicated, owned, hist = _local_state(sim)
    deleted = net.isum(sim.deleted)
    shapes = net.allreduce_array(np.bincount(owned["shape"].astype(np.int64), minlength=4)
                                 .astype(np.int64), "sum")
    shapes += np.bincount(replicated["shape"].astype(np.int64), minlength=4).astype(np.int64) \
        if net.rank == 0 else 0
    error = None
    if net.rank == 0:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if tmp_parts.exists():
                shutil.rmtree(tmp_parts)
            tmp_parts.mkdir()
        except OSError as e:
            error = f"{tmp_parts}: {e}"
    error = net.bcast(error)
    if error is None:
        try:
            _write_part(tmp_parts / f"rank{net.rank:05d}.h5", sim.step_count, net.rank, owned,
                        hist)
        except Exception as e:  # noqa: BLE001 - every rank raises it below
            error = e
    msg = net.first_error(None if error is None else f"{type(error).__name__}: {error}")
    counts = net.gather((owned.size, hist.size))
    if msg is not None:
        if net.rank == 0:
            shutil.rmtree(tmp_parts, ignore_errors=True)
        net.barrier()
        if isinstance(error, Exception):
            raise error
        raise OSError(f"checkpoint {path}: {msg}")
    if net.rank != 0:
        error = net.bcast(None)
        if error is not None:
            raise OSError(error)
        return None
    tmp = path.with_name(path.name + ".tmp")
    try:
        try:
            if path.exists():                  # the same step again: replace it
                path.unlink()
            if final_parts.exists():
                shutil.rmtree(final_parts)
            os.replace(tmp_parts, final_parts)
            _fsync(path.parent)
            with h5py.File(tmp, "w") as f:
                a = f.attrs
                a["format"] = FORMAT
                a["format_version"] = FORMAT_VERSION
                a["parsim_version"] = __version__
                a["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
                a["step"] = sim.step_count
                a["time"] = sim.time
                a["next_uid"] = sim._next_uid
                a["skin"] = sim.nl.skin          # in use: the default depends on the bodies
                a["deleted"] = deleted
                a["ranks"] = net.size
                a["blocks"] = np.array(sim.dec.dims)
                a["config_path"] = str(config_path)
                a["shape_counts"] = shapes
                for key in ("target_steps", "checkpoint_every"):   # the run's own, for restart
                    if run and run.get(key) is not None:
                        a[key] = int(run[key])
                f.create_dataset("config", data=config_text, dtype=h5py.string_dtype())
                g = f.create_group("materials")
                g.create_dataset("names", data=[m.name for m in sim.materials],
                                 dtype=h5py.string_dtype())
                g.create_dataset("table", data=sim.table)
                g = f.create_group("bodies")
                for name in FIELDS:
                    g.create_dataset(name, data=replicated[name])
                g = f.create_group("parts")
                g.create_dataset("bodies", data=np.array([c[0] for c in counts], dtype=np.int64))
                g.create_dataset("history", data=np.array([c[1] for c in counts], dtype=np.int64))
                g = f.create_group("rains")
                for rain in rains:
                    r = g.create_group(str(rain.index))
                    r.attrs["remaining"] = rain.remaining
                    r.attrs["rng_state"] = json.dumps(rain.spec["rng"].bit_generator.state)
                a["complete"] = 1
            _fsync(tmp)                        # on disk before it becomes visible
            os.replace(tmp, path)
            _fsync(path.parent)
        except Exception as e:
            shutil.rmtree(final_parts, ignore_errors=True)
            shutil.rmtree(tmp_parts, ignore_errors=True)
            net.bcast(f"checkpoint {path}: {type(e).__name__}: {e}")
            raise
        net.bcast(None)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read(path, bodies: bool = True) -> dict:
    """Read and check a checkpoint; a clear :class:`CheckpointError` names what is wrong.
    ``bodies=False``: the manifest only (no ``"bodies"``/``"history"`` keys; :func:`restore`
    then reads what this rank needs)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint file")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise CheckpointError(f"{path}: not a readable HDF5 file ({e}); a truncated or foreign "
                              "file? Use an earlier checkpoint") from None
    with f:
        a = f.attrs
        if a.get("format") != FORMAT:
            raise CheckpointError(f"{path}: not a parsim checkpoint (format attribute "
                                  f"{a.get('format')!r}, expected {FORMAT!r})")
        version = int(a.get("format_version", -1))
        if version != FORMAT_VERSION:
            raise CheckpointError(f"{path}: checkpoint format version {version}; this parsim "
                                  f"({__version__}) reads version {FORMAT_VERSION}")
        if int(a.get("complete", 0)) != 1:
            raise CheckpointError(f"{path}: incomplete checkpoint (the write did not finish); "
                                  "use an earlier checkpoint")
        try:
            data = {k: a[k] for k in ("step", "time", "next_uid", "deleted", "ranks")}
            data["skin"] = float(a["skin"]) if "skin" in a else None
            for key in ("target_steps", "checkpoint_every"):
                data[key] = int(a[key]) if key in a else None
            data["path"] = path
            data["blocks"] = tuple(int(x) for x in a["blocks"])
            data["config"] = f["config"][()].decode() if isinstance(f["config"][()], bytes) \
                else str(f["config"][()])
            data["config_path"] = str(a.get("config_path", ""))
            data["material_names"] = [x.decode() if isinstance(x, bytes) else str(x)
                                      for x in f["materials/names"][()]]
            data["table"] = f["materials/table"][()]
            data["rains"] = {int(k): (int(g.attrs["remaining"]), json.loads(g.attrs["rng_state"]))
                             for k, g in f["rains"].items()}
            data["common"] = _read_bodies(f)      # the replicated bodies
            data["part_bodies"] = f["parts/bodies"][()]
            data["part_history"] = f["parts/history"][()]
            data["shape_counts"] = np.asarray(a["shape_counts"], dtype=np.int64)
        except (KeyError, ValueError, TypeError) as e:
            raise CheckpointError(f"{path}: damaged checkpoint ({type(e).__name__}: {e})") from None
    if bodies:
        data["bodies"], data["history"] = load_parts(data, range(int(data["ranks"])))
    return data


def _read_bodies(g) -> np.ndarray:
    n = g["bodies/uid"].shape[0]
    out = np.empty(n, dtype=BODY)
    for name in FIELDS:
        out[name] = g["bodies"][name][()]
    return out


def _read_history(g) -> np.ndarray:
    out = np.empty(g["history/u"].shape[0], dtype=HISTORY)
    for name in HISTORY.names:
        out[name] = g["history"][name][()]
    return out


def _read_part(data: dict, r: int, bodies_of, history_of):
    """``(bodies_of(f), history_of(f))`` of the part of rank ``r``, after checking that it is
    there, readable, that checkpoint's part, and holds the counts the manifest says."""
    p = part_path(data["path"], r)
    if not p.exists():
        raise CheckpointError(f"{data['path']}: its part {p} is missing; the checkpoint is "
                              "incomplete (use an earlier one)")
    try:
        with h5py.File(p, "r") as f:
            if f.attrs.get("format") != PART_FORMAT or int(f.attrs["step"]) != int(data["step"]):
                raise CheckpointError(f"{p}: not the part of rank {r} of {data['path']}")
            b = bodies_of(f)
            h = history_of(f)
            nb = f["bodies/uid"].shape[0]
            nh = f["history/u"].shape[0]
    except OSError as e:
        raise CheckpointError(f"{p}: not a readable HDF5 file ({e}); use an earlier "
                              "checkpoint") from None
    except (KeyError, ValueError, TypeError) as e:
        raise CheckpointError(f"{p}: damaged checkpoint part ({type(e).__name__}: {e})") \
            from None
    if nb != data["part_bodies"][r] or nh != data["part_history"][r]:
        raise CheckpointError(f"{p}: holds {nb} bodies and {nh} springs, the manifest says "
                              f"{data['part_bodies'][r]} and {data['part_history'][r]}")
    return b, h


def check_parts(data: dict) -> None:
    """Raise :class:`CheckpointError` if a part file of the manifest ``data`` is missing,
    unreadable, foreign or holds other counts than the manifest says (reads no bodies)."""
    for r in range(int(data["ranks"])):
        _read_part(data, r, lambda f: None, lambda f: None)


def load_parts(data: dict, ranks, keep=None) -> tuple[np.ndarray, np.ndarray]:
    """(bodies sorted by uid, springs without duplicates) of the manifest's replicated bodies
    and the parts ``ranks``; ``keep(bodies) -> bool mask`` selects bodies part by part (the
    springs kept are those of a kept body)."""
    bodies = [data["common"]]
    hist = [np.empty(0, dtype=HISTORY)]
    if keep is not None:
        bodies[0] = bodies[0][keep(bodies[0])]
    for r in ranks:
        b, h = _read_part(data, r, _read_bodies, _read_history)
        if keep is not None:
            b = b[keep(b)]
        bodies.append(b)
        hist.append(h)
    b = np.concatenate(bodies)
    b = b[np.argsort(b["uid"], kind="stable")]
    h = np.concatenate(hist)
    if keep is not None and h.size:
        h = h[np.isin(h["u"], b["uid"]) | np.isin(h["v"], b["uid"])]
    if h.size:
        order = np.lexsort((h["r"], h["v"], h["u"]))
        h = h[order]
        first = np.ones(h.size, dtype=bool)
        first[1:] = ((h["u"][1:] != h["u"][:-1]) | (h["v"][1:] != h["v"][:-1])
                     | (h["r"][1:] != h["r"][:-1]))
        h = h[first]                           # a contact across ranks is known on both
    return b, h


def _dedup_springs(h: np.ndarray, uids: np.ndarray) -> np.ndarray:
    """Springs touching a body of ``uids``, sorted, each once (a contact across ranks is stored
    in the parts of both owners)."""
    if h.size:
        h = h[np.isin(h["u"], uids) | np.isin(h["v"], uids)]
    if h.size:
        h = h[np.lexsort((h["r"], h["v"], h["u"]))]
        first = np.ones(h.size, dtype=bool)
        first[1:] = ((h["u"][1:] != h["u"][:-1]) | (h["v"][1:] != h["v"][:-1])
                     | (h["r"][1:] != h["r"][:-1]))
        h = h[first]
    return h


def load_routed(sim, data: dict, read, regloballise) -> tuple[np.ndarray, np.ndarray]:
    """Collective: (bodies of this rank, springs touching them) on a decomposition other than
    the checkpoint's. Rank r reads the old parts r, r + P, ... and sends every body to the rank
    whose block holds its centre now, and the bodies that are global now (too large for the new
    blocks) to every rank; a spring goes where its bodies go (the part of each of its bodies'
    old owners holds it). A body may lie outside its old owner's block (bodies drift past a cut
    between two rebuilds), so the parts cannot be chosen by block overlap. ``read``: the
    (bodies, springs) of this rank's parts; ``regloballise`` sets the GLOBAL flags for the new
    decomposition."""
    net = sim.net
    common = data["common"].copy()
    regloballise(common)
    b = np.concatenate([x[0] for x in read]) if read else np.empty(0, dtype=BODY)
    h = np.concatenate([x[1] for x in read]) if read else np.empty(0, dtype=HISTORY)
    regloballise(b)
    rep = (b["flags"] & REPLICATED) != 0                   # global now: to every rank
    shared = net.allgather_records(b[rep], BODY)
    ordinary = b[~rep]
    dest = sim.dec.owner_rank(ordinary["position"]) if ordinary.size else \
        np.empty(0, dtype=np.int64)
    order = np.argsort(dest, kind="stable")
    mine = net.alltoall_records(ordinary[order], np.bincount(dest, minlength=net.size), BODY)
    # springs: to the new owner of each of their bodies this rank knows (read, or from the
    # manifest); to every rank when one of them is global now
    known = np.concatenate([ordinary, common[(common["flags"] & REPLICATED) == 0]])
    owner = sim.dec.owner_rank(known["position"]) if known.size else np.empty(0, np.int64)
    key = np.argsort(known["uid"], kind="stable")
    uids, owner = known["uid"][key], owner[key]
    rows, where = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for end in ("u", "v"):
        if uids.size and h.size:
            i = np.minimum(np.searchsorted(uids, h[end]), uids.size - 1)
            hit = uids[i] == h[end]
            rows.append(np.flatnonzero(hit))
            where.append(owner[i][hit])
    rows, where = np.concatenate(rows), np.concatenate(where)
    order = np.argsort(where, kind="stable")
    got = net.alltoall_records(h[rows[order]], np.bincount(where, minlength=net.size), HISTORY)
    now_global = b["uid"][rep]
    everyone = net.allgather_records(h[np.isin(h["u"], now_global) | np.isin(h["v"], now_global)],
                                     HISTORY)
    keep = ((common["flags"] & REPLICATED) != 0) | sim.dec.owns(common["position"])
    bodies = np.concatenate([common[keep], shared, mine])
    bodies = bodies[np.argsort(bodies["uid"], kind="stable")]
    return bodies, _dedup_springs(np.concatenate([got, everyone]), bodies["uid"])


def restore(sim, data: dict, rains=()) -> None:
    """Load a checkpoint read by :func:`read` (with or without its bodies) into ``sim``
    (collective; a simulation with the same materials and no bodies yet). Each rank keeps the
    bodies of its block; on the checkpoint's own decomposition it reads only its part."""
    names = [m.name for m in sim.materials]
    if names != data["material_names"] or sim.table.shape != data["table"].shape or not \
            np.array_equal(sim.table, data["table"]):
        raise CheckpointError(f"the checkpoint's materials {data['material_names']} differ from "
                              f"the simulation's {names}")
    if sim.st.n_owned:
        raise CheckpointError("restore into a simulation without bodies")
    net = sim.net

    def regloballise(b):
        """Global-ness follows this decomposition (a body may be global on few ranks and an
        ordinary one on many)."""
        if net.size == 1:
            b["flags"] &= ~GLOBAL
        elif sim.global_radius < np.inf:
            finite = (b["flags"] & 2) == 0   # not INFINITE
            big = finite & (b["bounding_radius"] > sim.global_radius)
            b["flags"][finite & ~big] &= ~GLOBAL
            b["flags"][big] |= GLOBAL

    def keep(b):
        """Bodies of this rank's block, replicated ones on every rank."""
        regloballise(b)
        if net.size == 1:
            return np.ones(b.shape[0], dtype=bool)
        return ((b["flags"] & REPLICATED) != 0) | sim.dec.owns(b["position"])

    same = (net.size == int(data["ranks"])
            and tuple(sim.dec.dims) == tuple(data["blocks"]))
    if same:                                  # this rank's part: the bodies it owned
        error = None
        try:
            b, hist = load_parts(data, [net.rank])
        except CheckpointError as e:
            error = str(e)
        error = net.first_error(error)
        if error is not None:
            raise CheckpointError(error)
        sel = b
    elif "bodies" in data:
        b = data["bodies"].copy()
        sel = b[keep(b)]
        hist = data["history"]
    else:
        error, read = None, []
        try:
            read = [_read_part(data, r, _read_bodies, _read_history)
                    for r in range(net.rank, int(data["ranks"]), net.size)]
        except CheckpointError as e:
            error = str(e)
        error = net.first_error(error)
        if error is not None:
            raise CheckpointError(error)
        sel, hist = load_routed(sim, data, read, regloballise)
    sim.st.append_owned({k: sel[k] for k in FIELDS})
    sim._restored = hist
    sim._restart_exact = True
    sim.step_count = int(data["step"])
    sim.time = float(data["time"])
    sim._next_uid = int(data["next_uid"])
    sim._restored_skin = data.get("skin")
    sim.deleted = int(data["deleted"]) if net.rank == 0 else 0
    sim._expected_uids = None
    sim._ready = False
    for rain in rains:
        if rain.index in data["rains"]:
            remaining, state = data["rains"][rain.index]
            rain.remaining = remaining
            rain.spec["rng"].bit_generator.state = state


def checkpoints_in(directory) -> list[Path]:
    """Complete checkpoint files of a run directory, oldest first."""
    d = Path(directory) / "checkpoints"
    return sorted(d.glob("checkpoint_*.h5")) if d.is_dir() else []


def drop_after(directory, step: int) -> None:
    """Delete the checkpoints of ``directory`` after ``step`` (rank 0): a restart from ``step``
    into its own run directory replaces that run's later snapshots, and its later checkpoints
    go with them (they were kept until 2026-11-24, so the newest ones in the directory could
    be of the replaced future while the snapshots ended earlier, and the pruning removed the
    restart's own checkpoints first)."""
    for p in checkpoints_in(directory):
        if int(p.stem.split("_")[1]) > step:
            p.unlink(missing_ok=True)
            shutil.rmtree(parts_dir(p), ignore_errors=True)


def prune(directory, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints (rank 0 only, with no write under way),
    and the leftovers of interrupted writes (parts without a manifest, ``.tmp`` files)."""
    files = checkpoints_in(directory)
    for p in files[: max(len(files) - keep, 0)]:
        p.unlink(missing_ok=True)              # first the manifest: then it is no checkpoint
        shutil.rmtree(parts_dir(p), ignore_errors=True)
    d = Path(directory) / "checkpoints"
    if not d.is_dir():
        return
    for p in d.glob("checkpoint_*.tmp"):
        p.unlink(missing_ok=True)
    for p in d.glob("checkpoint_*.parts*"):
        if p.name.endswith(".tmp") or not (d / (p.name[: -len(".parts")] + ".h5")).exists():
            shutil.rmtree(p, ignore_errors=True)
