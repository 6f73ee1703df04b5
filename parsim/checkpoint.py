"""HDF5 checkpoints: everything needed to continue a run bit for bit, written atomically.

``DIR/checkpoints/checkpoint_<step:010d>.h5``::

    /                  attrs: format = "parsim-checkpoint", format_version = 1, parsim_version,
                              created, step, time, next_uid, deleted, ranks, blocks,
                              config_path, complete = 1 (set last)
    /config            the run's TOML text ("" for a scripted run)
    /materials/names, /materials/table          (checked against the restarting simulation)
    /bodies/<field>    every storage field of every body (:data:`parsim.bodies.FIELDS`: pose,
                       velocities, forces of the last step, reference poses, wrap counters, ...),
                       sorted by uid; planes and global bodies once
    /history/<field>   the springs of the touching contacts (:data:`parsim.neighbours.HISTORY`)
    /rains/<i>         attrs remaining, rng_state (JSON): the pending poured insertions

Writes go to ``<name>.tmp`` which is renamed over the final name only when complete, so a crash
(or ``kill -9``) during a write leaves the previous checkpoints intact. On several ranks the
bodies are gathered on rank 0, which writes (an interim: per-rank files are planned).

A restart builds the simulation from the stored config without its body generators, then
:func:`restore` hands each rank the bodies of its block (any rank count) with their springs and
forces; the first rebuild after it neither wraps bodies nor moves the reference poses, so the
run continues exactly as the uninterrupted one.
"""

from __future__ import annotations

import datetime
import json
import os
from pathlib import Path

import h5py
import numpy as np

from . import __version__
from .bodies import FIELDS, GLOBAL, REPLICATED
from .halo import BODY, records
from .neighbours import HISTORY

