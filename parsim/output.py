"""HDF5 snapshots of a run, written in parallel, with an XDMF index for ParaView.

Layout version 2 (``docs/output.md``). ``DIR/snapshots.h5`` is the file readers open::

    /                         attrs: format = "parsim-snapshots", format_version = 2,
                                     parsim_version, created, config_path,
                                     domain_lo, domain_hi (float64[3]; -inf / inf: unbounded),
                                     periodic (uint8[3]), gravity (float64[3])
    /config                   the TOML text of the run's configuration (str dataset)
    /materials                names (str dataset) and the pair table `/materials/table`;
                              attrs: density (float64[materials])
    /timings/<phase>          (min, mean, max) seconds over the ranks, at the end of a run
    /snapshots/<step:010d>/   attrs: step, time, n_bodies, n_contacts, status ("ok" | "failed"),
                                     ranks, counts (bodies per rank)
        uid int64[n], shape int8[n], params float64[n,3], position float64[n,3],
        orientation float64[n,4], velocity float64[n,3], angular_velocity float64[n,3],
        material int32[n], flags uint8[n], wraps int32[n,3], rank int32[n]
        vertex_index int32[n] (0..n-1: the XDMF Polyvertex connectivity)

On one rank the fields are ordinary datasets, sorted by uid. On several ranks every rank writes
its own bodies (sorted by uid within the rank) to its own file
``DIR/ranks/seg<first step>/rank<r>.h5`` (same group layout), and rank 0 writes only the
metadata and *virtual datasets* that join the rank pieces in rank order: no body goes through
rank 0. Readers see one dataset per field; :func:`parsim.io.open_run` sorts by uid and checks that
every source file is present (HDF5 would silently return fill values for a missing one). Files are
written with the default (earliest) HDF5 format version: virtual datasets written with
``libver='latest'`` crash ParaView 5.11's reader.

``DIR/snapshots.xmf`` (XDMF 3, rewritten after every snapshot) lists the snapshots as a time
series of Polyvertex grids with the fields uid, shape, params, velocity, angular_velocity, rank
and material,
so ParaView opens the run directly.
"""

from __future__ import annotations

import datetime
import os
import time
from pathlib import Path

import h5py
import numpy as np

from . import __version__

FORMAT = "parsim-snapshots"
FORMAT_VERSION = 2
FIELDS = ("uid", "shape", "params", "position", "orientation", "velocity", "angular_velocity",
          "material", "flags", "wraps")
#: fields of a snapshot in the file (the body fields plus the owning rank)
FILE_FIELDS = FIELDS + ("rank",)


