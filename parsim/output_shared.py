"""Snapshots in one shared HDF5 file written collectively by all ranks (h5py built for MPI).

Same layout as :mod:`parsim.output` (format version 2, ``docs/output.md``), but on several ranks
the fields are ordinary datasets of ``DIR/snapshots.h5`` itself: the file is opened by every rank
with the ``mpio`` driver, every rank writes its bodies (sorted by uid within the rank) into its
slice ``[offset_r, offset_r + n_r)`` in rank order with one collective ``H5Dwrite`` per field, and
no body goes through rank 0. The file's ``layout`` attribute says ``"shared"`` (the per-rank
writer's files say ``"per-rank"``); readers need not care.

Used when h5py is built for MPI (``h5py.get_config().mpi``) and the run has several ranks, unless
``PARSIM_SNAPSHOT_LAYOUT=per-rank`` asks for the per-rank files (:func:`choose_layout`).

HDF5 rules this module follows: every call that changes metadata (create a group or a dataset,
set an attribute, delete) is made by every rank with the same arguments; variable-length strings
(the config text, material names) are written before the collective open, by rank 0 alone; a rank
with no bodies still takes part in each collective write with an empty selection (h5py's
``ds[a:b] = x`` skips empty writes, which would leave the other ranks waiting forever).
"""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import h5py
import numpy as np

from . import __version__
from .output import FILE_FIELDS, FORMAT, FORMAT_VERSION, XdmfIndex, add_sim_attrs

LAYOUTS = ("auto", "per-rank", "shared")


def mpi_h5py() -> bool:
    """Whether this h5py can open files with the ``mpio`` driver."""
    return bool(h5py.get_config().mpi)


def choose_layout(size: int) -> str:
    """``"shared"`` or ``"per-rank"`` for a run on ``size`` ranks. ``PARSIM_SNAPSHOT_LAYOUT``
    (``auto`` | ``per-rank`` | ``shared``) overrides the automatic choice (shared when h5py is
    built for MPI and there are several ranks)."""
    want = os.environ.get("PARSIM_SNAPSHOT_LAYOUT", "auto").strip() or "auto"
    if want not in LAYOUTS:
        raise ValueError(f"PARSIM_SNAPSHOT_LAYOUT={want!r}: expected one of {', '.join(LAYOUTS)}")
    if size == 1:
        return "per-rank"            # one rank: the plain serial file either way
    if want == "shared" and not mpi_h5py():
        raise ValueError("PARSIM_SNAPSHOT_LAYOUT=shared needs h5py built for MPI "
                         "(h5py.get_config().mpi is False); unset it to write per-rank files")
    if want == "auto":
        return "shared" if mpi_h5py() else "per-rank"
    return want