FORMAT = "parsim-checkpoint"
FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint file is missing, foreign, incomplete or does not fit the simulation."""


def _gather_state(sim):
    """(bodies, history) of all ranks on rank 0 (None elsewhere)."""
    st = sim.st
    no = st.n_owned
    keep = np.arange(no)
    if sim.net.rank != 0:
        keep = np.flatnonzero((st.flags[:no] & REPLICATED) == 0)
    bodies = records(st, keep)
    hist = sim.nl.export_touching() if sim.nl is not None else np.empty(0, dtype=HISTORY)
    parts = sim.net.gather((bodies, hist))
    if parts is None:
        return None, None
    bodies = np.concatenate([p[0] for p in parts])
    bodies = bodies[np.argsort(bodies["uid"], kind="stable")]
    hist = np.concatenate([p[1] for p in parts])
    if hist.size:
        order = np.lexsort((hist["r"], hist["v"], hist["u"]))
        hist = hist[order]
        first = np.ones(hist.size, dtype=bool)
        first[1:] = ((hist["u"][1:] != hist["u"][:-1]) | (hist["v"][1:] != hist["v"][:-1])
                     | (hist["r"][1:] != hist["r"][:-1]))
        hist = hist[first]                     # a contact across ranks is known on both
    return bodies, hist


def write(sim, path, config_text: str = "", config_path: str = "", rains=()) -> Path | None:
    """Write a checkpoint of ``sim`` (collective) to ``path``, atomically. Returns the path on
    rank 0, None elsewhere."""
    if not sim._ready:
        sim._setup()
    bodies, hist = _gather_state(sim)
    deleted = sim.net.isum(sim.deleted)
    if sim.net.rank != 0:
        sim.net.barrier()
        return None
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with h5py.File(tmp, "w") as f:
            a = f.attrs
            a["format"] = FORMAT
            a["format_version"] = FORMAT_VERSION
            a["parsim_version"] = __version__
            a["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
            a["step"] = sim.step_count
            a["time"] = sim.time
            a["next_uid"] = sim._next_uid
            a["deleted"] = deleted
            a["ranks"] = sim.net.size
            a["blocks"] = np.array(sim.dec.dims)
            a["config_path"] = str(config_path)
            f.create_dataset("config", data=config_text, dtype=h5py.string_dtype())
            g = f.create_group("materials")
            g.create_dataset("names", data=[m.name for m in sim.materials],
                             dtype=h5py.string_dtype())
            g.create_dataset("table", data=sim.table)
            g = f.create_group("bodies")
            for name in FIELDS:
                g.create_dataset(name, data=bodies[name])
            g = f.create_group("history")
            for name in HISTORY.names:
                g.create_dataset(name, data=hist[name])
            g = f.create_group("rains")
            for rain in rains:
                r = g.create_group(str(rain.index))
                r.attrs["remaining"] = rain.remaining
                r.attrs["rng_state"] = json.dumps(rain.spec["rng"].bit_generator.state)
            a["complete"] = 1
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)                       # on disk before it replaces anything
        finally:
            os.close(fd)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
        sim.net.barrier()
    return path


def read(path) -> dict:
    """Read and check a checkpoint; a clear :class:`CheckpointError` names what is wrong."""
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
            data["blocks"] = tuple(int(x) for x in a["blocks"])
            data["config"] = f["config"][()].decode() if isinstance(f["config"][()], bytes) \
                else str(f["config"][()])
            data["config_path"] = str(a.get("config_path", ""))
            data["material_names"] = [x.decode() if isinstance(x, bytes) else str(x)
                                      for x in f["materials/names"][()]]
            data["table"] = f["materials/table"][()]
            n = f["bodies/uid"].shape[0]
            bodies = np.empty(n, dtype=BODY)
            for name in FIELDS:
                bodies[name] = f["bodies"][name][()]
            hist = np.empty(f["history/u"].shape[0], dtype=HISTORY)
            for name in HISTORY.names:
                hist[name] = f["history"][name][()]
            data["bodies"], data["history"] = bodies, hist
            data["rains"] = {int(k): (int(g.attrs["remaining"]), json.loads(g.attrs["rng_state"]))
                             for k, g in f["rains"].items()}
        except (KeyError, ValueError, TypeError) as e:
            raise CheckpointError(f"{path}: damaged checkpoint ({type(e).__name__}: {e})") from None
    return data


def restore(sim, data: dict, rains=()) -> None:
    """Load a checkpoint read by :func:`read` into ``sim`` (collective; a simulation with the
    same materials and no bodies yet). Each rank keeps the bodies of its block."""
    names = [m.name for m in sim.materials]
    if names != data["material_names"] or sim.table.shape != data["table"].shape or not \
            np.array_equal(sim.table, data["table"]):
        raise CheckpointError(f"the checkpoint's materials {data['material_names']} differ from "
                              f"the simulation's {names}")
    if sim.st.n_owned:
        raise CheckpointError("restore into a simulation without bodies")
    b = data["bodies"]
    mine = np.ones(b.shape[0], dtype=bool)
    if sim.net.size > 1:
        replicated = (b["flags"] & REPLICATED) != 0
        if sim.global_radius < np.inf:       # global-ness follows this decomposition
            finite = (b["flags"] & 2) == 0   # not INFINITE
            big = finite & (b["bounding_radius"] > sim.global_radius)
            b["flags"][finite & ~big] &= ~GLOBAL
            b["flags"][big] |= GLOBAL
            replicated = (b["flags"] & REPLICATED) != 0
        mine = replicated | sim.dec.owns(b["position"])
    else:
        b["flags"] &= ~GLOBAL
    sel = b[mine]
    sim.st.append_owned({k: sel[k] for k in FIELDS})
    sim._restored = data["history"]
    sim._restart_exact = True
    sim.step_count = int(data["step"])
    sim.time = float(data["time"])
    sim._next_uid = int(data["next_uid"])
    sim.deleted = int(data["deleted"]) if sim.net.rank == 0 else 0
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


def prune(directory, keep: int) -> None:
    """Delete all but the newest ``keep`` checkpoints (rank 0 only)."""
    files = checkpoints_in(directory)
    for p in files[: max(len(files) - keep, 0)]:
        p.unlink(missing_ok=True)