class SnapshotWriter:
    """Appends snapshots of a :class:`parsim.Simulation` to ``DIR/snapshots.h5``.

    On several ranks, construction and :meth:`write` are collective (a small ``allgather`` of
    the per-rank counts); each rank writes its bodies to its own file."""

    def __init__(self, directory, config_text: str = "", config_path: str = "", sim=None,
                 append_after: int | None = None):
        self.dir = Path(directory)
        self.path = self.dir / "snapshots.h5"
        self.xdmf = self.dir / "snapshots.xmf"
        self.file = None             # the master file (rank 0)
        self.part = None             # this rank's file (several ranks)
        self.seconds = 0.0           # spent writing snapshots
        self._index = None           # the XDMF index in memory (rank 0)
        self.rank = sim.net.rank if sim is not None else 0
        self.size = sim.net.size if sim is not None else 1
        if self.size > 1:
            seg = 0 if append_after is None else int(append_after)
            self.part_rel = Path("ranks") / f"seg{seg:010d}" / f"rank{self.rank:05d}.h5"
            part = self.dir / self.part_rel
            part.parent.mkdir(parents=True, exist_ok=True)
            self.part = h5py.File(part, "w")
            self.part.attrs["format"] = FORMAT + "-part"
            self.part.attrs["rank"] = self.rank
            self.part.create_group("snapshots")
        if self.rank != 0:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        if append_after is not None and self.path.exists():
            # a restart into the run's directory: keep the snapshots up to the checkpoint
            self.file = h5py.File(self.path, "a")
            if self.file.attrs.get("format") != FORMAT or "snapshots" not in self.file:
                self.file.close()
                raise ValueError(f"{self.path}: exists but is not a parsim snapshot file; "
                                 "choose another --output directory")
            snaps = self.file["snapshots"]
            for name in list(snaps.keys()):
                if int(name) > append_after:
                    del snaps[name]
            add_sim_attrs(self.file, sim, only_missing=True)
            self.file.flush()
            self._write_xdmf()
            return
        self.file = h5py.File(self.path, "w")
        a = self.file.attrs
        a["format"] = FORMAT
        a["format_version"] = FORMAT_VERSION
        a["parsim_version"] = __version__
        a["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        a["config_path"] = str(config_path)
        self.file.create_dataset("config", data=config_text, dtype=h5py.string_dtype())
        if sim is not None:
            g = self.file.create_group("materials")
            g.create_dataset("names", data=[m.name for m in sim.materials],
                             dtype=h5py.string_dtype())
            g.create_dataset("table", data=sim.table)
            add_sim_attrs(self.file, sim)
        self.file.create_group("snapshots")
        self.file.flush()

    def write(self, sim, status: str = "ok") -> None:
        t0 = time.perf_counter()
        try:
            self._write(sim, status)
        finally:
            self.seconds += time.perf_counter() - t0

    def _write(self, sim, status: str) -> None:
        name = f"{sim.step_count:010d}"
        if self.size == 1:
            s = sim.state()
            s["rank"] = np.zeros(s["uid"].shape[0], dtype=np.int32)
            g = self._new_group(self.file, name)
            for k in FILE_FIELDS:
                g.create_dataset(k, data=s[k])
            self._finish(g, sim, status, [s["uid"].shape[0]], sim.count_contacts())
            return
        s = sim.state(local=True)
        s["rank"] = np.full(s["uid"].shape[0], self.rank, dtype=np.int32)
        g = self._new_group(self.part, name)
        for k in FILE_FIELDS:
            g.create_dataset(k, data=s[k])
        self.part.flush()
        counts = sim.net.allgather(int(s["uid"].shape[0]))
        contacts = sim.count_contacts()
        if self.file is None:
            return
        g = self._new_group(self.file, name)
        total = int(sum(counts))
        offsets = np.concatenate([[0], np.cumsum(counts)])
        for k in FILE_FIELDS:
            ds = self.part["snapshots"][name][k]
            layout = h5py.VirtualLayout(shape=(total,) + ds.shape[1:], dtype=ds.dtype)
            for r, n in enumerate(counts):
                if n == 0:
                    continue
                src = (self.part_rel.parent / f"rank{r:05d}.h5").as_posix()
                layout[offsets[r]:offsets[r + 1]] = h5py.VirtualSource(
                    src, f"snapshots/{name}/{k}", shape=(n,) + ds.shape[1:])
            g.create_virtual_dataset(k, layout, fillvalue=_fill(ds.dtype))
        self._finish(g, sim, status, counts, contacts)

    @staticmethod
    def _new_group(f, name):
        snaps = f["snapshots"]
        if name in snaps:
            del snaps[name]
        return snaps.create_group(name)

    def _finish(self, g, sim, status, counts, contacts) -> None:
        total = int(sum(counts))
        g.create_dataset("vertex_index", data=np.arange(total, dtype=np.int32))
        g.attrs["step"] = sim.step_count
        g.attrs["time"] = sim.time
        g.attrs["n_bodies"] = total
        g.attrs["n_contacts"] = contacts
        g.attrs["status"] = status
        g.attrs["ranks"] = len(counts)
        g.attrs["counts"] = np.array(counts, dtype=np.int64)
        self.file.flush()
        self._write_xdmf(g.name.rsplit("/", 1)[-1])

    def _write_xdmf(self, name: str | None = None) -> None:
        """Rewrite the XDMF index after snapshot ``name`` was written (None: all of them, read
        once from the file, on opening)."""
        if name is None or self._index is None:
            self._index = XdmfIndex(self.xdmf, self.file["snapshots"])
        else:
            self._index.add(name, self.file["snapshots"][name])
        self._index.write()

    def write_timings(self, table: dict) -> None:
        """Per-phase (min, mean, max) seconds over the ranks, as waLBerla's timing tree."""
        if self.file is None:
            return
        if "timings" in self.file:
            del self.file["timings"]
        g = self.file.create_group("timings")
        for k, v in table.items():
            g.create_dataset(k, data=np.array(v, dtype=np.float64))
        self.file.flush()

    def close(self) -> None:
        if self.part is not None:
            self.part.close()
            self.part = None
        if self.file:
            self.file.close()


def add_sim_attrs(f, sim, only_missing: bool = False) -> None:
    """Write the simulation's geometry and gravity to the root of ``f`` (what a reader needs
    besides the bodies when the run has no config text: box lengths of periodic axes, the
    cross-section, the up direction; an unbounded axis has -inf / inf) and the materials'
    densities to ``/materials`` (``only_missing``: keep the values a file has, add them to an
    older file)."""
    if sim is None:
        return
    attrs = {"domain_lo": np.asarray(sim.lo, dtype=np.float64),
             "domain_hi": np.asarray(sim.hi, dtype=np.float64),
             "periodic": np.asarray(sim.periodic, dtype=np.uint8),
             "gravity": np.asarray(sim.gravity, dtype=np.float64)}
    for k, v in attrs.items():
        if not (only_missing and k in f.attrs):
            f.attrs[k] = v
    g = f.get("materials")
    if g is not None and not (only_missing and "density" in g.attrs):
        dens = [float(m.density) for m in sim.materials]
        if len(dens) == len(g["names"]):
            g.attrs["density"] = np.array(dens, dtype=np.float64)


def _fill(dtype):
    """A fill value no real body has (uids, ranks: -1), so gaps are visible."""
    if np.issubdtype(dtype, np.signedinteger):
        return -1
    if np.issubdtype(dtype, np.floating):
        return np.nan
    return 0


_XDMF_TYPES = {"i": "Int", "u": "UInt", "f": "Float"}


def _xdmf_item(name: str, field: str, dtype, dims: str) -> str:
    kind = _XDMF_TYPES[np.dtype(dtype).kind]
    size = np.dtype(dtype).itemsize
    if size == 1:
        kind = "Char" if kind == "Int" else "UChar"
    return (f'          <DataItem Dimensions="{dims}" NumberType="{kind}" Precision="{size}" '
            f'Format="HDF">snapshots.h5:/snapshots/{name}/{field}</DataItem>\n')


class XdmfIndex:
    """The XDMF index of a snapshot file (``snapshots.xmf``, for ParaView), kept in memory:
    a new snapshot adds its grid and the index is rewritten from memory (atomically). It was
    rebuilt from every earlier snapshot's metadata in the HDF5 file at each snapshot until
    2026-11-24, quadratic in the number of snapshots: 51 snapshots of 206 bodies took 6.1 s of
    a 6.3 s run, 400 did not finish in 170 s."""

    def __init__(self, path: Path, snaps):
        self.path = Path(path)
        self.grids = {}
        for name in snaps.keys():
            self.add(name, snaps[name])

    def add(self, name: str, g) -> None:
        n = int(g.attrs["n_bodies"])
        self.grids[name] = None if n == 0 else _xdmf_grid(
            name, float(g.attrs["time"]), n, {k: (g[k].dtype, g[k].shape[1:])
                                             for k in FILE_FIELDS})

    def write(self) -> None:
        grids = [self.grids[k] for k in sorted(self.grids) if self.grids[k] is not None]
        text = ('<?xml version="1.0" ?>\n<Xdmf Version="3.0">\n  <Domain>\n'
                '    <Grid Name="parsim" GridType="Collection" CollectionType="Temporal">\n'
                + "".join(grids) + "    </Grid>\n  </Domain>\n</Xdmf>\n")
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.path)


def _xdmf_grid(name: str, t: float, n: int, fields: dict) -> str:
    out = [f'      <Grid Name="step{int(name)}" GridType="Uniform">\n'
           f'        <Time Value="{t!r}"/>\n'
           f'        <Topology TopologyType="Polyvertex" NumberOfElements="{n}" '
           f'NodesPerElement="1">\n'
           + _xdmf_item(name, "vertex_index", np.int32, f"{n}") +
           '        </Topology>\n'
           '        <Geometry GeometryType="XYZ">\n'
           + _xdmf_item(name, "position", np.float64, f"{n} 3") +
           '        </Geometry>\n']
    for k in ("uid", "shape", "params", "velocity", "angular_velocity", "rank", "material"):
        dtype, trailing = fields[k]
        kind = "Vector" if trailing == (3,) else "Scalar"
        dims = f"{n} 3" if trailing == (3,) else f"{n}"
        out.append(f'        <Attribute Name="{k}" AttributeType="{kind}" Center="Node">\n'
                   + _xdmf_item(name, k, dtype, dims) + '        </Attribute>\n')
    out.append("      </Grid>\n")
    return "".join(out)