class SharedSnapshotWriter:
    """Appends snapshots of a :class:`parsim.Simulation` to ``DIR/snapshots.h5``, one file
    written collectively by every rank. Construction, :meth:`write`, :meth:`write_timings` and
    :meth:`close` are collective. The interface is that of :class:`parsim.output.SnapshotWriter`."""

    def __init__(self, directory, config_text: str = "", config_path: str = "", sim=None,
                 append_after: int | None = None):
        self.dir = Path(directory)
        self.path = self.dir / "snapshots.h5"
        self.xdmf = self.dir / "snapshots.xmf"
        self._index = None           # the XDMF index in memory (rank 0)
        self.net = sim.net
        self.rank, self.size = self.net.rank, self.net.size
        self.seconds = 0.0
        self.part = None
        error = None
        if self.rank == 0:
            try:
                self._prepare(config_text, config_path, sim, append_after)
            except Exception as e:  # noqa: BLE001 - re-raised on every rank below
                error = f"{type(e).__name__}: {e}"
        error = self.net.bcast(error)
        if error is not None:
            raise ValueError(error)
        self.file = h5py.File(self.path, "a", driver="mpio", comm=self.net.comm)
        if self.rank == 0:
            self._write_xdmf()

    def _prepare(self, config_text, config_path, sim, append_after) -> None:
        """Rank 0, before the collective open: a new file with the metadata (variable-length
        strings cannot be written collectively), or an existing one cut back to the checkpoint."""
        self.dir.mkdir(parents=True, exist_ok=True)
        if append_after is not None and self.path.exists():
            with h5py.File(self.path, "a") as f:
                if f.attrs.get("format") != FORMAT or "snapshots" not in f:
                    raise ValueError(f"{self.path}: exists but is not a parsim snapshot file; "
                                     "choose another --output directory")
                f.attrs["layout"] = "shared"
                add_sim_attrs(f, sim, only_missing=True)
                snaps = f["snapshots"]
                for name in list(snaps.keys()):
                    if int(name) > append_after:
                        del snaps[name]
            return
        with h5py.File(self.path, "w") as f:
            a = f.attrs
            a["format"] = FORMAT
            a["format_version"] = FORMAT_VERSION
            a["layout"] = "shared"
            a["parsim_version"] = __version__
            a["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
            a["config_path"] = str(config_path)
            f.create_dataset("config", data=config_text, dtype=h5py.string_dtype())
            g = f.create_group("materials")
            g.create_dataset("names", data=[m.name for m in sim.materials],
                             dtype=h5py.string_dtype())
            g.create_dataset("table", data=sim.table)
            add_sim_attrs(f, sim)
            f.create_group("snapshots")

    def write(self, sim, status: str = "ok") -> None:
        t0 = time.perf_counter()
        try:
            self._write(sim, status)
        finally:
            self.seconds += time.perf_counter() - t0

    def _write(self, sim, status: str) -> None:
        name = f"{sim.step_count:010d}"
        s = sim.state(local=True)
        n = int(s["uid"].shape[0])
        s["rank"] = np.full(n, self.rank, dtype=np.int32)
        counts = self.net.allgather(n)
        contacts = sim.count_contacts()
        total = int(sum(counts))
        offset = int(sum(counts[: self.rank]))
        s["vertex_index"] = np.arange(offset, offset + n, dtype=np.int32)
        snaps = self.file["snapshots"]
        if name in snaps:
            del snaps[name]
        g = snaps.create_group(name)
        for k in FILE_FIELDS + ("vertex_index",):
            a = np.ascontiguousarray(s[k])
            ds = g.create_dataset(k, shape=(total,) + a.shape[1:], dtype=a.dtype)
            _collective_write(ds, offset, a)
        g.attrs["step"] = sim.step_count
        g.attrs["time"] = sim.time
        g.attrs["n_bodies"] = total
        g.attrs["n_contacts"] = contacts
        g.attrs["status"] = status
        g.attrs["ranks"] = len(counts)
        g.attrs["counts"] = np.array(counts, dtype=np.int64)
        self.file.flush()
        if self.rank == 0:
            self._write_xdmf(g.name.rsplit("/", 1)[-1])

    def _write_xdmf(self, name: str | None = None) -> None:
        """Rank 0: rewrite the XDMF index after snapshot ``name`` (None: read all, on opening)."""
        if name is None or self._index is None:
            self._index = XdmfIndex(self.xdmf, self.file["snapshots"])
        else:
            self._index.add(name, self.file["snapshots"][name])
        self._index.write()

    def write_timings(self, table: dict) -> None:
        """Per-phase (min, mean, max) seconds over the ranks; ``table`` is the same on every
        rank (:func:`parsim.runner.timings`)."""
        if "timings" in self.file:
            del self.file["timings"]
        g = self.file.create_group("timings")
        for k, v in table.items():
            ds = g.create_dataset(k, shape=(3,), dtype=np.float64)
            _collective_write(ds, 0, np.array(v, dtype=np.float64) if self.rank == 0
                              else np.empty(0, dtype=np.float64))
        self.file.flush()

    def close(self) -> None:
        if self.file:
            self.file.close()
            self.file = None


def _collective_write(ds, offset: int, a: np.ndarray) -> None:
    """Collective write of rows ``[offset, offset + len(a))`` of ``ds``; every rank calls it,
    a rank with nothing to write with an empty selection."""
    from h5py import h5fd, h5p, h5s

    fspace = ds.id.get_space()
    if a.shape[0]:
        fspace.select_hyperslab((offset,) + (0,) * (a.ndim - 1), a.shape)
        mspace = h5s.create_simple(a.shape)
    else:
        a = np.zeros((1,) + a.shape[1:], dtype=a.dtype)
        fspace.select_none()
        mspace = h5s.create_simple(a.shape)
        mspace.select_none()
    dxpl = h5p.create(h5p.DATASET_XFER)
    dxpl.set_dxpl_mpio(h5fd.MPIO_COLLECTIVE)
    ds.id.write(mspace, fspace, np.ascontiguousarray(a), dxpl=dxpl)


def open_writer(directory, config_text: str = "", config_path: str = "", sim=None,
                append_after: int | None = None):
    """The snapshot writer for this run (collective): :class:`SharedSnapshotWriter` or the
    per-rank :class:`parsim.output.SnapshotWriter`, as :func:`choose_layout` says."""
    from .output import SnapshotWriter

    size = sim.net.size if sim is not None else 1
    cls = SharedSnapshotWriter if choose_layout(size) == "shared" else SnapshotWriter
    return cls(directory, config_text, config_path, sim, append_after=append_after)
