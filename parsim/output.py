"""HDF5 snapshots of a run: layout version 1, documented in ``docs/output.md``.

``DIR/snapshots.h5``::

    /                         attrs: format = "parsim-snapshots", format_version = 1,
                                     parsim_version, created, config_path
    /config                   the TOML text of the run's configuration (str dataset)
    /materials                names (str dataset) and the pair table `/materials/table`
    /snapshots/<step:010d>/   attrs: step, time, n_bodies, n_contacts, status ("ok" | "failed")
        uid int64[n], shape int8[n], params float64[n,3], position float64[n,3],
        orientation float64[n,4], velocity float64[n,3], angular_velocity float64[n,3],
        material int32[n], flags uint8[n], wraps int32[n,3]

Bodies in a snapshot are sorted by uid; planes are included (shape code 3). The file is flushed
after every snapshot, so a run that stops keeps everything written before.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

import h5py
import numpy as np

from . import __version__

FORMAT = "parsim-snapshots"
FORMAT_VERSION = 1
FIELDS = ("uid", "shape", "params", "position", "orientation", "velocity", "angular_velocity",
          "material", "flags", "wraps")


class SnapshotWriter:
    """Appends snapshots of a :class:`parsim.Simulation` to ``DIR/snapshots.h5``.

    On several ranks, construction and :meth:`write` are collective: the bodies are gathered on
    rank 0, which alone writes (an interim layout for small runs; parallel output is planned)."""

    def __init__(self, directory, config_text: str = "", config_path: str = "", sim=None,
                 append_after: int | None = None):
        self.dir = Path(directory)
        self.path = self.dir / "snapshots.h5"
        self.file = None
        self.seconds = 0.0           # spent writing (and gathering) snapshots
        if sim is not None and sim.net.rank != 0:
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
            self.file.flush()
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
        self.file.create_group("snapshots")
        self.file.flush()

    def write(self, sim, status: str = "ok") -> None:
        t0 = time.perf_counter()
        try:
            self._write(sim, status)
        finally:
            self.seconds += time.perf_counter() - t0

    def _write(self, sim, status: str) -> None:
        s = sim.state(gather=True)
        n_contacts = sim.net.isum(sim.n_contacts)
        if self.file is None:
            return
        name = f"{sim.step_count:010d}"
        snaps = self.file["snapshots"]
        if name in snaps:
            del snaps[name]
        g = snaps.create_group(name)
        for k in FIELDS:
            g.create_dataset(k, data=s[k])
        g.attrs["step"] = sim.step_count
        g.attrs["time"] = sim.time
        g.attrs["n_bodies"] = s["uid"].shape[0]
        g.attrs["n_contacts"] = n_contacts
        g.attrs["status"] = status
        self.file.flush()

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
        if self.file:
            self.file.close()
